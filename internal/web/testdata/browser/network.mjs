// The notebook's network panel in Debian's chromium (playwright-core): a session made with
// an allowlist shows its policy; a cell's request to a host it denies shows in the
// connections, refused, with the reason. Run by internal/web's
// TestBrowserNetwork, which starts the server and makes the session.
//
// Environment: CELLBOX_URL, CELLBOX_KEY, CHROMIUM, SESSION_ID, SECRET_VALUE (a secret
// header's value, which the page must never show), CELLBOX_SCREENSHOTS (optional: a folder
// for a screenshot of the panel).

import { chromium } from 'playwright-core';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const url = env('CELLBOX_URL');
const sid = env('SESSION_ID');
const step = (s) => console.error(`network: ${s}`);
const check = (ok, what) => {
  if (!ok) throw new Error(`check failed: ${what}`);
};

const browser = await chromium.launch({ executablePath: env('CHROMIUM'), args: ['--no-sandbox'] });
const failures = [];
let page;
try {
  const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
  page = await context.newPage();
  page.setDefaultTimeout(60_000);
  page.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && !/401|Unauthorized/.test(m.text()) && failures.push(`console error: ${m.text()}`));

  step('the notebook of the session, with the key');
  await page.goto(`${url}/#notebook/${encodeURIComponent(sid)}`);
  const keyBox = page.getByLabel('API key');
  await keyBox.fill(env('CELLBOX_KEY'));
  await page.getByRole('button', { name: 'Use key' }).click();
  await keyBox.waitFor({ state: 'hidden' });

  step('the policy: the mode, the allowed and refused entries, the domains with credentials');
  const net = page.getByRole('region', { name: 'Network' });
  await net.getByText('Only the destinations allowed').waitFor();
  const list = async (label) => (await net.getByRole('list', { name: label }).locator('li').allInnerTexts()).join(' ');
  check((await list('Allowed')) === 'pypi.org *.pythonhosted.org:443', `allowed: ${await list('Allowed')}`);
  check((await list('Denied')) === 'evil.pypi.org', `denied: ${await list('Denied')}`);
  check((await list('Credentials added for')) === 'api.github.com', `credentials: ${await list('Credentials added for')}`);
  await net.getByText('No connections yet.').waitFor();

  // A denied name is refused before anything is resolved or dialed: the test sends nothing
  // out of the machine.
  step('a cell asks the proxy for a host the session denies: 403');
  const notebook = page.locator('section.notebook');
  await notebook.getByRole('textbox', { name: 'Code of cell 1' }).fill(
    [
      'import urllib.request, urllib.error',
      'try:',
      "    urllib.request.urlopen('http://evil.pypi.org/', timeout=30)",
      'except urllib.error.HTTPError as e:',
      "    print('proxy answered', e.code)",
    ].join('\n'),
  );
  await notebook.getByRole('button', { name: 'Run cell' }).first().click();
  await notebook.getByText('proxy answered 403').waitFor();

  step('the connection shows, refused, with its reason, without a refresh by hand');
  const conn = net.getByRole('list', { name: 'Connections' }).locator('li').first();
  await conn.getByText('evil.pypi.org:80', { exact: true }).waitFor();
  check((await conn.locator('.decision').innerText()) === 'refused', `decision: ${await conn.locator('.decision').innerText()}`);
  const reason = await conn.locator('.reason').innerText();
  check(reason === 'evil.pypi.org:80 is refused by this session\'s deny entry "evil.pypi.org"', `reason: ${reason}`);

  if (process.env.CELLBOX_SCREENSHOTS) await page.screenshot({ path: `${process.env.CELLBOX_SCREENSHOTS}/notebook-network-1440.png` });

  step('the secret\'s value is nowhere on the page');
  check(!(await page.content()).includes(env('SECRET_VALUE')), 'the secret value is not on the page');

  step('the sessions view says the session has an allowlist');
  await page.getByRole('link', { name: 'Sessions' }).click();
  await page.locator('section.sessions').getByText('internet: allowlist').waitFor();

  check(failures.length === 0, failures.join('; '));
  step('all checks passed');
} catch (e) {
  const text = await page?.locator('body').innerText().catch(() => '');
  console.error(`network: the page when it failed:\n${text}`);
  throw e;
} finally {
  await browser.close();
}

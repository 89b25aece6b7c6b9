// Drives cellbox's web page in Debian's chromium with playwright-core: the path a person
// takes (key, upload, ask, approve, see the code, output and plot, answer, follow-up, stop a
// long cell, the notebook on the same session, its completion and help, cells in JavaScript
// and Bash, an .ipynb opened and downloaded with its cells' languages). Run by internal/web's
// TestBrowser, which starts the server and a stand-in model API; it exits non-zero with the
// failed check.
//
// Environment: CELLBOX_URL, CELLBOX_KEY, CHROMIUM, DATA_CSV, MEAN_SPEED (what the follow-up
// must show), NOTEBOOK_OUT (where the downloaded .ipynb goes, for the test to validate),
// CELLBOX_SCREENSHOTS (optional: a folder for the docs' screenshots).

import { chromium } from 'playwright-core';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const url = env('CELLBOX_URL');
const key = env('CELLBOX_KEY');
const shots = process.env.CELLBOX_SCREENSHOTS || '';
const step = (s) => console.error(`browser: ${s}`);
const check = (ok, what) => {
  if (!ok) throw new Error(`check failed: ${what}`);
};

// shoot saves a screenshot of the whole page at width: the window made as tall as the page,
// so that the sticky bars sit where a person sees them.
async function shoot(page, name, width, dark = false) {
  await page.emulateMedia({ colorScheme: dark ? 'dark' : 'light' });
  await page.setViewportSize({ width, height: 900 });
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  await page.setViewportSize({ width, height: Math.min(height, 4000) });
  await page.evaluate(() => scrollTo(0, 0));
  await page.screenshot({ path: join(shots, name) });
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize({ width: 1440, height: 1000 });
}

const browser = await chromium.launch({ executablePath: env('CHROMIUM'), args: ['--no-sandbox'] });
const failures = [];
let page;
let context;
try {
  context = await browser.newContext({ viewport: { width: 1440, height: 1000 }, acceptDownloads: true });
  page = await context.newPage();
  page.setDefaultTimeout(30_000);
  const external = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(url) && !r.url().startsWith('data:') && !r.url().startsWith('blob:')) external.push(r.url());
  });
  page.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
  let hostile = false; // after hostile content arrives, the CSP's reports of what it refused are expected
  page.on('console', (m) => {
    const t = m.text();
    if (m.type() !== 'error' || /401|Unauthorized/.test(t) || (hostile && /Content Security Policy/.test(t))) return;
    failures.push(`console error: ${t}`);
  });

  step('the page asks for the API key, refuses a wrong one, takes the right one');
  await page.goto(url);
  const keyBox = page.getByLabel('API key');
  await keyBox.fill('cbx_wrong0000000000000000000000000000000000');
  await page.getByRole('button', { name: 'Use key' }).click();
  await page.getByText(/not one of this server's|wrong|not accepted/i).first().waitFor();
  await keyBox.fill(key);
  await page.getByRole('button', { name: 'Use key' }).click();
  await keyBox.waitFor({ state: 'hidden' });
  check(await page.evaluate((k) => !Object.values(localStorage).includes(k), key), 'the key is not in localStorage');
  check(await page.evaluate((k) => Object.values(sessionStorage).includes(k), key), 'the key is kept in sessionStorage');

  const chat = page.locator('section.chat');
  const message = page.getByRole('textbox', { name: 'Message' });

  step('the provider and model offered are the server\'s');
  await chat.getByLabel('Provider').waitFor();
  check((await chat.getByLabel('Provider').inputValue()) === 'openai', 'the provider is the server\'s');
  check((await chat.getByLabel('Model').inputValue()) === env('DEFAULT_MODEL'), 'the model is the server\'s default');

  step('ask mode on; upload the CSV (slowly: the message is sent once it is there)');
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  const throttle = (bytesPerSecond) =>
    cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: bytesPerSecond });
  await throttle(100 * 1024);
  const ask = chat.getByRole('checkbox', { name: /ask/i });
  if (!(await ask.isChecked())) await ask.check();
  const [chooser] = await Promise.all([page.waitForEvent('filechooser'), page.getByRole('button', { name: 'Upload files' }).click()]);
  await chooser.setFiles(env('DATA_CSV'));
  await chat.getByText('traffic_accidents.csv').first().waitFor();

  step('ask (Shift+Enter is a new line, Enter sends)');
  await message.fill('Which time of day has the most accidents?');
  await message.press('Shift+Enter');
  await message.pressSequentially('Plot it.');
  check((await message.inputValue()).includes('\n'), 'Shift+Enter made a new line');
  await message.press('Enter'); // during the upload: sent once the file is there
  await chat.getByText('Sending when the uploads are done').waitFor();
  await throttle(-1);

  step('the cell waits for approval; its code is highlighted');
  const cell = chat.locator('article.cell').first();
  await cell.getByRole('button', { name: 'Run' }).waitFor();
  await cell.getByRole('button', { name: 'Skip' }).waitFor();
  await chat.getByRole('button', { name: 'Stop' }).waitFor();
  check((await cell.locator('code').innerText()).includes("pd.read_csv('/mnt/data/traffic_accidents.csv')"), 'the code is shown');
  check((await cell.locator('code .hljs-keyword').count()) > 0, 'the code is highlighted');
  await cell.getByRole('button', { name: 'Run' }).click();

  step('the output streams in, the plot decodes and opens at full size, the file it wrote downloads');
  await cell.getByText('(8000, 10)').waitFor();
  const img = cell.locator('img').first();
  await img.waitFor();
  const size = await img.evaluate(async (i) => {
    await i.decode();
    return { natural: i.naturalWidth, shown: i.getBoundingClientRect().width };
  });
  check(size.natural >= 400, `the plot decodes (naturalWidth ${size.natural})`);
  await img.click();
  const full = page.locator('dialog[open] img');
  await full.waitFor();
  const fullWidth = await full.evaluate(async (i) => (await i.decode(), i.naturalWidth));
  check(fullWidth === size.natural, `the full-size view shows the same image (${fullWidth} vs ${size.natural})`);
  await page.keyboard.press('Escape');
  await full.waitFor({ state: 'hidden' });
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    cell.getByRole('button', { name: /Download .*accidents_by_hour\.png/ }).click(),
  ]);
  const saved = await download.path();
  const png = readFileSync(saved);
  check(png.subarray(1, 4).toString() === 'PNG', 'the downloaded file is a PNG');
  check(download.suggestedFilename() === 'accidents_by_hour.png', `download name ${download.suggestedFilename()}`);

  step('the answer, rendered as Markdown');
  const answer = chat.locator('.markdown strong', { hasText: /hour \d+/ });
  await answer.waitFor();
  await chat.getByRole('button', { name: 'Send' }).waitFor();
  check((await chat.locator('.markdown li').count()) >= 2, 'the answer\'s list is rendered');
  if (shots) {
    await shoot(page, 'chat-1440.png', 1440);
    await shoot(page, 'chat-390.png', 390);
    await shoot(page, 'chat-1440-dark.png', 1440, true);
  }
  for (const width of [390, 1440]) {
    await page.setViewportSize({ width, height: 900 });
    const over = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    check(over <= 0, `no horizontal scrolling at ${width} px (${over} px too wide)`);
  }

  step('a follow-up uses a variable from before');
  await message.fill('What is the average speed?');
  await message.press('Enter');
  const second = chat.locator('article.cell').nth(1);
  await second.getByRole('button', { name: 'Run' }).click();
  await second.getByText(env('MEAN_SPEED')).waitFor();
  check((await second.getByText('NameError').count()) === 0, 'the follow-up found df');
  await chat.locator('.markdown strong', { hasText: env('MEAN_SPEED') }).waitFor();
  await chat.getByRole('button', { name: 'Send' }).waitFor();

  step('Stop ends a long cell; hostile HTML from the model and from user code is defused');
  hostile = true;
  await message.fill('Now count slowly to a thousand.');
  await message.press('Enter');
  const third = chat.locator('article.cell').nth(2);
  await chat.getByText('Counting now.').waitFor();
  await third.getByText('counting').waitFor();
  const defused = await page.evaluate(() => ({
    pwned: window.pwned,
    fields: document.querySelectorAll('section.chat .markdown input, section.chat .out input').length,
    classes: document.querySelectorAll('section.chat .markdown .dropzone, section.chat .out .dropzone, section.chat .out .primary').length,
    ids: document.querySelectorAll('section.chat .out [id], section.chat .markdown [id]').length,
    scriptLinks: [...document.querySelectorAll('section.chat a')].filter((a) => /^\s*javascript:/i.test(a.getAttribute('href') || '')).length,
    handlers: [...document.querySelectorAll('section.chat *')].filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length,
  }));
  check(
    defused.pwned === undefined && !defused.fields && !defused.classes && !defused.ids && !defused.scriptLinks && !defused.handlers,
    `hostile HTML defused: ${JSON.stringify(defused)}`,
  );
  await third.getByRole('button', { name: 'Run' }).click();
  await third.getByText('tick 3').waitFor();
  await chat.getByRole('button', { name: 'Stop' }).click();
  await chat.getByRole('button', { name: 'Send' }).waitFor();
  const conv = await page.evaluate(() => location.hash);
  const sessions = await (await fetch(url + '/v1/sessions', { headers: { Authorization: 'Bearer ' + key } })).json();
  check(sessions.sessions.length === 1, `one session (${sessions.sessions.length})`);
  const sid = sessions.sessions[0].id;
  let state = '';
  for (let i = 0; i < 50 && state !== 'idle'; i++) {
    state = (await (await fetch(`${url}/v1/sessions/${sid}`, { headers: { Authorization: 'Bearer ' + key } })).json()).state;
    if (state !== 'idle') await new Promise((r) => setTimeout(r, 200));
  }
  check(state === 'idle', `the session is idle after Stop (${state}; ${conv})`);
  const ticks = await third.locator('pre.out.stdout').innerText();
  check(!ticks.includes('tick 999'), 'the long cell did not run to its end');
  check((await third.getByText('KeyboardInterrupt').count()) > 0, 'the cell shows it was interrupted');
  await chat.getByText(/stopped/i).first().waitFor();

  step('the notebook on the same session: the model\'s cells, and a new one run by hand');
  await page.getByRole('link', { name: 'Notebook' }).click();
  const notebook = page.locator('section.notebook');
  await notebook.getByText(sid).first().waitFor();
  const editors = notebook.getByRole('textbox', { name: /^Code of cell/ });
  await page.waitForFunction(() => [...document.querySelectorAll('section.notebook textarea')].some((t) => t.value.includes('read_csv')));
  const codes = await editors.evaluateAll((ts) => ts.map((t) => t.value));
  check(codes.some((c) => c.includes("pd.read_csv('/mnt/data/traffic_accidents.csv')")), 'the notebook shows the model\'s code');
  check(codes.some((c) => c.includes('average_speed')), 'the notebook shows the follow-up\'s code');
  await notebook.getByRole('button', { name: 'Add cell' }).click();
  const mine = editors.last();
  await mine.fill('print(df.shape, by_hour.idxmax())');
  await notebook.getByRole('button', { name: 'Run cell' }).last().click();
  await notebook.getByText(/\(8000, 10\) \d+/).waitFor();

  step('a cell defines a tool: the Tools panel shows its name, description, schema and source, as text');
  const tools = page.getByRole('region', { name: 'Tools' });
  await tools.getByText(/^No tools yet/).waitFor();
  await notebook.getByRole('button', { name: 'Add cell' }).click();
  await editors.last().fill(
    [
      'from cellbox import tool',
      '',
      '@tool',
      'def accidents_at(hour: int) -> int:',
      '    """Accidents at an hour of the day. <img src=x onerror="window.pwned = 4"><b id="toolbold">bold</b>',
      '',
      '    Args:',
      '        hour: 0 to 23',
      '    """',
      '    return int(by_hour.get(hour, 0))',
    ].join('\n'),
  );
  await notebook.getByRole('button', { name: 'Run cell' }).last().click();
  const item = tools.getByRole('listitem', { name: 'Tool accidents_at' });
  await item.waitFor();
  const description = await item.locator('.description').innerText();
  check(description.startsWith('Accidents at an hour of the day. <img src=x onerror="window.pwned = 4"><b id="toolbold">bold</b>'),
    `the description, as text: ${description}`);
  check((await page.locator('#toolbold').count()) === 0 && (await item.locator('img').count()) === 0, 'the description is not HTML');
  await item.getByText('Input schema').click();
  const schema = JSON.parse(await item.getByLabel('Input schema of accidents_at').innerText());
  check(schema.type === 'object' && schema.properties?.hour?.type === 'integer' && schema.required?.includes('hour'), `the schema: ${JSON.stringify(schema)}`);
  await item.getByText('Source', { exact: true }).click();
  check((await item.getByLabel('Source of accidents_at').innerText()).includes('def accidents_at(hour: int) -> int:'), 'the source');
  check(await page.evaluate(() => window.pwned === undefined), 'no handler of the docstring ran');
  check((await item.getByRole('button', { name: /^Save / }).count()) === 0, 'a tool not proposed for the library has no Save button');

  step('a tool the code proposes for the library is saved only when the person saves it');
  const library = async (name) => (await fetch(`${url}/v1/saved-tools/${name}`, { headers: { Authorization: `Bearer ${key}` } })).status;
  await notebook.getByRole('button', { name: 'Add cell' }).click();
  await editors.last().fill(['from cellbox import tool', '', '@tool(save=True)', 'def hours_in_day() -> int:', '    """Hours in a day."""', '    return 24'].join('\n'));
  await notebook.getByRole('button', { name: 'Run cell' }).last().click();
  const proposed = tools.getByRole('listitem', { name: 'Tool hours_in_day' });
  await proposed.waitFor();
  check((await library('hours_in_day')) === 404, 'the code saved the tool by itself');
  await proposed.getByRole('button', { name: 'Save hours_in_day to the library' }).click();
  await proposed.getByText('saved', { exact: true }).waitFor();
  check((await library('hours_in_day')) === 200, 'the saved tool is in the library');
  if (shots) {
    await shoot(page, 'notebook-1440.png', 1440);
    await shoot(page, 'notebook-390.png', 390);
  }

  step('a file dropped onto the notebook goes to the workspace');
  const dropped = await page.evaluateHandle(() => {
    const dt = new DataTransfer();
    dt.items.add(new File(['dropped on the page\n'], 'dropped.txt', { type: 'text/plain' }));
    return dt;
  });
  await notebook.dispatchEvent('dragover', { dataTransfer: dropped });
  await notebook.dispatchEvent('drop', { dataTransfer: dropped });
  await notebook.getByRole('button', { name: /Download .*dropped\.txt/ }).first().waitFor();
  const body = await (await fetch(`${url}/v1/sessions/${sid}/files/dropped.txt`, { headers: { Authorization: 'Bearer ' + key } })).text();
  check(body === 'dropped on the page\n', `the dropped file's content: ${JSON.stringify(body)}`);

  step('the notebook deletes a file and restarts the kernel');
  page.on('dialog', (d) => d.accept()); // the confirmations of Delete, Restart and End
  await notebook.getByRole('button', { name: /^Delete .*dropped\.txt/ }).click();
  await notebook.getByRole('button', { name: /Download .*dropped\.txt/ }).waitFor({ state: 'detached' });
  const gone = await fetch(`${url}/v1/sessions/${sid}/files/dropped.txt`, { headers: { Authorization: 'Bearer ' + key } });
  check(gone.status === 404, `the deleted file answers ${gone.status}`);
  await notebook.getByRole('button', { name: 'Restart' }).click();
  await notebook.getByText(/variables are gone/).waitFor();
  await notebook.getByRole('button', { name: 'Add cell' }).click();
  await editors.last().fill("print('df' in globals())");
  await notebook.getByRole('button', { name: 'Run cell' }).last().click();
  await notebook.locator('pre.out.stdout', { hasText: /^\s*False\s*$/ }).waitFor();
  // The restart dropped the unsaved tool, and defined the saved one again.
  await tools.getByRole('listitem', { name: 'Tool accidents_at' }).waitFor({ state: 'detached' });
  await tools.getByRole('listitem', { name: 'Tool hours_in_day' }).getByText('saved', { exact: true }).waitFor();

  step('Tab completes a name from the kernel (one is put in, several are a list) and indents; Shift+Tab shows a docstring');
  await notebook.getByRole('button', { name: 'Add cell' }).click();
  await editors.last().fill('completion_alpha = 1\ncompletion_beta = 2\ndef completion_fn(x):\n    """Doubles x, for the completion test."""\n    return 2 * x');
  await notebook.getByRole('button', { name: 'Run cell' }).last().click();
  await notebook.locator('article.cell').last().locator('.count', { hasText: /\[\d+\]/ }).waitFor();
  await notebook.getByRole('button', { name: 'Add cell' }).click();
  const ed = editors.last();
  const completions = notebook.getByRole('listbox', { name: 'Completions' });
  const typeAndTab = async (text) => {
    await ed.fill(text);
    await ed.press('Tab');
  };
  // valueIs waits for the editor to hold want (completions arrive from the kernel).
  const valueIs = async (want) => {
    const el = await ed.elementHandle();
    await page.waitForFunction(([el, want]) => el.value === want, [el, want]).catch(async () => {
      throw new Error(`check failed: the editor holds ${JSON.stringify(await ed.inputValue())}, not ${JSON.stringify(want)}`);
    });
  };
  await typeAndTab("'😀', completion_f"); // the API counts code points, the textarea UTF-16 units
  await valueIs("'😀', completion_fn");
  await typeAndTab('x = completion_');
  await completions.waitFor();
  const offered = await completions.getByRole('option').allInnerTexts();
  for (const name of ['completion_alpha', 'completion_beta', 'completion_fn']) check(offered.some((o) => o.startsWith(name)), `${name} is offered: ${offered}`);
  await ed.press('b'); // typing on narrows the list
  await completions.getByRole('option').nth(1).waitFor({ state: 'detached' });
  await ed.press('Enter');
  await valueIs('x = completion_beta');
  await completions.waitFor({ state: 'detached' });
  await typeAndTab('completion_');
  await completions.getByRole('option', { name: /completion_alpha/ }).click();
  await valueIs('completion_alpha');
  await typeAndTab('completion_');
  await completions.waitFor();
  await ed.press('Escape');
  await completions.waitFor({ state: 'detached' });
  await ed.press('Tab');
  await completions.waitFor();
  await ed.press('ArrowDown');
  const picked = (await completions.locator('[aria-selected=true] .match').innerText()).trim();
  await ed.press('Tab');
  await valueIs(picked);
  await ed.fill('if True:\n');
  await ed.press('Tab'); // after only whitespace: an indent
  await valueIs('if True:\n    ');
  await ed.fill('completion_fn');
  await ed.press('Shift+Tab');
  const help = notebook.getByRole('note', { name: 'Help' });
  await help.getByText('Doubles x, for the completion test.').waitFor();
  await ed.press('Escape');
  await help.waitFor({ state: 'detached' });
  await ed.press('Escape'); // then Tab leaves the editor, as it would without completion
  await ed.press('Tab');
  check(await ed.evaluate((el) => document.activeElement !== el), 'Escape, then Tab moves the focus on');

  step('a cell in JavaScript and one in Bash run in their kernels; a new cell takes the language above; there Tab only indents');
  const lastCell = notebook.locator('article.cell').last();
  const language = lastCell.getByRole('combobox', { name: /^Language of cell/ });
  await notebook.getByRole('button', { name: 'Add cell' }).click();
  check((await language.inputValue()) === 'python', `a new cell after a Python one is Python (${await language.inputValue()})`);
  await language.selectOption({ label: 'JavaScript' });
  await editors.last().fill("const answer = 6 * 7;\nconsole.log('node says', answer);\nanswer + 1");
  await lastCell.getByRole('button', { name: 'Run cell' }).click();
  await lastCell.locator('pre.out.stdout', { hasText: 'node says 42' }).waitFor();
  await lastCell.locator('pre.out.result', { hasText: /^43$/ }).waitFor();
  await notebook.getByRole('button', { name: 'Add cell' }).click();
  check((await language.inputValue()) === 'javascript', `a new cell after a JavaScript one is JavaScript (${await language.inputValue()})`);
  await typeAndTab('answer');
  await valueIs('answer  '); // to the next tab stop, without asking the kernel
  check((await completions.count()) === 0, 'no completions in JavaScript');
  await ed.fill('    answer');
  await ed.press('Shift+Tab'); // dedents the line
  await valueIs('answer');
  check((await help.count()) === 0, 'no help in JavaScript');
  await ed.fill("console.log('kept', answer)");
  await ed.press('Shift+Enter'); // runs, and adds a cell in JavaScript below
  await notebook.locator('pre.out.stdout', { hasText: 'kept 42' }).waitFor();
  check((await language.inputValue()) === 'javascript', 'Shift+Enter adds a cell in the language above');
  await language.selectOption('bash');
  await editors.last().fill('word=bash\necho "$word says $((6 * 7))"');
  await lastCell.getByRole('button', { name: 'Run cell' }).click();
  await lastCell.locator('pre.out.stdout', { hasText: 'bash says 42' }).waitFor();
  await lastCell.locator('.count', { hasText: /\[\d+\]/ }).waitFor(); // the Bash cell's run ended

  step('an .ipynb opens into the notebook (Markdown rendered, saved outputs shown, cells in their languages), runs, and downloads as nbformat 4 with them');
  const opened = {
    nbformat: 4,
    nbformat_minor: 5,
    metadata: { kernelspec: { name: 'python3', display_name: 'Python 3', language: 'python' } },
    cells: [
      { cell_type: 'markdown', id: 'intro', metadata: {}, source: ['# From a file\n', '\n', 'Some *text*.'] },
      {
        cell_type: 'code', id: 'sum', metadata: {}, execution_count: 5, source: ["print('from the file', 6 * 7)"],
        outputs: [{ output_type: 'stream', name: 'stdout', text: ['saved ', 'output\n'] }],
      },
      { cell_type: 'code', id: 'js', metadata: { cellbox: { language: 'javascript' } }, execution_count: null, source: "console.log('js from the file', 6 * 7)", outputs: [] },
      { cell_type: 'code', id: 'sh', metadata: { cellbox: { language: 'bash' } }, execution_count: null, source: 'echo "bash from the file $((6 * 7))"', outputs: [] },
    ],
  };
  const openIpynb = async (name, text) => {
    const [chooser] = await Promise.all([page.waitForEvent('filechooser'), notebook.getByRole('button', { name: 'Open .ipynb' }).click()]);
    await chooser.setFiles({ name, mimeType: 'application/json', buffer: Buffer.from(text) });
  };
  await openIpynb('opened.ipynb', JSON.stringify(opened));
  await notebook.getByRole('heading', { name: 'From a file' }).waitFor();
  await notebook.getByText('Opened opened.ipynb: 4 cells').waitFor();
  const codeCells = notebook.locator('article.cell', { has: page.getByRole('button', { name: 'Run cell' }) });
  check((await codeCells.count()) === 3, `three code cells after opening (${await codeCells.count()})`);
  const languages = await codeCells.getByRole('combobox', { name: /^Language of cell/ }).evaluateAll((ss) => ss.map((s) => s.value));
  check(languages.join() === 'python,javascript,bash', `the cells' languages from the file: ${languages}`);
  const fileCell = codeCells.first();
  await fileCell.locator('pre.out.stdout', { hasText: 'saved output' }).waitFor();
  check((await fileCell.locator('.count').innerText()) === '[5]', 'the saved execution count');
  for (const [i, out] of ['from the file 42', 'js from the file 42', 'bash from the file 42'].entries()) {
    await codeCells.nth(i).getByRole('button', { name: 'Run cell' }).click();
    await codeCells.nth(i).locator('pre.out.stdout', { hasText: new RegExp(`^${out}\\s*$`) }).waitFor();
  }
  const [ipynb] = await Promise.all([page.waitForEvent('download'), notebook.getByRole('button', { name: 'Download .ipynb' }).click()]);
  check(ipynb.suggestedFilename() === 'opened.ipynb', `the download's name: ${ipynb.suggestedFilename()}`);
  await ipynb.saveAs(env('NOTEBOOK_OUT')); // the test validates it with nbformat
  const back = JSON.parse(readFileSync(env('NOTEBOOK_OUT'), 'utf8'));
  check(back.nbformat === 4 && back.cells.length === 4 && back.cells[0].cell_type === 'markdown', `the downloaded notebook: ${JSON.stringify(back).slice(0, 300)}`);
  check(back.cells[1].outputs.some((o) => o.output_type === 'stream' && o.text.includes('from the file 42')), 'the downloaded cell has its new output');
  check(back.cells[3].outputs.some((o) => o.output_type === 'stream' && o.text.includes('bash from the file 42')), 'the downloaded Bash cell has its output');
  const cellLanguages = back.cells.slice(1).map((c) => c.metadata.cellbox?.language || 'python').join();
  check(cellLanguages === 'python,javascript,bash' && back.metadata.kernelspec.language === 'python', `the downloaded cells' languages: ${cellLanguages}`);

  step('a file that is not an nbformat 4 notebook is refused with a message');
  await openIpynb('broken.ipynb', '{"cells": [');
  await notebook.getByRole('alert').getByText('Could not open broken.ipynb: it is not JSON').waitFor();
  await openIpynb('old.ipynb', JSON.stringify({ nbformat: 3, nbformat_minor: 0, worksheets: [] }));
  await notebook.getByRole('alert').getByText('Could not open old.ipynb: it is a notebook of nbformat 3').waitFor();
  check((await codeCells.count()) === 3, 'the notebook is unchanged');

  step('the sessions view lists the session');
  await page.getByRole('link', { name: 'Sessions' }).click();
  await page.locator('section.sessions').getByText(sid).first().waitFor();

  step('a new conversation starts clean');
  await page.getByRole('link', { name: 'Chat' }).click();
  await chat.locator('article.cell').first().waitFor();
  await page.getByRole('button', { name: 'New conversation' }).click();
  check((await chat.locator('article.cell').count()) === 0, 'no cells in a new conversation');
  check((await message.inputValue()) === '', 'the message box is empty');

  step('the sessions view pauses and resumes a pausable session');
  const auth = { Authorization: 'Bearer ' + key, 'Content-Type': 'application/json' };
  const made = await (await fetch(`${url}/v1/sessions`, { method: 'POST', headers: auth, body: JSON.stringify({ idle_action: 'pause' }) })).json();
  const psid = made.id;
  check(psid && made.idle_action === 'pause', `a pausable session: ${JSON.stringify(made)}`);
  await fetch(`${url}/v1/sessions/${psid}/execute`, { method: 'POST', headers: auth, body: JSON.stringify({ code: 'kept = 7' }) });
  await page.getByRole('link', { name: 'Sessions' }).click();
  await page.locator('section.sessions').getByRole('button', { name: 'Refresh' }).click();
  const prow = page.locator('li.session', { hasText: psid });
  await prow.getByRole('button', { name: 'Pause session ' + psid }).click();
  await prow.getByText(/MB on disk; a run resumes it/).waitFor();
  check((await prow.locator('.state').innerText()) === 'paused', 'the paused session shows as paused');
  await prow.getByRole('button', { name: 'Resume session ' + psid }).click();
  await prow.locator('.state', { hasText: 'idle' }).waitFor();
  const kept = await (await fetch(`${url}/v1/sessions/${psid}/execute`, { method: 'POST', headers: auth, body: JSON.stringify({ code: 'print(kept)' }) })).json();
  check(kept.outputs?.[0]?.text === '7\n', `the resumed session's variable: ${JSON.stringify(kept.outputs)}`);
  await fetch(`${url}/v1/sessions/${psid}`, { method: 'DELETE', headers: auth });

  step('the sessions view ends the session');
  await page.getByRole('link', { name: 'Sessions' }).click();
  await page.getByRole('button', { name: 'End session ' + sid }).click();
  await page.locator('section.sessions').getByText(sid).waitFor({ state: 'detached' });
  const ended = await fetch(`${url}/v1/sessions/${sid}`, { headers: { Authorization: 'Bearer ' + key } });
  check(ended.status === 404, `the ended session answers ${ended.status}`);

  check(external.length === 0, `nothing is loaded from elsewhere: ${external.join(', ')}`);
  check(failures.length === 0, failures.join('; '));
  step('all checks passed');
} catch (e) {
  // What the page showed when a check failed, for the test's log.
  const text = await page?.locator('body').innerText().catch(() => '');
  console.error(`browser: the page when it failed:\n${text}`);
  if (process.env.CELLBOX_FAILSHOT) await page?.screenshot({ path: process.env.CELLBOX_FAILSHOT, fullPage: true }).catch(() => {});
  throw e;
} finally {
  await browser.close();
}

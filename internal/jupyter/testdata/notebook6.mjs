// Opens a notebook in Jupyter Notebook 6 (whose kernels live in cellbox: --gateway-url) in
// Debian's chromium with playwright-core, runs its first cell with Shift+Enter and prints
// the cell's output ("output: ..."). Run by internal/jupyter's TestNotebook6.
//
// Environment: NOTEBOOK_URL (the notebook's page, with its token), CHROMIUM, PLAYWRIGHT
// (playwright-core's index.js: the web page's test installs it).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT);
const step = (s) => console.log(`notebook6: ${s}`);

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: ['--no-sandbox'] });
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => step(`page error: ${e.message}`));
  await page.goto(process.env.NOTEBOOK_URL);
  step('page loaded');
  // The kernel starts through the gateway; the notebook shows it idle once connected.
  await page.waitForFunction(() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel &&
    Jupyter.notebook.kernel.is_connected() && document.querySelector('#kernel_indicator_icon.kernel_idle_icon'), null, { timeout: 120000 });
  step('kernel idle');
  await page.click('.cell .CodeMirror');
  await page.keyboard.press('Shift+Enter');
  const out = page.locator('.output_area .output_text').first();
  await out.waitFor({ timeout: 60000 });
  step(`output: ${(await out.innerText()).trim()}`);
  const prompt = await page.locator('.cell .input_prompt').first().innerText();
  step(`prompt: ${prompt.trim()}`);
} finally {
  await browser.close();
}

// The web page's weight and speed in Debian's chromium (docs/benchmarks.md): what a first
// load fetches (requests, bytes), how long until the chat can take a message, and a reload.
// Run by scripts/bench-web.sh against a running server: node bench.mjs URL CHROMIUM [loads=10]
import { chromium } from 'playwright-core';

const [url, executablePath, n = '10'] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
try {
  const first = [];
  const reload = [];
  let requests = 0;
  let bytes = 0;
  for (let i = 0; i < Number(n); i++) {
    const context = await browser.newContext();
    const page = await context.newPage();
    const cdp = await context.newCDPSession(page);
    await cdp.send('Network.enable');
    let got = 0;
    let count = 0;
    cdp.on('Network.loadingFinished', (e) => ((got += e.encodedDataLength), count++));
    let t = performance.now();
    await page.goto(url);
    await page.getByRole('textbox', { name: 'Message' }).waitFor();
    first.push(performance.now() - t);
    requests = count;
    bytes = got;
    t = performance.now();
    await page.reload();
    await page.getByRole('textbox', { name: 'Message' }).waitFor();
    reload.push(performance.now() - t);
    await context.close();
  }
  const ms = (x) => Math.round(x * 10) / 10;
  console.log(JSON.stringify({
    first_load: { requests, kilobytes: Math.round(bytes / 102.4) / 10 },
    first_load_to_message_box_ms: { p50: ms(pct(first, 50)), max: ms(Math.max(...first)) },
    reload_to_message_box_ms: { p50: ms(pct(reload, 50)), max: ms(Math.max(...reload)) },
    loads: first.length,
  }, null, 1));
} finally {
  await browser.close();
}

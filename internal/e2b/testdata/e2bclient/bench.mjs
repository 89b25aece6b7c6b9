// Latency of cellbox's E2B-compatible API through E2B's official JS SDK.
//
//   E2B_API_URL=http://127.0.0.1:8080 E2B_SANDBOX_URL=http://127.0.0.1:8080 E2B_API_KEY=... \
//     node bench.mjs [creates=20] [roundtrips=200]
//
// Measures Sandbox.create() → the first runCode result (one sandbox at a time, each
// killed after), and a trivial runCode round trip on one sandbox; prints p50/p99 as JSON.
import { Sandbox } from '@e2b/code-interpreter';

const creates = Number(process.argv[2] ?? 20);
const roundtrips = Number(process.argv[3] ?? 200);

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const stats = (xs) => ({ n: xs.length, p50_ms: +pct(xs, 50).toFixed(1), p99_ms: +pct(xs, 99).toFixed(1) });

const first = [];
for (let i = 0; i < creates; i++) {
  const t0 = process.hrtime.bigint();
  const sandbox = await Sandbox.create();
  const ex = await sandbox.runCode('1 + 1');
  first.push(ms(t0));
  if (ex.text !== '2') throw new Error(`unexpected result ${ex.text}`);
  await sandbox.kill();
  // Let the warm pool refill, as it would between users.
  await new Promise((r) => setTimeout(r, 1500));
}

const sandbox = await Sandbox.create();
await sandbox.runCode('x = 0');
const trip = [];
for (let i = 0; i < roundtrips; i++) {
  const t0 = process.hrtime.bigint();
  await sandbox.runCode('x += 1');
  trip.push(ms(t0));
}
await sandbox.kill();
console.log(JSON.stringify({ create_to_first_result: stats(first), runcode_roundtrip: stats(trip) }, null, 2));

// The official MCP TypeScript SDK's HTTP+SSE client against cellbox's python tool server,
// as vLLM's tool server client uses it: a connection per tool session, the conversation
// named in the x-session-id header, the tool "python" called with {code}.
//
//   node python.mjs <URL of /sse> <conversation> <other conversation>
//
// It prints one JSON report on stdout for the Go test to check.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';

const [url, conv, other] = process.argv.slice(2);
const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

// run opens a connection for conversation id, calls python with code, and closes it.
async function run(id, code) {
  const transport = new SSEClientTransport(new URL(url), { requestInit: { headers: { 'x-session-id': id } } });
  const client = new Client({ name: 'vllm-like', version: '1.0.0' });
  await client.connect(transport);
  try {
    const res = await client.callTool({ name: 'python', arguments: { code } }, undefined, { timeout: 120000 });
    return { server: client.getServerVersion(), instructions: client.getInstructions(),
      tools: (await client.listTools()).tools.map((t) => ({ name: t.name, required: t.inputSchema?.required ?? [] })),
      isError: res.isError ?? false, text: text(res) };
  } finally {
    await client.close().catch(() => {});
  }
}

const report = {};
try {
  report.first = await run(conv, 'x = 41\nprint("set")');
  report.again = await run(conv, 'print(x + 1)');
  report.other = await run(other, 'print(x)');
  report.error = undefined;
} catch (e) {
  report.error = String(e?.stack ?? e);
}
console.log(JSON.stringify(report));
process.exit(report.error ? 1 : 0);

// The official MCP TypeScript SDK client against cellbox, for the Go tests.
//
//   node client.mjs stdio <cellbox binary> <args of cellbox mcp...>
//   node client.mjs http <URL of /mcp>
//   node client.mjs sse <URL of /mcp/sse>     (the older HTTP+SSE transport)
//
// It lists the tools, keeps state across calls, gets a plot and an exception, reads a
// workspace file as a resource, and prints one JSON report on stdout for the test to check.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';

const [mode, target, ...rest] = process.argv.slice(2);
const transport = mode === 'stdio'
  ? new StdioClientTransport({ command: target, args: rest, stderr: 'inherit' })
  : mode === 'sse' ? new SSEClientTransport(new URL(target)) : new StreamableHTTPClientTransport(new URL(target));

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const call = (name, args, options) => client.callTool({ name, arguments: args }, undefined, { timeout: 120000, ...options });

const client = new Client({ name: 'cellbox-tsclient', version: '1.0.0' });
const report = { transport: mode };
try {
  await client.connect(transport);
  report.server = client.getServerVersion();
  report.tools = (await client.listTools()).tools.map((t) => t.name);

  const set = await call('python', { code: "x = 41\nopen('/mnt/data/hello.txt', 'w').write('hello from cellbox')" });
  report.sessionId = set._meta?.['cellbox/session_id'];
  report.firstText = text(set);
  const get = await call('python', { code: 'print(x + 1)' });
  report.state = { isError: get.isError ?? false, text: text(get) };

  let progress = 0;
  await call('python', { code: "import time\nprint('working', flush=True)\ntime.sleep(1.5)" }, { onprogress: () => { progress++; } });
  report.progress = progress;

  const plot = await call('python', { code: 'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()' });
  report.images = plot.content.filter((c) => c.type === 'image').map((c) => ({
    mimeType: c.mimeType,
    png: Buffer.from(c.data, 'base64').subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])),
  }));

  const err = await call('python', { code: '1/0' });
  report.zeroDivision = { isError: err.isError ?? false, text: text(err) };

  const { resources } = await client.listResources();
  report.resources = resources.map((r) => r.uri);
  const hello = resources.find((r) => r.uri.endsWith('/mnt/data/hello.txt'));
  if (hello) {
    const read = await client.readResource({ uri: hello.uri });
    report.resourceText = read.contents[0]?.text;
  }
  try {
    await client.readResource({ uri: `cellbox://${report.sessionId}/mnt/data/%2e%2e/%2e%2e/etc/passwd` });
    report.hostileRead = 'allowed';
  } catch (e) {
    // Refused by the URI parser (invalid params), not merely not found.
    report.hostileRead = e?.code === -32602 ? 'refused' : `failed otherwise: ${e?.code} ${e?.message}`;
  }
} catch (e) {
  report.error = String(e?.stack ?? e);
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(report));
process.exit(report.error ? 1 : 0);

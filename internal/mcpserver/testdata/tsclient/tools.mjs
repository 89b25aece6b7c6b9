// The official MCP TypeScript SDK client and a session's tools (from cellbox import tool):
// it defines a tool with python, waits for notifications/tools/list_changed, lists the
// tools again and calls the new one, with good and bad arguments.
//
//   node tools.mjs stdio <cellbox binary> <args of cellbox mcp...>
//   node tools.mjs http <URL of /mcp>
//   node tools.mjs sse <URL of /mcp/sse>
//
// It prints one JSON report on stdout for the Go test to check.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const [mode, target, ...rest] = process.argv.slice(2);
const transport = mode === 'stdio'
  ? new StdioClientTransport({ command: target, args: rest, stderr: 'inherit' })
  : mode === 'sse' ? new SSEClientTransport(new URL(target)) : new StreamableHTTPClientTransport(new URL(target));

const texts = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text);
const call = (name, args) => client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });

const client = new Client({ name: 'cellbox-tsclient', version: '1.0.0' });
let changes = 0;
let changed;
const nextChange = () => new Promise((resolve, reject) => {
  changed = resolve;
  setTimeout(() => reject(new Error('no notifications/tools/list_changed within 60 s')), 60000).unref();
});
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  changes++;
  changed?.();
});

const cell = `from cellbox import tool

@tool
def greet(name: str, times: int = 1) -> str:
    """Greet someone.

    Args:
        name: who to greet
        times: how many times
    """
    print("greeting", name)
    return " ".join(["hello " + name] * times)
`;

const report = { transport: mode };
try {
  await client.connect(transport);
  report.listChangedCapability = client.getServerCapabilities()?.tools?.listChanged ?? false;
  report.before = (await client.listTools()).tools.map((t) => t.name);

  const defined = nextChange();
  const def = await call('python', { code: cell });
  report.defineError = def.isError ? texts(def).join('\n') : undefined;
  await defined;
  report.changes = changes;

  const { tools } = await client.listTools();
  report.after = tools.map((t) => t.name);
  const greet = tools.find((t) => t.name === 'greet');
  report.greet = greet && { description: greet.description, inputSchema: greet.inputSchema };

  const res = await call('greet', { name: 'ada', times: 2 });
  report.call = { isError: res.isError ?? false, texts: texts(res) };
  const bad = await call('greet', { name: 3 });
  report.bad = { isError: bad.isError ?? false, texts: texts(bad) };
} catch (e) {
  report.error = String(e?.stack ?? e);
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(report));
process.exit(report.error ? 1 : 0);

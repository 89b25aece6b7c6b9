// OpenAI's official JS SDK (npm openai, unmodified) against cellbox, for the Go tests of
// internal/openai.
//
//   CELLBOX_URL=... OPENAI_API_KEY=... node client.mjs <scenario> [args]
//
// The SDK's base URL is CELLBOX_URL + /v1; code runs in a container through cellbox's own
// REST API (POST /v1/sessions/{id}/execute and /commands, the session id being the
// container id without cntr_). Scenarios: sdk (containers and files, errors included),
// tenant <containerID> (another key's view of that container), wrongKey, network <url>
// (an allowlist, then curl through the container's proxy to url). Each prints one JSON
// report on stdout: what the SDK returned or threw at each step, for the Go test to check.
// Nothing is asserted here.
import OpenAI, { toFile } from 'openai';

const [scenario, ...args] = process.argv.slice(2);
const base = process.env.CELLBOX_URL;
const key = process.env.OPENAI_API_KEY;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
const report = {};

// step records what fn returned, or the class and message of what it threw.
async function step(name, fn) {
  try {
    report[name] = (await fn()) ?? null;
  } catch (e) {
    report[name] = { threw: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e), status: e?.status ?? null };
  }
}

// rest calls cellbox's own REST API for the container's session.
async function rest(containerID, what, body) {
  const sid = containerID.replace(/^cntr_/, '');
  const resp = await fetch(`${base}/v1/sessions/${sid}/${what}`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!resp.ok) throw new Error(`${what}: ${resp.status} ${await resp.text()}`);
  return resp.json();
}

const all = async (pages) => {
  const out = [];
  for await (const x of pages) out.push(x);
  return out;
};

async function sdk() {
  const uploaded = await client.files.create({ file: await toFile(Buffer.from('city,accidents\nA,3\nB,5\n'), 'data.csv'), purpose: 'user_data' });
  report.uploaded = uploaded;
  const created = await client.containers.create({
    name: 'sdk-box',
    memory_limit: '1g',
    expires_after: { anchor: 'last_active_at', minutes: 30 },
    file_ids: [uploaded.id],
  });
  report.created = created;
  const id = created.id;
  const second = await client.containers.create({ name: 'second' });
  await step('retrieved', () => client.containers.retrieve(id));
  // limit 1: the SDK follows after=last id through every page.
  await step('listed', async () => (await all(client.containers.list({ limit: 1 }))).map((c) => c.id));
  await step('listedByName', async () => (await all(client.containers.list({ name: 'second' }))).map((c) => c.id));
  await step('fileCreated', async () => client.containers.files.create(id, { file: await toFile(Buffer.from('hello, container'), 'notes.txt') }));
  await step('fileFromID', () => client.containers.files.create(id, { file_id: uploaded.id }));
  await step('executed', async () => {
    const code = [
      'import os',
      "rows = open('/mnt/data/data.csv').read().splitlines()[1:]",
      "os.makedirs('/mnt/data/out', exist_ok=True)",
      "open('/mnt/data/out/summary.csv', 'w').write(f'total,{sum(int(r.split(\",\")[1]) for r in rows)}\\n')",
      "print('ok')",
    ].join('\n');
    const r = await rest(id, 'execute', { code });
    return { status: r.status, outputs: r.outputs };
  });
  await step('files', async () => (await all(client.containers.files.list(id))).map((f) => ({ id: f.id, path: f.path, source: f.source, bytes: f.bytes, object: f.object, container_id: f.container_id })));
  const files = Array.isArray(report.files) ? report.files : [];
  const written = files.find((f) => f.path === '/mnt/data/out/summary.csv');
  const notes = files.find((f) => f.path === '/mnt/data/notes.txt');
  await step('writtenRetrieved', () => client.containers.files.retrieve(written.id, { container_id: id }));
  await step('writtenContent', async () => (await client.containers.files.content.retrieve(written.id, { container_id: id })).text());
  await step('notesContent', async () => (await client.containers.files.content.retrieve(notes.id, { container_id: id })).text());
  await step('fileDeleted', () => client.containers.files.delete(notes.id, { container_id: id }));
  await step('filesAfterDelete', async () => (await all(client.containers.files.list(id))).map((f) => f.path).sort());
  await step('deletedFileRetrieved', () => client.containers.files.retrieve(notes.id, { container_id: id }));

  await step('filesList', async () => (await all(client.files.list())).map((f) => f.id));
  await step('fileRetrieved', () => client.files.retrieve(uploaded.id));
  await step('fileContent', async () => (await client.files.content(uploaded.id)).text());
  await step('fileDelete', () => client.files.delete(uploaded.id));
  await step('fileAfterDelete', () => client.files.retrieve(uploaded.id));

  await step('unknownContainer', () => client.containers.retrieve('cntr_0123456789abcdef'));
  await step('tooMuchMemory', () => client.containers.create({ name: 'big', memory_limit: '64g' }));
  await step('unknownFileID', () => client.containers.create({ name: 'x', file_ids: ['file-0123456789abcdef01234567'] }));
  await step('deleted', () => client.containers.delete(second.id));
  await step('afterDelete', () => client.containers.retrieve(second.id));
}

async function tenant() {
  const id = args[0];
  await step('retrieve', () => client.containers.retrieve(id));
  await step('files', () => all(client.containers.files.list(id)));
  await step('delete', () => client.containers.delete(id));
  await step('list', async () => (await all(client.containers.list())).map((c) => c.id));
}

async function wrongKey() {
  await step('list', () => all(client.containers.list()));
  await step('create', () => client.containers.create({ name: 'x' }));
}

async function network() {
  const url = args[0];
  const host = new URL(url).hostname;
  const curl = async (id) => (await rest(id, 'commands', { cmd: ['sh', '-c', `curl -s -o /dev/null -w '%{http_code}' -x "$http_proxy" ${url}`] })).stdout;
  const ids = {};
  report.ids = ids;
  // A domain secret is taken (its header is set on requests to pypi.org, over TLS).
  const refused = await client.containers.create({
    name: 'refused',
    network_policy: { type: 'allowlist', allowed_domains: ['pypi.org'], domain_secrets: [{ domain: 'pypi.org', name: 'X-Secret', value: 's3cret' }] },
  });
  ids.refused = refused.id;
  report.refusedPolicy = refused.network_policy ?? null;
  await step('refusedFetch', () => curl(refused.id));
  const allowed = await client.containers.create({
    name: 'allowed',
    network_policy: { type: 'allowlist', allowed_domains: [host] },
  });
  ids.allowed = allowed.id;
  await step('allowedFetch', () => curl(allowed.id));
  const disabled = await client.containers.create({ name: 'disabled', network_policy: { type: 'disabled' } });
  ids.disabled = disabled.id;
  report.disabledPolicy = disabled.network_policy ?? null;
  await step('disabledFetch', () => curl(disabled.id));
}

// responses drives the Responses API with the code_interpreter tool: a turn whose answer
// comes from code, a follow-up with previous_response_id that uses the turn's variable, the
// same through the SDK's streaming helper, a function tool of the client's, a retrieve and
// a delete, and refusals. The model is the Go test's stand-in.
async function responses() {
  const ci = [{ type: 'code_interpreter', container: { type: 'auto' } }];
  const summary = (r) => ({
    id: r.id, status: r.status, output_text: r.output_text, types: r.output.map((o) => o.type),
    calls: r.output.filter((o) => o.type === 'code_interpreter_call').map((o) => ({ code: o.code, container_id: o.container_id, status: o.status, outputs: o.outputs ?? null })),
    functions: r.output.filter((o) => o.type === 'function_call').map((o) => ({ name: o.name, call_id: o.call_id, arguments: o.arguments })),
  });
  const first = await client.responses.create({ model: 'stand-in', input: 'What is 6 times 7?', tools: ci, include: ['code_interpreter_call.outputs'] });
  report.first = summary(first);
  const second = await client.responses.create({ model: 'stand-in', input: 'Add one to it.', previous_response_id: first.id, tools: ci });
  report.second = summary(second);

  const events = [];
  const stream = client.responses.stream({ model: 'stand-in', input: 'Add one to it.', previous_response_id: second.id, tools: ci });
  stream.on('response.output_text.delta', () => {});
  for await (const ev of stream) events.push(ev.type);
  report.streamed = { events, final: summary(await stream.finalResponse()) };

  const weather = [{ type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: false }];
  const asked = await client.responses.create({ model: 'stand-in', input: 'And the weather in Paris?', previous_response_id: first.id, tools: [...ci, ...weather] });
  report.asked = summary(asked);
  const call = asked.output.find((o) => o.type === 'function_call');
  if (call) {
    const answered = await client.responses.create({ model: 'stand-in', previous_response_id: asked.id, tools: [...ci, ...weather],
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21 C' }] });
    report.answered = summary(answered);
  }
  report.retrieved = summary(await client.responses.retrieve(first.id));
  await step('deleted', () => client.responses.delete(first.id));
  await step('retrieveDeleted', () => client.responses.retrieve(first.id));
  await step('unknownPrevious', () => client.responses.create({ model: 'stand-in', input: 'x', previous_response_id: 'resp_nope' }));
  await step('malformedTool', () => client.responses.create({ model: 'stand-in', input: 'x', tools: [{ type: 'code_interpreter', container: 42 }] }));
  await step('unknownContainer', () => client.responses.create({ model: 'stand-in', input: 'x', tools: [{ type: 'code_interpreter', container: 'cntr_0123456789abcdef01234567' }] }));
}

const scenarios = { sdk, tenant, wrongKey, network, responses };
try {
  if (!scenarios[scenario]) throw new Error(`unknown scenario ${scenario}`);
  await scenarios[scenario]();
} catch (e) {
  report.error = String(e?.stack ?? e);
}
console.log(JSON.stringify(report));

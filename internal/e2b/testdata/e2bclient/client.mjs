// E2B's official JS SDKs against cellbox, for the Go tests of internal/e2b.
//
//   E2B_API_URL=... E2B_SANDBOX_URL=... E2B_API_KEY=... node client.mjs <scenario> [args]
//
// Scenarios: program (the unmodified E2B program), sdk (every call, errors
// included), tenant <sandboxID> (another key's view of that sandbox), legacy (e2b 2.49,
// whose control plane paths differ), network <url> (egress settings on create and
// updateNetwork, with curl through the sandbox's proxy to url), pause <run> (pause, resume
// and fork). Each prints one JSON report on stdout: what the SDK
// returned or threw at each step, for the Go test to check. Nothing is asserted here.
import fs from 'node:fs';
import { Sandbox } from '@e2b/code-interpreter';
import { Sandbox as BaseSandbox } from 'e2b';

const [scenario, ...args] = process.argv.slice(2);
const report = {};

// step records what fn returned, or the class and message of what it threw.
async function step(name, fn) {
  try {
    report[name] = (await fn()) ?? null;
  } catch (e) {
    report[name] = { threw: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e) };
  }
}

const isPNG = (b64) => Buffer.from(b64 ?? '', 'base64').subarray(0, 8)
  .equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));

// summary is what a test needs of an Execution.
const summary = (ex) => ({
  text: ex.text ?? null,
  stdout: ex.logs.stdout.join(''),
  stderr: ex.logs.stderr.join(''),
  error: ex.error ? { name: ex.error.name, value: ex.error.value, traceback: ex.error.traceback } : null,
  results: ex.results.map((r) => ({ main: r.isMainResult, formats: r.formats(), text: r.text ?? null, png: isPNG(r.png) })),
  executionCount: ex.executionCount ?? null,
});

async function program() {
  // The program of the issue, as an E2B user writes it: nothing here knows of cellbox.
  const csv = fs.readFileSync(args[0], 'utf8');
  const sandbox = await Sandbox.create();
  report.sandboxId = sandbox.sandboxId;
  await sandbox.files.write('/home/user/accidents.csv', csv);
  const analysis = await sandbox.runCode(`
import pandas as pd
df = pd.read_csv('/home/user/accidents.csv')
print(len(df), 'rows')
df.groupby('urban_area')['accidents'].mean().round(2)
`);
  report.analysis = summary(analysis);
  const plot = await sandbox.runCode(`
import matplotlib.pyplot as plt
df.plot.scatter(x='traffic_density', y='accidents')
plt.title('Accidents by traffic density')
plt.savefig('/home/user/by_density.png')
plt.show()
`);
  report.plot = summary(plot);
  const ls = await sandbox.commands.run('ls -l /home/user && wc -l accidents.csv');
  report.command = { exitCode: ls.exitCode, stdout: ls.stdout };
  const png = await sandbox.files.read('/home/user/by_density.png', { format: 'bytes' });
  report.readBack = { bytes: png.length, png: isPNG(Buffer.from(png).toString('base64')) };
  report.killed = await sandbox.kill();
}

async function sdk() {
  const sandbox = await Sandbox.create({
    metadata: { suite: 'e2b', run: args[0] },
    envs: { GREETING: 'hello from create' },
    timeoutMs: 120_000,
  });
  const id = sandbox.sandboxId;
  report.sandboxId = id;

  // Code: state, results, plots, errors, env, streaming, timeouts, languages.
  await step('state', async () => {
    await sandbox.runCode('x = 41');
    return summary(await sandbox.runCode('x + 1'));
  });
  await step('plot', async () => summary(await sandbox.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()')));
  await step('html', async () => summary(await sandbox.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2]})')));
  await step('zeroDivision', async () => summary(await sandbox.runCode('1/0')));
  await step('envCreate', async () => summary(await sandbox.runCode('import os\nos.environ["GREETING"]')));
  await step('envCall', async () => summary(await sandbox.runCode('import os\nos.environ["GREETING"], os.environ.get("ONLY_NOW")', { envs: { GREETING: 'per call', ONLY_NOW: '1' } })));
  await step('envAfter', async () => summary(await sandbox.runCode('import os\nos.environ["GREETING"], os.environ.get("ONLY_NOW")')));
  await step('cwd', async () => summary(await sandbox.runCode('import os\nopen("rel.txt", "w").write("relative")\nos.getcwd()')));
  await step('streaming', async () => {
    // The cell waits for a file that only the onStdout callback writes: it finishes with
    // "released" only if its first line reached the callback while it ran.
    const seen = [];
    let released = false;
    const ex = await sandbox.runCode(`
import os, time
print("waiting", flush=True)
for _ in range(600):
    if os.path.exists("/home/user/release"):
        print("released")
        break
    time.sleep(0.05)
else:
    print("never released")
`, {
      onStdout: async (m) => {
        seen.push(m.line);
        if (!released && m.line.includes('waiting')) {
          released = true;
          await sandbox.files.write('/home/user/release', 'go');
        }
      },
    });
    return { seen, stdout: ex.logs.stdout.join('') };
  });
  await step('timeout', async () => sandbox.runCode('import time\ntime.sleep(60)', { timeoutMs: 1500 }).then(summary));
  await step('afterTimeout', async () => summary(await sandbox.runCode('print("alive")')));
  await sandbox.files.makeDir('/home/user/ctxdir');
  // Languages: each its own kernel, with its own state; a context of a language.
  await step('languages', async () => {
    const out = {};
    out.js = summary(await sandbox.runCode('const v = 20; await Promise.resolve(v + 1)', { language: 'js' }));
    out.jsState = summary(await sandbox.runCode('console.log(v * 2)', { language: 'js' }));
    out.ts = summary(await sandbox.runCode('const w: number = v + 2; w', { language: 'ts' }));
    out.r = summary(await sandbox.runCode('df <- data.frame(a = 1:2)\ndf', { language: 'r' }));
    out.rPlot = summary(await sandbox.runCode('plot(1:3)', { language: 'r' }));
    await sandbox.runCode('cd /tmp; b=5', { language: 'bash' });
    out.bash = summary(await sandbox.runCode('echo "$b $PWD"', { language: 'bash' }));
    out.bashFail = summary(await sandbox.runCode('false', { language: 'bash' }));
    out.jsError = summary(await sandbox.runCode('null.x', { language: 'js' }));
    const ctx = await sandbox.createCodeContext({ language: 'js', cwd: '/home/user/ctxdir' });
    out.ctxLanguage = ctx.language;
    out.ctx = summary(await sandbox.runCode('typeof v + " " + process.cwd()', { context: ctx }));
    out.unknown = summary(await sandbox.runCode('1', { language: 'cobol' }));
    return out;
  });

  // Contexts: separate namespaces, each with its own folder.
  await step('contexts', async () => {
    const ctx = await sandbox.createCodeContext({ cwd: '/home/user/ctxdir' });
    const inCtx = summary(await sandbox.runCode('y = 7\nimport os\nos.getcwd()', { context: ctx }));
    const isolated = summary(await sandbox.runCode('y', { context: ctx }));
    const defaultSeesNoY = summary(await sandbox.runCode('y'));
    const listed = (await sandbox.listCodeContexts()).map((c) => c.id);
    await sandbox.restartCodeContext(ctx);
    const afterRestart = summary(await sandbox.runCode('y', { context: ctx }));
    await sandbox.removeCodeContext(ctx);
    let afterRemove;
    try {
      afterRemove = summary(await sandbox.runCode('1', { context: ctx }));
    } catch (e) {
      afterRemove = { threw: e.constructor.name, message: e.message };
    }
    return { id: ctx.id, cwd: ctx.cwd, inCtx, isolated, defaultSeesNoY, listed, afterRestart, afterRemove };
  });

  // Commands.
  await step('cmdOK', async () => {
    const out = [];
    const r = await sandbox.commands.run('echo one; echo two >&2; pwd; echo $GREETING', { onStdout: (d) => out.push(d) });
    return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr, streamed: out.join('') };
  });
  await step('cmdExit', async () => sandbox.commands.run('echo partial; exit 3'));
  await step('cmdExitDetail', async () => {
    try {
      await sandbox.commands.run('echo partial; echo bad >&2; exit 3');
    } catch (e) {
      return { name: e.constructor.name, exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr };
    }
    return 'did not throw';
  });
  await step('cmdEnvCwd', async () => {
    const r = await sandbox.commands.run('echo "$FOO" && pwd', { envs: { FOO: 'bar' }, cwd: '/home/user/ctxdir' });
    const t = await sandbox.commands.run('pwd', { cwd: '/tmp' });
    return { stdout: r.stdout, tmp: t.stdout };
  });
  await step('cmdCwdMissing', async () => sandbox.commands.run('pwd', { cwd: '/home/user/no-such-folder' }));
  await step('cmdTimeout', async () => sandbox.commands.run('sleep 30', { timeoutMs: 1000 }));
  await step('cmdRoot', async () => sandbox.commands.run('id', { user: 'root' }));
  await step('background', async () => {
    let started;
    const output = new Promise((resolve) => { started = resolve; });
    const h = await sandbox.commands.run('echo started; sleep 60', { background: true, timeoutMs: 0, onStdout: started });
    await output;
    const listed = (await sandbox.commands.list()).map((p) => p.pid);
    const killed = await sandbox.commands.kill(h.pid);
    let waited;
    try {
      waited = await h.wait();
    } catch (e) {
      waited = { threw: e.constructor.name, exitCode: e.exitCode };
    }
    const after = (await sandbox.commands.list()).map((p) => p.pid);
    const killAgain = await sandbox.commands.kill(h.pid);
    return { pid: h.pid, listed, killed, waited, after, killAgain, stdout: h.stdout };
  });
  await step('connectCommand', async () => {
    const h = await sandbox.commands.run('while [ ! -e /home/user/stop ]; do sleep 0.05; done; echo finished', { background: true, timeoutMs: 0 });
    const other = await sandbox.commands.connect(h.pid);
    await sandbox.files.write('/home/user/stop', '');
    const r = await other.wait();
    await h.wait();
    return { exitCode: r.exitCode, stdout: r.stdout };
  });
  await step('beside', async () => {
    // A command runs while a cell runs: the cell waits for the command's file.
    const cell = sandbox.runCode('import os, time\nfor _ in range(600):\n    if os.path.exists("/home/user/beside"): break\n    time.sleep(0.05)\nos.path.exists("/home/user/beside")');
    await sandbox.commands.run('touch /home/user/beside');
    return summary(await cell);
  });

  // Links: URLs the SDK signs with the sandbox's access token, used without it.
  await step('links', async () => {
    await sandbox.files.write('/home/user/linked.txt', 'via a link');
    const get = async (u, init) => {
      const r = await fetch(u, init);
      return { status: r.status, body: await r.text(), csp: r.headers.get('content-security-policy') };
    };
    const upload = (text) => {
      const form = new FormData();
      form.append('file', new Blob([text]), 'uploaded.txt');
      return { method: 'POST', body: form };
    };
    const down = await sandbox.downloadUrl('/home/user/linked.txt');
    const up = await sandbox.uploadUrl('/home/user/uploaded.txt', { useSignatureExpiration: 60 });
    const put = await get(up, upload('from a link'));
    return {
      down,
      get: await get(down),
      expiring: await get(await sandbox.downloadUrl('/home/user/linked.txt', { useSignatureExpiration: 60 })),
      put: put.status,
      uploaded: await sandbox.files.read('/home/user/uploaded.txt'),
      otherPath: (await get(down.replace('linked.txt', 'uploaded.txt'))).status,
      otherOperation: (await get(down, upload('not allowed'))).status,
      expired: (await get(await sandbox.downloadUrl('/home/user/linked.txt', { useSignatureExpiration: -5 }))).status,
    };
  });

  // Files.
  await step('writeRead', async () => {
    const info = await sandbox.files.write('/home/user/dir/hello.txt', 'hello file');
    const text = await sandbox.files.read('/home/user/dir/hello.txt');
    const bytes = await sandbox.files.read('dir/hello.txt', { format: 'bytes' });
    return { info, text, bytes: bytes.length };
  });
  await step('writeMany', async () => sandbox.files.write([
    { path: '/home/user/many/a.txt', data: 'a' },
    { path: 'many/b.bin', data: new Uint8Array([0, 1, 2, 255]).buffer },
  ]));
  await step('codeSeesFiles', async () => summary(await sandbox.runCode('open("/home/user/many/a.txt").read() + open("/mnt/data/dir/hello.txt").read()')));
  await step('readCodeFile', async () => sandbox.files.read('/home/user/rel.txt'));
  await step('list', async () => (await sandbox.files.list('/home/user/many')).map((e) => ({ name: e.name, type: e.type, path: e.path, size: e.size })));
  await step('listDeep', async () => (await sandbox.files.list('/home/user', { depth: 2 })).map((e) => e.path).filter((p) => p.includes('many')));
  await step('exists', async () => ({
    file: await sandbox.files.exists('/home/user/dir/hello.txt'),
    dir: await sandbox.files.exists('/home/user/dir'),
    missing: await sandbox.files.exists('/home/user/nope.txt'),
  }));
  await step('getInfo', async () => {
    const i = await sandbox.files.getInfo('/home/user/dir/hello.txt');
    return { name: i.name, type: i.type, path: i.path, size: i.size, mode: i.mode, permissions: i.permissions };
  });
  await step('makeDir', async () => ({
    created: await sandbox.files.makeDir('/home/user/made/deep'),
    again: await sandbox.files.makeDir('/home/user/made/deep'),
    listed: (await sandbox.files.list('/home/user/made')).map((e) => e.name + ':' + e.type),
  }));
  await step('rename', async () => {
    const e = await sandbox.files.rename('/home/user/dir/hello.txt', '/home/user/moved/hello.txt');
    return { path: e.path, oldExists: await sandbox.files.exists('/home/user/dir/hello.txt'), text: await sandbox.files.read('/home/user/moved/hello.txt') };
  });
  await step('remove', async () => {
    await sandbox.files.remove('/home/user/many');
    await sandbox.files.remove('/home/user/never-was');
    return { gone: !(await sandbox.files.exists('/home/user/many')) };
  });
  await step('readMissing', async () => sandbox.files.read('/home/user/missing.txt'));
  await step('renameMissing', async () => sandbox.files.rename('/home/user/missing.txt', '/home/user/x.txt'));
  await step('listMissing', async () => sandbox.files.list('/home/user/missing'));
  await step('readOutside', async () => sandbox.files.read('/etc/passwd'));
  await step('writeEscape', async () => sandbox.files.write('/home/user/../../etc/evil', 'x'));

  // The sandbox.
  await step('info', async () => {
    const i = await sandbox.getInfo();
    return { sandboxId: i.sandboxId, templateId: i.templateId, metadata: i.metadata, state: i.state, started: i.startedAt.toISOString(), end: i.endAt.toISOString() };
  });
  await step('setTimeout', async () => {
    await sandbox.setTimeout(600_000);
    const i = await sandbox.getInfo();
    return { secondsLeft: Math.round((i.endAt.getTime() - Date.now()) / 1000) };
  });
  await step('isRunning', async () => sandbox.isRunning());
  await step('sandboxList', async () => {
    const second = await Sandbox.create({ metadata: { suite: 'e2b', run: args[0], second: 'yes' } });
    report.secondId = second.sandboxId;
    const ids = async (query, limit) => {
      const pager = Sandbox.list({ query, limit });
      const out = [];
      let pages = 0;
      while (pager.hasNext) {
        pages++;
        out.push(...(await pager.nextItems()).map((s) => s.sandboxId));
      }
      return { ids: out.sort(), pages };
    };
    const both = await ids({ metadata: { run: args[0] } }, 1);
    const onlySecond = await ids({ metadata: { run: args[0], second: 'yes' } });
    const none = await ids({ metadata: { run: 'no such run' } });
    const listed = (await Sandbox.list({ query: { metadata: { run: args[0], second: 'yes' } } }).nextItems())[0];
    await second.kill();
    return { both, onlySecond, none, metadata: listed?.metadata, state: listed?.state, templateId: listed?.templateId };
  });
  await step('connect', async () => {
    const again = await Sandbox.connect(id);
    return summary(await again.runCode('x'));
  });
  await step('unknownTemplate', async () => Sandbox.create('no-such-template'));
  await step('kill', async () => sandbox.kill());
  await step('killAgain', async () => Sandbox.kill(id));
  await step('infoAfterKill', async () => Sandbox.getInfo(id));
  await step('connectAfterKill', async () => Sandbox.connect(id));
  await step('runAfterKill', async () => sandbox.runCode('1'));
  await step('filesAfterKill', async () => sandbox.files.read('/home/user/rel.txt'));
}

// tenant is another key's view of a sandbox it does not own.
async function tenant() {
  const [id] = args;
  await step('connect', async () => Sandbox.connect(id));
  await step('info', async () => Sandbox.getInfo(id));
  await step('setTimeout', async () => Sandbox.setTimeout(id, 60_000));
  await step('kill', async () => Sandbox.kill(id));
  await step('list', async () => (await Sandbox.list().nextItems()).map((s) => s.sandboxId));
}

// wrongKey runs with a key the server does not have.
async function wrongKey() {
  await step('create', async () => Sandbox.create());
  await step('list', async () => Sandbox.list().nextItems());
}

// legacy drives the control plane of e2b 2.49 (POST /sandboxes, /sandboxes/{id}/connect).
async function legacy() {
  const { Sandbox: Old } = await import('e2b-2.49');
  const sandbox = await Old.create('code-interpreter-v1', { metadata: { legacy: 'yes' } });
  report.sandboxId = sandbox.sandboxId;
  await step('command', async () => (await sandbox.commands.run('echo legacy')).stdout);
  await step('connect', async () => (await Old.connect(sandbox.sandboxId)).sandboxId);
  await step('kill', async () => sandbox.kill());
}

// network creates sandboxes with E2B's egress settings, changes one's with updateNetwork,
// and fetches url (a server outside) from inside through the sandbox's proxy: curl prints
// the HTTP status, the proxy's own (403) when the policy refuses. The sandboxes live on:
// the Go test reads their policies and kills them.
async function network() {
  const url = args[0];
  const fetchOut = async (sbx) => (await sbx.commands.run(`curl -s -o /dev/null -w '%{http_code}' -x "$http_proxy" ${url}`)).stdout;
  const info = async (sbx) => {
    const i = await sbx.getInfo();
    return { allowInternetAccess: i.allowInternetAccess ?? null, network: i.network ?? null };
  };
  const ids = {};
  report.ids = ids;

  const offline = await Sandbox.create({ allowInternetAccess: false });
  ids.offline = offline.sandboxId;
  await step('offlineFetch', async () => fetchOut(offline));
  await step('offlineInfo', async () => info(offline));

  const online = await Sandbox.create({ allowInternetAccess: true });
  ids.online = online.sandboxId;
  await step('onlineFetch', async () => fetchOut(online));
  await step('onlineInfo', async () => info(online));
  await step('updateOffline', async () => online.updateNetwork({ allowInternetAccess: false }));
  await step('afterOfflineFetch', async () => fetchOut(online));
  const host = new URL(url).hostname;
  await step('updateAllowlist', async () => online.updateNetwork({ allowOut: [host], denyOut: ({ allTraffic }) => [allTraffic] }));
  await step('afterAllowlistFetch', async () => fetchOut(online));
  await step('afterAllowlistInfo', async () => info(online));

  const domains = await Sandbox.create({ network: { allowOut: ['pypi.org', '*.pythonhosted.org'], denyOut: ({ allTraffic }) => [allTraffic] } });
  ids.domains = domains.sandboxId;
  await step('domainsFetch', async () => fetchOut(domains));
  await step('domainsInfo', async () => info(domains));

  const carved = await Sandbox.create({ network: { allowOut: [host], denyOut: [`${host}/29`] } });
  ids.carved = carved.sandboxId;
  await step('carvedFetch', async () => fetchOut(carved));

  await step('createDomainWithoutAll', async () => Sandbox.create({ network: { allowOut: ['pypi.org'] } }));
  await step('updateDomainDeny', async () => online.updateNetwork({ denyOut: ['pypi.org'] }));
  await step('updateUnknown', async () => Sandbox.updateNetwork('0123456789abcdef01234567', { allowInternetAccess: false }));
}

// pause drives pause and resume: a sandbox created to pause on timeout, paused by hand
// (refused while a command runs in the background), listed as paused, resumed by connect
// with its variables; another paused by its timeout and resumed by a call; a fork of two;
// a sandbox created without lifecycle (runc refuses to pause it: the Go test knows which
// runtime); the refusals. Every sandbox is killed at the end.
async function pause() {
  const [run] = args;
  const ids = (list) => list.map((s) => ({ id: s.sandboxId, state: s.state }));
  const listOf = async (query) => ids(await Sandbox.list({ query: { metadata: { run }, ...query } }).nextItems());
  const info = async (sbx) => {
    const i = await sbx.getInfo();
    return { state: i.state, lifecycle: i.lifecycle ?? null, secondsLeft: Math.round((i.endAt.getTime() - Date.now()) / 1000) };
  };
  const kill = [];

  const sbx = await Sandbox.create({ lifecycle: { onTimeout: 'pause' }, metadata: { run } });
  kill.push(sbx);
  report.sandboxId = sbx.sandboxId;
  await step('set', async () => summary(await sbx.runCode('x = 41')));
  await step('info', async () => info(sbx));
  await step('busy', async () => {
    const cmd = await sbx.commands.run('sleep 60', { background: true });
    try {
      return await sbx.pause();
    } finally {
      await cmd.kill();
      await cmd.wait().catch(() => {});
    }
  });
  await step('pause', async () => sbx.pause());
  await step('pauseAgain', async () => sbx.betaPause());
  await step('infoPaused', async () => info(sbx));
  await step('listPaused', async () => listOf({ state: ['paused'] }));
  await step('listRunning', async () => listOf({ state: ['running'] }));
  await step('listAll', async () => listOf({}));
  await step('listV1', async () => {
    const res = await fetch(`${process.env.E2B_API_URL}/sandboxes`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } });
    return (await res.json()).map((s) => s.sandboxID);
  });
  await step('connect', async () => {
    const again = await Sandbox.connect(sbx.sandboxId);
    return summary(await again.runCode('x + 1'));
  });
  await step('infoResumed', async () => info(sbx));

  // The timeout pauses: after 3 s without activity (the server looks every 2 s).
  const idle = await Sandbox.create({ lifecycle: { onTimeout: 'pause' }, timeoutMs: 3_000, metadata: { run } });
  kill.push(idle);
  report.idleId = idle.sandboxId;
  await step('idleSet', async () => summary(await idle.runCode('y = 7')));
  await step('idlePaused', async () => {
    const deadline = Date.now() + 60_000;
    let state;
    while ((state = (await idle.getInfo()).state) !== 'paused' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    return state;
  });
  await step('callResumes', async () => summary(await idle.runCode('y')));
  await step('idleResumed', async () => (await idle.getInfo()).state);
  await step('setTimeoutPausing', async () => {
    await idle.setTimeout(600_000);
    return info(idle);
  });
  // E2B 2.49 sends {"timeout": 300} on every connect: no lifetime for a sandbox that pauses.
  await step('legacyConnect', async () => {
    await idle.pause();
    const { Sandbox: Old } = await import('e2b-2.49');
    await Old.connect(idle.sandboxId);
    return info(idle);
  });

  await step('fork', async () => {
    const forks = await sbx.fork({ count: 2 });
    kill.push(...forks.filter((f) => !(f instanceof Error)));
    const out = [];
    for (const f of forks) {
      out.push(f instanceof Error ? { threw: f.constructor.name, message: f.message } : { id: f.sandboxId, x: (await f.runCode('x')).text ?? null });
    }
    await forks[0].runCode('x = 100');
    return { forks: out, other: (await forks[1].runCode('x')).text ?? null, source: (await sbx.runCode('x')).text ?? null, info: await info(forks[0]) };
  });

  const plain = await Sandbox.create({ metadata: { run } });
  kill.push(plain);
  await step('plainInfo', async () => info(plain));
  await step('pausePlain', async () => plain.pause());
  await step('forkPlain', async () => {
    const forks = await plain.fork();
    kill.push(...forks.filter((f) => !(f instanceof Error)));
    return forks.length;
  });

  await step('pauseUnknown', async () => Sandbox.pause('0123456789abcdef01234567'));
  await step('connectUnknown', async () => Sandbox.connect('0123456789abcdef01234567'));
  await step('keepMemoryFalse', async () => sbx.pause({ keepMemory: false }));
  await step('createKeepMemoryFalse', async () => Sandbox.create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }));
  await step('killed', async () => Promise.all(kill.map((k) => k.kill())));
}

const scenarios = { program, sdk, tenant, wrongKey, legacy, network, pause };
try {
  await scenarios[scenario]();
} catch (e) {
  report.error = `${e?.constructor?.name}: ${e?.stack ?? e}`;
}
process.stdout.write(JSON.stringify(report));

// cellbox JavaScript kernel runner: runs cells in one Node.js process for the guest.
//
// The guest starts `node -e BOOTSTRAP` with this script in CELLBOX_RUNNER (see runners.go)
// and talks to it over file descriptors 3 (guest -> runner) and 4 (runner -> guest), one JSON
// message a line, as it does with the Python runner. Descriptors 1 and 2 are pipes the guest
// reads: console output, and anything a child process writes, is a stream output.
//
// guest -> runner:  {"op": "exec", "code": "...", "quiet": bool, "env": {...}}
//                   {"op": "ping"}      answered "done"
//                   {"op": "ack"}       the answer to a message with "a": 1
// runner -> guest:  {"t": "started", "n": N}   the cell runs; SIGINT now interrupts it
//                   {"t": "out", "o": {...}, "a": 1}   an output; waits for the ack
//                   {"t": "done", "ok": bool, "ename": "...", "n": N}
//
// A cell is a script run in the process's own global scope (vm.runInThisContext), so what
// one cell declares the next one sees. Before it runs, its top-level declarations become
// `var`s (a cell may be run again: `const x` twice is no error), a cell with top-level
// `await` (or an `import` declaration, which becomes one) runs inside an async function
// whose declarations are hoisted to the global scope, and the value of its last expression
// becomes its execute_result. The parser is acorn (Debian's node-acorn).
(function (require, dynamicImport) {
  "use strict";
  const fs = require("fs");
  const vm = require("vm");
  const util = require("util");
  const path = require("path");
  const Module = require("module");
  const url = require("url");

  const IN = 3;
  const OUT = 4;

  let acorn = null;
  for (const p of ["acorn", "/usr/share/nodejs/acorn", "/usr/lib/node_modules/acorn", "/usr/local/lib/node_modules/acorn"]) {
    try {
      acorn = require(p);
      break;
    } catch (e) {}
  }

  // Protocol output. Everything the guest reads from fd 4 is ASCII JSON, one message a line.
  function send(msg) {
    const data = Buffer.from(JSON.stringify(msg, safeJSON).replace(/[\u007f-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")) + "\n");
    for (let off = 0; off < data.length; ) {
      try {
        off += fs.writeSync(OUT, data, off);
      } catch (e) {
        if (e.code !== "EAGAIN") process.exit(0); // the guest is gone
      }
    }
  }
  function safeJSON(k, v) {
    if (typeof v === "bigint") return v.toString();
    if (typeof v === "number" && !isFinite(v)) return String(v);
    return v;
  }

  // Protocol input: lines from fd 3. Between cells one asynchronous read waits for the next
  // command (the event loop runs meanwhile: timers, servers); within a cell nothing reads
  // asynchronously, and an output's ack is read synchronously.
  let inbuf = Buffer.alloc(0);
  function takeLine() {
    const i = inbuf.indexOf(10);
    if (i < 0) return null;
    const line = inbuf.subarray(0, i).toString("utf8");
    inbuf = inbuf.subarray(i + 1);
    return line;
  }
  function readLineSync() {
    const chunk = Buffer.alloc(4096);
    for (;;) {
      const line = takeLine();
      if (line !== null) return line;
      let n = 0;
      try {
        n = fs.readSync(IN, chunk, 0, chunk.length, null);
      } catch (e) {
        if (e.code === "EAGAIN" || e.code === "EINTR") continue;
        process.exit(0);
      }
      if (n === 0) process.exit(0);
      inbuf = Buffer.concat([inbuf, chunk.subarray(0, n)]);
    }
  }
  function readLine(cb) {
    const line = takeLine();
    if (line !== null) return setImmediate(cb, line);
    const chunk = Buffer.alloc(64 << 10);
    fs.read(IN, chunk, 0, chunk.length, null, (err, n) => {
      if (err && (err.code === "EAGAIN" || err.code === "EINTR")) return readLine(cb);
      if (err || n === 0) process.exit(0);
      inbuf = Buffer.concat([inbuf, chunk.subarray(0, n)]);
      readLine(cb);
    });
  }

  let running = false; // a cell runs: outputs wait for their ack
  let count = 0;

  function output(o) {
    if (!running) return; // between cells nobody reads it
    send({ t: "out", o: o, a: 1 });
    for (;;) {
      const line = readLineSync();
      try {
        if (JSON.parse(line).op === "ack") return;
      } catch (e) {}
    }
  }

  // What a value shows: its own MIME bundle (Symbol.for("Jupyter.display"), as Deno's kernel
  // has it, returning e.g. {"text/html": "..."}), else util.inspect's text.
  const displaySym = Symbol.for("Jupyter.display");
  function bundle(value) {
    const data = {};
    if (value !== null && (typeof value === "object" || typeof value === "function") && typeof value[displaySym] === "function") {
      const own = value[displaySym]();
      if (own && typeof own === "object") {
        for (const [mime, v] of Object.entries(own)) {
          if (mime === "application/json" || mime.endsWith("+json")) data[mime] = v;
          else if (Buffer.isBuffer(v) || v instanceof Uint8Array) data[mime] = Buffer.from(v).toString(mime.startsWith("text/") || mime === "image/svg+xml" ? "utf8" : "base64");
          else data[mime] = String(v);
        }
      }
    }
    if (!("text/plain" in data)) data["text/plain"] = util.inspect(value, { depth: 4, maxArrayLength: 100, maxStringLength: 10000, breakLength: 100 });
    return data;
  }

  // display(value) shows a value as a display_data output; display.html, .svg, .png,
  // .markdown and .json show content of that type.
  function display(value) {
    output({ type: "display_data", data: bundle(value) });
  }
  const raw = (mime, enc) => (content) => {
    let v = content;
    if (Buffer.isBuffer(v) || v instanceof Uint8Array) v = Buffer.from(v).toString(enc);
    else if (mime !== "application/json") v = String(v);
    output({ type: "display_data", data: { [mime]: v, "text/plain": mime === "image/png" ? "<image/png>" : typeof v === "string" ? v.slice(0, 1000) : util.inspect(v) } });
  };
  display.html = raw("text/html", "utf8");
  display.svg = raw("image/svg+xml", "utf8");
  display.png = raw("image/png", "base64");
  display.markdown = raw("text/markdown", "utf8");
  display.json = raw("application/json", "utf8");

  // Modules load from the workspace's node_modules, then the image's.
  function userRequire() {
    return Module.createRequire(path.join(process.cwd(), "[cell]"));
  }
  async function importModule(spec) {
    spec = String(spec);
    if (spec.startsWith("node:") || Module.builtinModules.includes(spec)) return dynamicImport(spec.startsWith("node:") ? spec : "node:" + spec);
    let target = spec;
    try {
      target = url.pathToFileURL(userRequire().resolve(spec)).href;
    } catch (e) {
      if (spec.startsWith(".") || spec.startsWith("/")) target = url.pathToFileURL(path.resolve(process.cwd(), spec)).href;
    }
    return dynamicImport(target);
  }

  Object.defineProperty(globalThis, "require", { get: userRequire, set: () => {}, configurable: true });
  globalThis.display = display;
  globalThis.__cellbox_import = importModule;

  // The rewrite of a cell (see the top). Returns {code, async}.
  function rewrite(src) {
    if (!acorn) return { code: src, async: false };
    const opts = { ecmaVersion: "latest", sourceType: "script", allowAwaitOutsideFunction: true, allowImportExportEverywhere: true, allowHashBang: true, allowReturnOutsideFunction: false };
    let ast;
    // An object literal alone is read as one, not as a block (as Node's REPL does).
    let wrapped = false;
    if (/^\s*\{/.test(src) && /\}\s*$/.test(src)) {
      try {
        ast = acorn.parse("(" + src + "\n)", opts);
        src = "(" + src + "\n)";
        wrapped = true;
      } catch (e) {}
    }
    if (!wrapped) {
      try {
        ast = acorn.parse(src, opts);
      } catch (e) {
        return { code: src, async: false }; // V8 reports the syntax error itself
      }
    }
    const body = ast.body;
    let hasAwait = false;
    // import(x) anywhere becomes __cellbox_import(x): a script run by vm has no loader of its
    // own for it.
    const edits = [];
    const imports = (node) => {
      if (!node || typeof node.type !== "string") return;
      if (node.type === "ImportExpression") edits.push([node.start, node.start + 6, "__cellbox_import"]);
      for (const key of Object.keys(node)) {
        const v = node[key];
        if (Array.isArray(v)) v.forEach(imports);
        else if (v && typeof v.type === "string") imports(v);
      }
    };
    imports(ast);
    const visit = (node) => {
      if (hasAwait || !node || typeof node.type !== "string") return;
      switch (node.type) {
        case "FunctionDeclaration":
        case "FunctionExpression":
        case "ArrowFunctionExpression":
        case "MethodDefinition":
        case "PropertyDefinition":
        case "StaticBlock":
          return;
        case "AwaitExpression":
          hasAwait = true;
          break;
        case "ForOfStatement":
          if (node.await) {
            hasAwait = true;
            return;
          }
      }
      for (const key of Object.keys(node)) {
        const v = node[key];
        if (Array.isArray(v)) v.forEach(visit);
        else if (v && typeof v.type === "string") visit(v);
      }
    };
    for (const st of body) {
      if (st.type === "ImportDeclaration") hasAwait = true;
      visit(st);
    }
    // Edits as [start, end, text], applied from the end.
    const hoisted = [];
    const names = (pattern, out) => {
      if (!pattern) return;
      switch (pattern.type) {
        case "Identifier":
          out.push(pattern.name);
          break;
        case "ObjectPattern":
          for (const p of pattern.properties) names(p.type === "RestElement" ? p.argument : p.value, out);
          break;
        case "ArrayPattern":
          for (const e of pattern.elements) names(e, out);
          break;
        case "RestElement":
          names(pattern.argument, out);
          break;
        case "AssignmentPattern":
          names(pattern.left, out);
          break;
      }
    };
    for (const st of body) {
      switch (st.type) {
        case "VariableDeclaration":
          if (!hasAwait) {
            edits.push([st.start, st.start + st.kind.length, "var"]);
            break;
          }
          // `const {a, b} = await f(), c;` -> `void (({a, b} = await f()), (c));`, with a, b
          // and c hoisted. Only points are edited: import() within stays an edit of its own.
          {
            const ds = st.declarations;
            for (const d of ds) {
              names(d.id, hoisted);
              edits.push([d.start, d.start, "("]);
              edits.push([d.end, d.end, ")"]);
            }
            edits.push([st.start, ds[0].start, "void ("]);
            edits.push([ds[ds.length - 1].end, st.end, ");"]);
          }
          break;
        case "ClassDeclaration":
          if (hasAwait) {
            hoisted.push(st.id.name);
            edits.push([st.start, st.start, st.id.name + " = "]);
            edits.push([st.end, st.end, ";"]);
          } else {
            edits.push([st.start, st.start, "var " + st.id.name + " = "]);
            edits.push([st.end, st.end, ";"]);
          }
          break;
        case "FunctionDeclaration":
          if (hasAwait) edits.push([st.end, st.end, " globalThis[" + JSON.stringify(st.id.name) + "] = " + st.id.name + ";"]);
          break;
        case "ImportDeclaration": {
          const spec = JSON.stringify(st.source.value);
          const parts = [];
          const tmp = "__cellbox_m";
          for (const s of st.specifiers) {
            hoisted.push(s.local.name);
            if (s.type === "ImportDefaultSpecifier") parts.push(s.local.name + " = (\"default\" in " + tmp + " ? " + tmp + ".default : " + tmp + ")");
            else if (s.type === "ImportNamespaceSpecifier") parts.push(s.local.name + " = " + tmp);
            else parts.push(s.local.name + " = " + tmp + "[" + JSON.stringify(s.imported.name || s.imported.value) + "]");
          }
          edits.push([st.start, st.end, "{ const " + tmp + " = await __cellbox_import(" + spec + "); " + parts.join("; ") + "; }"]);
          break;
        }
      }
    }
    const last = body.length ? body[body.length - 1] : null;
    let result = false;
    if (hasAwait && last && last.type === "ExpressionStatement") {
      edits.push([last.start, last.start, "return ("]);
      edits.push([last.expression.end, last.expression.end, ")"]);
      result = true;
    }
    edits.sort((a, b) => b[0] - a[0] || b[1] - a[1]);
    let out = src;
    for (const [s, e, t] of edits) out = out.slice(0, s) + t + out.slice(e);
    if (!hasAwait) return { code: out, async: false };
    const pre = hoisted.length ? "var " + [...new Set(hoisted)].join(", ") + "; " : "";
    return { code: pre + "(async () => { " + out + "\n})()", async: true, result: result };
  }

  // An error as an error output: its name, message and stack without the runner's frames.
  function errorOutput(err) {
    if (err instanceof Error || (err && typeof err === "object" && typeof err.stack === "string")) {
      const lines = String(err.stack || "").split("\n");
      const tb = lines.filter((l) => !/^\s+at .*(<cellbox-runner>|node:internal|\[eval\]|\(vm\.js|node:vm)/.test(l));
      while (tb.length && /^\s+at (runCell|Script\.|Object\.runInThisContext)/.test(tb[tb.length - 1])) tb.pop();
      return { type: "error", ename: String(err.name || (err.constructor && err.constructor.name) || "Error"), evalue: String(err.message === undefined ? "" : err.message), traceback: tb };
    }
    return { type: "error", ename: "Uncaught", evalue: util.inspect(err), traceback: ["Uncaught " + util.inspect(err)] };
  }

  // SIGINT: a synchronous stretch of a cell is broken by V8 (breakOnSigint); an awaiting
  // cell is ended by this listener, which also keeps a late interrupt from killing the
  // process between cells.
  let interruptCell = null;
  process.on("SIGINT", () => {
    if (interruptCell) interruptCell();
  });
  // An error nobody catches, from a timer or a promise, is shown in the running cell (if
  // any) on stderr; the kernel lives on.
  const report = (err) => {
    try {
      process.stderr.write("Uncaught " + (err && err.stack ? err.stack : util.inspect(err)) + "\n");
    } catch (e) {}
  };
  process.on("uncaughtException", report);
  process.on("unhandledRejection", report);

  async function runCell(msg) {
    const quiet = !!msg.quiet;
    if (!quiet) count++;
    const n = count;
    const saved = {};
    for (const [k, v] of Object.entries(msg.env || {})) {
      saved[k] = process.env[k];
      process.env[k] = v;
    }
    running = true;
    send({ t: "started", n: n });
    let ok = true;
    let ename = "";
    try {
      const { code, async, result } = rewrite(String(msg.code || ""));
      const script = new vm.Script(code, { filename: "cell[" + n + "]" });
      let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
      if (async) {
        const alive = setInterval(() => {}, 1 << 30); // an awaiting cell keeps the process up
        try {
          value = await new Promise((resolve, reject) => {
          interruptCell = () => reject(Object.assign(new Error("the cell was interrupted"), { name: "Interrupted", stack: "Interrupted: the cell was interrupted" }));
          value.then(resolve, reject);
        });
        } finally {
          clearInterval(alive);
        }
        if (!result) value = undefined;
      }
      interruptCell = null;
      if (value !== undefined) {
        globalThis._ = value;
        if (!quiet) output({ type: "execute_result", execution_count: n, data: bundle(value) });
        else output({ type: "execute_result", data: bundle(value) });
      }
    } catch (err) {
      interruptCell = null;
      ok = false;
      const o = errorOutput(err);
      ename = o.ename;
      output(o);
    }
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    // What the cell wrote to a pipe that was full waits in the stream's buffer: it goes
    // before the cell's end.
    await Promise.all([process.stdout, process.stderr].map((s) => (s.writableLength ? new Promise((r) => s.once("drain", r)) : null)));
    running = false;
    send({ t: "done", ok: ok, ename: ename, n: count });
  }

  function loop() {
    readLine(async (line) => {
      let msg;
      try {
        msg = JSON.parse(line);
      } catch (e) {
        return loop();
      }
      switch (msg.op) {
        case "exec":
          await runCell(msg);
          break;
        case "ping":
          send({ t: "done", ok: true, n: count });
          break;
      }
      loop();
    });
  }
  loop();
})

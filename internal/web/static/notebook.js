// The notebook: cells a person types and runs in a session's kernel (POST .../execute,
// streamed), the kernel's Interrupt and Restart, the workspace's files, the session's
// tools (functions marked @tool) and its network (its policy and recent connections). Each
// code cell has a language (Python, JavaScript, TypeScript, R, Bash), run in the session's
// kernel of that language; a new cell takes the one of the cell above. Opened on a
// session the model worked in, it starts with the model's code steps as cells. A Jupyter
// notebook (.ipynb) opens into it, its cells in place of the page's, and the page's cells
// download as one (ipynb.js); a cell's editor completes and explains names (editor.js).

import { html, useEffect, useReducer, useRef, useState } from './vendor/preact-htm.js';
import { ApiError, get, message, post, save, sessionPath, stream } from './api.js';
import { Markdown, Outputs, Result } from './cells.js';
import { Editor } from './editor.js';
import { Files, dropTarget } from './files.js';
import { NotebookError, languageOf, languages, readNotebook, writeNotebook } from './ipynb.js';
import { Network } from './network.js';
import { Tools } from './tools.js';

let keys = 0;
// A cell's type is code, markdown or raw (the last two only from an .ipynb, shown, not
// edited); count is its execution count; language is the API's name of a code cell's.
const cell = (code = '', more = {}) =>
  ({ key: ++keys, type: 'code', code, language: 'python', outputs: [], result: null, count: null, running: false, error: '', note: '', ...more });

// A notebook's state is one mutable object, drawn again after each change (render); name
// is the .ipynb it was opened from.
const fresh = (sid) => ({ sid, cells: [cell()], imported: new Set(), error: '', note: '', creating: null, importing: null, focus: 0, name: '' });

// stepCell is a step of the model in a language (its python tool, or javascript, r, ...) as
// a cell: its code and what it gave.
const stepCell = (s) =>
  cell(s.code, {
    language: s.tool,
    outputs: s.result?.outputs || [],
    result: s.result || null,
    count: s.result?.execution_count || null,
    byModel: true,
    note: s.declined ? 'The model wrote this; it was skipped, not run.' : s.error ? `The model wrote this; it did not run: ${s.error}` : '',
  });

export function Notebook({ active, sessionId, go, onSession, ended }) {
  const state = useRef(null);
  state.current ??= fresh('');
  const st = state.current;
  const [, render] = useReducer((n) => n + 1, 0);
  const [refresh, setRefresh] = useState(0);
  const [ran, setRan] = useState(0); // cells finished: the tools and the network's connections are read again
  const [dragging, setDragging] = useState(false);
  const adder = useRef();
  const picker = useRef();
  const boxes = useRef({});
  const books = useRef(new Map()); // session id → its notebook, kept while the page lives
  const activeRef = useRef(active);
  activeRef.current = active;

  useEffect(() => {
    if (sessionId !== undefined && sessionId !== st.sid) open(sessionId);
  }, [sessionId]);
  useEffect(() => {
    if (active && st.sid) importSteps(st);
  }, [active]);
  useEffect(() => onSession(st.sid), [st.sid]);
  useEffect(() => {
    books.current.delete(ended);
    if (ended && ended === st.sid) {
      state.current = fresh('');
      state.current.note = `Session ${ended} was ended. Running a cell starts a new one.`;
      render();
    }
  }, [ended]);
  useEffect(() => {
    if (st.focus) boxes.current[st.focus]?.focus();
    st.focus = 0;
  });

  // open shows session sid's notebook: the one this page had for it (cells typed there
  // are not lost by looking at another session), else a new one.
  function open(sid) {
    state.current = books.current.get(sid) || fresh(sid);
    if (sid) books.current.set(sid, state.current);
    render();
    if (sid) importSteps(state.current);
  }

  // importSteps adds the model's steps in a language (not its shell commands) of the
  // session's conversations that are not cells yet, oldest first, before the empty cells at
  // the end.
  async function importSteps(mine) {
    if (mine.importing) return;
    mine.importing = true;
    try {
      const list = await get('/v1/conversations?session_id=' + encodeURIComponent(mine.sid));
      const cells = [];
      for (const c of [...(list?.conversations || [])].reverse()) {
        const full = await get('/v1/conversations/' + encodeURIComponent(c.id));
        (full.turns || []).forEach((t, ti) =>
          (t.steps || []).forEach((s, si) => {
            const id = `${c.id}/${s.id || ti + '.' + si}`;
            if (!languageOf(s.tool) || !s.code || mine.imported.has(id)) return;
            mine.imported.add(id);
            cells.push(stepCell(s));
          }),
        );
      }
      let at = mine.cells.length;
      while (at > 0 && !mine.cells[at - 1].code && !mine.cells[at - 1].result) at--;
      mine.cells.splice(at, 0, ...cells);
    } catch (e) {
      // 404: a server without conversations; the notebook works all the same.
      if (!(e instanceof ApiError && e.status === 404)) mine.error = "Could not load the model's steps: " + message(e);
    }
    mine.importing = false;
    render();
  }

  function ensureSession() {
    const mine = state.current;
    if (mine.sid) return Promise.resolve(mine.sid);
    mine.creating ??= post('/v1/sessions', {})
      .then((s) => {
        if (mine === state.current) {
          mine.sid = s.id;
          books.current.set(s.id, mine);
          if (activeRef.current) go('#notebook/' + encodeURIComponent(s.id), true);
          render();
        }
        return s.id;
      })
      .finally(() => (mine.creating = null));
    return mine.creating;
  }

  async function run(c) {
    if (c.type !== 'code' || c.running || !c.code.trim()) return;
    Object.assign(c, { running: true, outputs: [], result: null, count: null, error: '', note: '' });
    render();
    try {
      const sid = await ensureSession();
      const onEvent = (event, data) => {
        if (event !== 'output') return;
        c.outputs.push(data);
        render();
      };
      c.result = await stream(sessionPath(sid) + '/execute', { code: c.code, language: c.language }, onEvent);
      if (c.result.outputs?.length) c.outputs = c.result.outputs;
      c.count = c.result.execution_count || null;
      if (c.result.files?.length) setRefresh((n) => n + 1);
    } catch (e) {
      c.error = message(e);
    }
    c.running = false;
    setRan((n) => n + 1);
    render();
  }

  function add(after) {
    const at = after ? st.cells.indexOf(after) + 1 : st.cells.length;
    const c = cell('', { language: st.cells.slice(0, at).findLast((x) => x.type === 'code')?.language || 'python' });
    st.cells.splice(at, 0, c);
    st.focus = c.key;
    render();
    return c;
  }

  function onKey(e, c) {
    if (e.key !== 'Enter' || !(e.shiftKey || e.ctrlKey || e.metaKey)) return;
    e.preventDefault();
    run(c);
    if (e.shiftKey) {
      // Shift+Enter runs and goes on to the next code cell, as in Jupyter.
      const next = st.cells.slice(st.cells.indexOf(c) + 1).find((x) => x.type === 'code');
      if (next) {
        st.focus = next.key;
        render();
      } else add(c);
    }
  }

  async function kernel(action) {
    if (action === 'restart' && !confirm('Restart the kernel? Its variables are lost; the files stay.')) return;
    st.error = '';
    st.note = '';
    render();
    try {
      await post(sessionPath(st.sid) + '/' + action);
      st.note = action === 'restart' ? 'The kernel restarted: variables are gone, files are kept.' : 'Interrupted.';
    } catch (e) {
      st.error = `Could not ${action === 'restart' ? 'restart' : 'interrupt'} the kernel: ${message(e)}`;
    }
    render();
  }

  // openFile puts the cells of an .ipynb file in place of the notebook's, in the same
  // session; nothing runs until the person runs it.
  async function openFile(file) {
    if (!file) return;
    const mine = state.current;
    mine.error = '';
    mine.note = '';
    try {
      if (file.size > 100e6) throw new NotebookError(`it is ${Math.round(file.size / 1e6)} MB; the page opens notebooks up to 100 MB.`);
      const nb = readNotebook(await file.text());
      if (mine.cells.some((c) => c.code.trim()) && !confirm(`Put the cells of ${file.name} in place of this notebook's? The session, its variables and files stay.`)) return;
      mine.cells = nb.cells.map((c) => cell(c.code, c));
      if (!mine.cells.some((c) => c.type === 'code')) mine.cells.push(cell());
      mine.name = file.name;
      mine.note = `Opened ${file.name}: ${nb.cells.length} cells, none run yet.` +
        (/^python/i.test(nb.language) || languageOf(nb.language) ? '' : ` It was written for ${nb.language}; its cells run here as Python.`);
    } catch (e) {
      mine.error = `Could not open ${file.name}: ` + (e instanceof NotebookError ? e.message : message(e));
    }
    render();
  }

  function downloadNotebook() {
    const name = st.name || (st.sid ? `${st.sid}.ipynb` : 'notebook.ipynb');
    save(new Blob([writeNotebook(st.cells)], { type: 'application/x-ipynb+json' }), name);
  }

  const drop = dropTarget(setDragging, (files) => adder.current?.(files));

  return html`<section class="view notebook" hidden=${!active} aria-label="Notebook" ...${drop}>
    ${dragging && html`<div class="dropzone" aria-hidden="true">Drop files to upload them into the workspace</div>`}
    <div class="toolbar">
      <span class="muted small">${st.sid ? html`Session <code>${st.sid}</code>` : 'New session'}</span>
      <span class="grow"></span>
      <input type="file" accept=".ipynb,application/x-ipynb+json,application/json" hidden ref=${picker} aria-label="Notebook file"
        onChange=${(e) => (openFile(e.target.files[0]), (e.target.value = ''))} />
      <button type="button" onClick=${() => picker.current.click()}>Open .ipynb</button>
      <button type="button" onClick=${downloadNotebook}>Download .ipynb</button>
      <button type="button" onClick=${() => kernel('interrupt')} disabled=${!st.sid}>Interrupt</button>
      <button type="button" onClick=${() => kernel('restart')} disabled=${!st.sid}>Restart</button>
      <button type="button" onClick=${() => go('#notebook')}>New session</button>
    </div>
    ${st.error && html`<p class="error" role="alert">${st.error}</p>`}
    ${st.note && html`<p class="status" role="status">${st.note}</p>`}
    <div class="columns">
      <div class="cells">
        ${st.importing && html`<p class="muted">Loading the model's steps…</p>`}
        ${st.cells.map((c, i) =>
          c.type !== 'code'
            ? html`<article class="cell text" key=${c.key} aria-label=${`Cell ${i + 1}`}>
                <header>
                  <span class="muted small">${c.type === 'markdown' ? 'Markdown' : 'Raw'}</span>
                  <span class="grow"></span>
                  <button type="button" class="small" onClick=${() => ((st.cells = st.cells.filter((x) => x !== c)), render())}>Delete cell</button>
                </header>
                ${c.type === 'markdown' ? html`<${Markdown} text=${c.code} />` : html`<pre class="raw">${c.code}</pre>`}
              </article>`
            : html`<article class=${'cell' + (c.byModel ? ' by-model' : '')} key=${c.key} aria-label=${`Cell ${i + 1}`}>
            <header>
              <span class="count">[${c.running ? '*' : c.count || ' '}]</span>
              <select class="language" aria-label=${`Language of cell ${i + 1}`} value=${c.language}
                onChange=${(e) => ((c.language = e.target.value), render())}>
                ${Object.entries(languages).map(([name, label]) => html`<option key=${name} value=${name}>${label}</option>`)}
              </select>
              ${c.byModel && html`<span class="muted small">written by the model</span>`}
              <span class="grow"></span>
              <button type="button" class="primary small" onClick=${() => run(c)} disabled=${c.running}>Run cell</button>
              <button type="button" class="small" onClick=${() => ((st.cells = st.cells.filter((x) => x !== c)), render())}>Delete cell</button>
            </header>
            <${Editor} id=${`cell-${c.key}`} sessionId=${st.sid} language=${c.language} label=${`Code of cell ${i + 1}`} rows=${Math.min(30, Math.max(2, c.code.split('\n').length))}
              inputRef=${(el) => (boxes.current[c.key] = el)} value=${c.code}
              onInput=${(e) => {
                c.code = e.target.value;
                render();
              }}
              onKeyDown=${(e) => onKey(e, c)} />
            ${c.note && html`<p class="status">${c.note}</p>`}
            <div class="outputs" aria-live="polite">
              <${Outputs} outputs=${c.outputs} />
              <${Result} sessionId=${st.sid} result=${c.result} />
            </div>
            ${c.error && html`<p class="error" role="alert">${c.error}</p>`}
          </article>`,
        )}
        <button type="button" onClick=${() => add()}>Add cell</button>
      </div>
      <aside class="side">
        <${Files} sessionId=${st.sid} ensureSession=${ensureSession} refresh=${refresh} adder=${adder} />
        <${Tools} sessionId=${st.sid} refresh=${ran} />
        <${Network} sessionId=${st.sid} refresh=${ran} />
      </aside>
    </div>
  </section>`;
}

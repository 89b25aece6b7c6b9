// A notebook cell's code editor: a textarea where Tab indents or completes a name and
// Shift+Tab dedents or shows what the kernel knows of a name, asking the session's kernel
// (POST .../complete and .../inspect). Both wait for the session's turn on the server, behind
// a running cell: a request is dropped after a few seconds, and one for text that changed
// since is ignored. Escape, then Tab, moves the focus on as usual. Only Python's kernel
// answers completions and inspections: in a cell of another language Tab indents and
// Shift+Tab dedents.
//
// The API counts the cursor in code points, a textarea in UTF-16 units: points and units
// convert.

import { html, useEffect, useRef, useState } from './vendor/preact-htm.js';
import { message, post, sessionPath } from './api.js';
import { ansi } from './cells.js';
import { languages } from './ipynb.js';

const indent = '    ';
const waitFor = 3000; // ms: how long a completion or inspection may wait for the kernel

const points = (text, units) => [...text.slice(0, units)].length;
const units = (text, points) => [...text].slice(0, points).join('').length;
const lineStart = (text, at) => (at === 0 ? 0 : text.lastIndexOf('\n', at - 1) + 1);

// replace puts text in place of el's start..end as typing would (so undo takes it back),
// which fires the textarea's input event.
function replace(el, start, end, text) {
  el.setSelectionRange(start, end);
  if (!document.execCommand('insertText', false, text)) {
    el.setRangeText(text, start, end, 'end');
    el.dispatchEvent(new Event('input', { bubbles: true }));
  }
}

// shift indents (by one step) or dedents the lines of el's selection, keeping them selected.
function shift(el, dedent) {
  const text = el.value;
  const from = lineStart(text, el.selectionStart);
  let to = text.indexOf('\n', el.selectionEnd - (el.selectionEnd > el.selectionStart && text[el.selectionEnd - 1] === '\n' ? 1 : 0));
  if (to < 0) to = text.length;
  const lines = text.slice(from, to).split('\n');
  const moved = dedent ? lines.map((l) => l.replace(/^( {1,4}|\t)/, '')) : lines.map((l) => indent + l);
  const out = moved.join('\n');
  if (out === text.slice(from, to)) return;
  replace(el, from, to, out);
  el.setSelectionRange(from, from + out.length);
}

// caret is where el's cursor is, in pixels from el's offset parent: the textarea does not
// wrap lines and its font is monospaced, so the line and column tell.
let measure; // a canvas, for the width of the editor's characters

function caret(el) {
  const before = el.value.slice(0, el.selectionStart);
  const line = before.split('\n').length - 1;
  const column = before.length - before.lastIndexOf('\n') - 1;
  const s = getComputedStyle(el);
  const ctx = (measure ??= document.createElement('canvas')).getContext('2d');
  ctx.font = `${s.fontSize} ${s.fontFamily}`;
  const lineHeight = parseFloat(s.lineHeight) || parseFloat(s.fontSize) * 1.5;
  return {
    top: el.offsetTop + parseFloat(s.paddingTop) + (line + 1) * lineHeight - el.scrollTop,
    left: el.offsetLeft + parseFloat(s.paddingLeft) + column * ctx.measureText('0').width - el.scrollLeft,
  };
}

export function Editor({ sessionId, language = 'python', value, onInput, onKeyDown, inputRef, label, rows, id }) {
  const box = useRef();
  const asking = useRef(null); // the AbortController of the request in flight
  const escaped = useRef(false);
  const [list, setList] = useState(null); // {matches, shown, index, start, tail, at}
  const [doc, setDoc] = useState(null); // {text, found, level, code, at}
  const panel = useRef();
  const chosen = useRef();

  useEffect(() => chosen.current?.scrollIntoView({ block: 'nearest' }), [list?.index]);
  useEffect(() => {
    if (!doc) return;
    const away = (e) => !panel.current?.contains(e.target) && setDoc(null);
    document.addEventListener('mousedown', away);
    return () => document.removeEventListener('mousedown', away);
  }, [doc]);
  useEffect(() => () => asking.current?.abort(), []);

  // ask POSTs body to the session's kernel, dropping the request before it; it resolves to
  // {answer} or {error} (it failed, or waited too long), or to null when a newer request
  // took over.
  async function ask(what, body) {
    asking.current?.abort();
    const mine = (asking.current = new AbortController());
    const timer = setTimeout(() => mine.abort(), waitFor);
    let res;
    try {
      res = { answer: await post(sessionPath(sessionId) + '/' + what, body, { signal: mine.signal }) };
    } catch (e) {
      res = { error: mine.signal.aborted ? 'No answer from the kernel yet: is a cell running?' : message(e) };
    }
    clearTimeout(timer);
    if (asking.current !== mine) return null;
    asking.current = null;
    return res;
  }

  async function complete(el) {
    const code = el.value;
    const at = el.selectionStart;
    const r = (await ask('complete', { code, cursor_pos: points(code, at) }))?.answer;
    if (!r?.matches?.length || el.value !== code || el.selectionStart !== at) return;
    const start = units(code, r.cursor_start);
    const end = units(code, r.cursor_end);
    if (r.matches.length === 1) return replace(el, start, end, r.matches[0]);
    const matches = r.matches.map((m, i) => ({ text: m, type: r.types?.[i] || '' }));
    setList({ matches, shown: matches, index: 0, start, tail: Math.max(0, end - at), at: caret(el) });
  }

  // filter narrows the list to what the text typed since it opened begins; it closes when
  // the cursor left the word or nothing is left.
  function filter(el) {
    if (!list) return;
    const typed = el.value.slice(list.start, el.selectionStart);
    const shown = list.matches.filter((m) => m.text.startsWith(typed));
    if (el.selectionStart < list.start || /[\s()[\]{},;=]/.test(typed) || !shown.length) return setList(null);
    setList({ ...list, shown, index: 0 });
  }

  function pick(m) {
    const el = box.current;
    replace(el, list.start, el.selectionStart + list.tail, m.text);
    setList(null);
  }

  async function inspect(el) {
    const code = el.value;
    const at = el.selectionStart;
    const level = doc && doc.code === code && doc.at === at && doc.level === 0 ? 1 : 0;
    if (!sessionId) return setDoc({ text: 'No session yet: run a cell first, then ask again.', code, at, level: 1 });
    const res = await ask('inspect', { code, cursor_pos: points(code, at), detail_level: level });
    if (!res || el.value !== code || el.selectionStart !== at) return;
    const r = res.answer;
    const text = r?.found && typeof r.data?.['text/plain'] === 'string' ? r.data['text/plain'] : '';
    setDoc({ text: text || res.error || 'Nothing known about that name.', found: !!text, code, at, level });
  }

  function keyDown(e) {
    const el = e.currentTarget;
    const wasEscaped = escaped.current;
    escaped.current = false;
    if (list) {
      const n = list.shown.length;
      if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        e.preventDefault();
        return setList({ ...list, index: (list.index + (e.key === 'ArrowDown' ? 1 : n - 1)) % n });
      }
      if ((e.key === 'Enter' && !e.shiftKey && !e.ctrlKey && !e.metaKey) || (e.key === 'Tab' && !e.shiftKey)) {
        e.preventDefault();
        return pick(list.shown[list.index]);
      }
      if (e.key === 'Escape') {
        e.preventDefault();
        return setList(null);
      }
      if (['ArrowLeft', 'ArrowRight', 'Home', 'End', 'PageUp', 'PageDown', 'Enter', 'Tab'].includes(e.key)) setList(null);
    }
    if (e.key === 'Escape') {
      escaped.current = !doc;
      setDoc(null);
      return;
    }
    if (e.key === 'Tab' && !wasEscaped && !e.ctrlKey && !e.metaKey && !e.altKey) {
      e.preventDefault();
      const selected = el.selectionStart !== el.selectionEnd;
      const before = el.value.slice(lineStart(el.value, el.selectionStart), el.selectionStart);
      if (selected || !before.trim() || language !== 'python') {
        if (e.shiftKey || selected) shift(el, e.shiftKey);
        else replace(el, el.selectionStart, el.selectionStart, indent.slice(before.length % indent.length));
      } else if (e.shiftKey) inspect(el);
      else if (sessionId) complete(el);
      return;
    }
    onKeyDown?.(e);
  }

  function input(e) {
    onInput(e);
    filter(e.currentTarget);
    if (doc) setDoc(null);
  }

  const option = (i) => `${id}-match-${i}`;
  const place = (at) => ({ top: `${at.top}px`, left: `max(0px, min(${at.left}px, calc(100% - 16rem)))` });
  return html`<div class="editor">
    <textarea class="source" aria-label=${label} spellcheck="false" rows=${rows} ref=${(el) => ((box.current = el), inputRef?.(el))}
      value=${value} placeholder=${language === 'python' ? 'Python: Shift+Enter runs the cell, Tab completes, Shift+Tab shows help' : `${languages[language]}: Shift+Enter runs the cell`}
      aria-autocomplete="list" aria-controls=${list ? `${id}-matches` : undefined}
      aria-activedescendant=${list ? option(list.index) : undefined}
      onInput=${input} onKeyDown=${keyDown} onBlur=${() => setList(null)}></textarea>
    ${list &&
    html`<ul class="completions" id=${`${id}-matches`} role="listbox" aria-label="Completions" style=${place(list.at)}>
      ${list.shown.map(
        (m, i) => html`<li key=${i} id=${option(i)} role="option" aria-selected=${i === list.index ? 'true' : 'false'}
          ref=${i === list.index ? chosen : undefined} onMouseDown=${(e) => (e.preventDefault(), pick(m))}>
          <span class="match">${m.text}</span>${m.type && html` <span class="muted small">${m.type}</span>`}
        </li>`,
      )}
    </ul>`}
    ${doc &&
    html`<div class="inspection" role="note" aria-label="Help" ref=${panel} onKeyDown=${(e) => e.key === 'Escape' && setDoc(null)}>
      <button type="button" class="small close" onClick=${() => setDoc(null)}>Close</button>
      ${doc.found ? html`<pre>${ansi(doc.text)}</pre>` : html`<p class="muted">${doc.text}</p>`}
      ${doc.found && doc.level === 0 && html`<p class="muted small">Shift+Tab again shows more (the source).</p>`}
    </div>`}
  </div>`;
}

// What chat and notebook both show: code, the outputs of a run (Jupyter's output model),
// the files it wrote, Markdown. Everything a model or user code made is untrusted: HTML
// reaches the page only through sanitize, text only as text.

import { html, useEffect, useMemo, useRef, useState } from './vendor/preact-htm.js';
import DOMPurify from './vendor/purify.js';
import { marked } from './vendor/marked.js';
import hljs from './vendor/highlight.js';
import python from './vendor/highlight-python.js';
import bash from './vendor/highlight-bash.js';
import { download, message, relativePath } from './api.js';

hljs.registerLanguage('python', python);
hljs.registerLanguage('bash', bash);
const languages = { python: 'python', py: 'python', bash: 'bash', sh: 'bash', shell: 'bash', console: 'bash' };

// No styles (they could dress up fake controls, and the CSP refuses them anyway), no forms
// or fields (a fake "enter your key" box), no ids or names (they could shadow the page's
// own), and of classes only the highlighter's: the page's own classes (a fixed full-screen
// layer, a primary button) must not dress up untrusted HTML either.
const purifyConfig = {
  FORBID_TAGS: ['style', 'form', 'button', 'textarea', 'select', 'option', 'input', 'dialog'],
  FORBID_ATTR: ['style', 'id', 'name'],
};
const ownClass = /^(hljs(-[\w-]+)?|language-[\w-]+)$/;

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.hasAttribute('class')) {
    const kept = node.getAttribute('class').split(/\s+/).filter((c) => ownClass.test(c));
    if (kept.length) node.setAttribute('class', kept.join(' '));
    else node.removeAttribute('class');
  }
  if (node.tagName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
  // An image from elsewhere would tell its server that the page was read (and what the
  // URL carries): the CSP blocks it; show its description instead of a broken image.
  if (node.tagName === 'IMG' && !/^data:image\//.test(node.getAttribute('src') || '')) {
    node.removeAttribute('src');
    node.setAttribute('alt', `[image not loaded: ${node.getAttribute('alt') || 'from elsewhere'}]`);
  }
});

// The CSP refuses inline styles even in HTML that is only parsed, and says so on the
// console each time; so what DOMPurify removes anyway, styles (pandas writes a <style> and
// style attributes into every table), goes before it parses.
const unstyle = (s) =>
  s.replace(/<style\b[^>]*>[\s\S]*?<\/style\s*>/gi, '').replace(/<[a-z][^>]*>/gi, (tag) => tag.replace(/\sstyle\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)/gi, ''));

export const sanitize = (s) => DOMPurify.sanitize(unstyle(s), purifyConfig);

export function highlight(code, language) {
  const lang = languages[language];
  const out = lang ? hljs.highlight(code, { language: lang, ignoreIllegals: true }).value : escapeHTML(code);
  return sanitize(out);
}

const escapeHTML = (s) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export function Code({ code, language = 'python' }) {
  const h = useMemo(() => highlight(code, language), [code, language]);
  return html`<pre class="code"><code class="hljs" dangerouslySetInnerHTML=${{ __html: h }} /></pre>`;
}

export function Markdown({ text }) {
  const ref = useRef();
  const h = useMemo(() => sanitize(marked.parse(text, { gfm: true, async: false })), [text]);
  useEffect(() => {
    for (const el of ref.current.querySelectorAll('pre code[class*="language-"]')) {
      const lang = /language-(\w+)/.exec(el.className)?.[1];
      if (languages[lang]) {
        el.innerHTML = highlight(el.textContent, lang);
        el.classList.add('hljs');
      }
    }
  }, [h]);
  return html`<div class="markdown" ref=${ref} dangerouslySetInnerHTML=${{ __html: h }} />`;
}

// ANSI colour codes (tracebacks, coloured logs) become spans; other escape sequences go.

const escapes = /\x1b\[([0-9;?]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]/g;

function sgr(state, params) {
  const s = { ...state };
  const codes = params === '' ? [0] : params.split(';').map(Number);
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (c === 0) for (const k of Object.keys(s)) delete s[k];
    else if (c === 1) s.bold = true;
    else if (c === 2) s.dim = true;
    else if (c === 3) s.italic = true;
    else if (c === 4) s.underline = true;
    else if (c === 22) s.bold = s.dim = false;
    else if (c === 23) s.italic = false;
    else if (c === 24) s.underline = false;
    else if (c >= 30 && c <= 37) s.fg = c - 30;
    else if (c >= 90 && c <= 97) s.fg = c - 90 + 8;
    else if (c === 39) delete s.fg;
    else if (c >= 40 && c <= 47) s.bg = c - 40;
    else if (c >= 100 && c <= 107) s.bg = c - 100 + 8;
    else if (c === 49) delete s.bg;
    else if (c === 38 || c === 48) {
      const key = c === 38 ? 'fg' : 'bg';
      if (codes[i + 1] === 5) {
        s[key] = codes[i + 2];
        i += 2;
      } else if (codes[i + 1] === 2) {
        s[key] = `rgb(${codes[i + 2]}, ${codes[i + 3]}, ${codes[i + 4]})`;
        i += 4;
      }
    }
  }
  return s;
}

// colour: an index under 16 is a class (the theme picks it); others are computed.
function colour(c) {
  if (typeof c === 'string') return { value: c };
  if (c < 16) return { cls: c };
  if (c < 232) {
    const level = (n) => (n === 0 ? 0 : 55 + n * 40);
    const n = c - 16;
    return { value: `rgb(${level(Math.floor(n / 36))}, ${level(Math.floor(n / 6) % 6)}, ${level(n % 6)})` };
  }
  const g = 8 + (c - 232) * 10;
  return { value: `rgb(${g}, ${g}, ${g})` };
}

function styled(text, s) {
  const cls = [];
  const style = {};
  if (s.bold) cls.push('ansi-bold');
  if (s.dim) cls.push('ansi-dim');
  if (s.italic) cls.push('ansi-italic');
  if (s.underline) cls.push('ansi-underline');
  for (const key of ['fg', 'bg']) {
    if (s[key] === undefined) continue;
    const c = colour(s[key]);
    if (c.cls !== undefined) cls.push(`ansi-${key}-${c.cls}`);
    else style[key === 'fg' ? 'color' : 'backgroundColor'] = c.value;
  }
  return cls.length || Object.keys(style).length ? html`<span class=${cls.join(' ')} style=${style}>${text}</span>` : text;
}

export function ansi(text) {
  const parts = [];
  let state = {};
  let last = 0;
  for (const m of text.matchAll(escapes)) {
    if (m.index > last) parts.push(styled(text.slice(last, m.index), state));
    last = m.index + m[0].length;
    if (m[2] === 'm') state = sgr(state, m[1]);
  }
  if (last < text.length) parts.push(styled(text.slice(last), state));
  return parts;
}

// overwrite applies carriage returns the way a terminal shows them (progress bars).
const overwrite = (text) =>
  text.includes('\r') ? text.replace(/\r\n/g, '\n').split('\n').map((l) => l.slice(l.lastIndexOf('\r', l.length - 2) + 1)).join('\n') : text;

// Outputs shows a run's outputs in order; consecutive pieces of one stream are one block.
export function Outputs({ outputs }) {
  const blocks = [];
  for (const o of outputs || []) {
    const prev = blocks[blocks.length - 1];
    if (o.type === 'stream' && prev?.type === 'stream' && prev.name === o.name) prev.text += o.text;
    else blocks.push(o.type === 'stream' ? { ...o } : o);
  }
  return blocks.map((o, i) => html`<${Output} key=${i} o=${o} />`);
}

function Output({ o }) {
  if (o.type === 'stream') return html`<pre class=${'out ' + (o.name === 'stderr' ? 'stderr' : 'stdout')}>${ansi(overwrite(o.text || ''))}</pre>`;
  if (o.type === 'error') {
    const text = o.traceback?.length ? o.traceback.join('\n') : `${o.ename}: ${o.evalue}`;
    return html`<pre class="out traceback" aria-label="Error">${ansi(text)}</pre>`;
  }
  return html`<${Data} data=${o.data || {}} />`;
}

function Data({ data }) {
  const alt = typeof data['text/plain'] === 'string' ? data['text/plain'] : 'image output';
  for (const type of ['image/png', 'image/jpeg', 'image/gif', 'image/webp']) {
    if (data[type]) return html`<${Picture} src=${`data:${type};base64,${String(data[type]).replace(/\s/g, '')}`} alt=${alt} />`;
  }
  if (data['image/svg+xml']) return html`<${Picture} src=${'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(data['image/svg+xml'])} alt=${alt} />`;
  if (data['text/html']) return html`<${HTML} source=${String(data['text/html'])} />`;
  if (data['text/markdown']) return html`<${Markdown} text=${String(data['text/markdown'])} />`;
  if (data['text/plain'] !== undefined) return html`<pre class="out result">${ansi(String(data['text/plain']))}</pre>`;
  if (data['application/json'] !== undefined) return html`<pre class="out result">${JSON.stringify(data['application/json'], null, 2)}</pre>`;
  return null;
}

function HTML({ source }) {
  const h = useMemo(() => sanitize(source), [source]);
  return html`<div class="out html" dangerouslySetInnerHTML=${{ __html: h }} />`;
}

// Picture is an image output; a click shows it at its natural size.
function Picture({ src, alt }) {
  const [open, setOpen] = useState(false);
  const dialog = useRef();
  useEffect(() => {
    if (open) dialog.current.showModal();
  }, [open]);
  return html`
    <button type="button" class="picture" title="Show at full size" onClick=${() => setOpen(true)}>
      <img src=${src} alt=${alt} />
    </button>
    ${open &&
    html`<dialog class="lightbox" ref=${dialog} aria-label="Image at full size" onClose=${() => setOpen(false)}
      onClick=${(e) => e.target === dialog.current && dialog.current.close()}>
      <div class="lightbox-bar"><button type="button" onClick=${() => dialog.current.close()}>Close</button></div>
      <img src=${src} alt=${alt} />
    </dialog>`}`;
}

// Result shows what ended a run: its status when it is not plain ok or error, and the files
// it wrote.
export function Result({ sessionId, result }) {
  if (!result) return null;
  const note = result.status !== 'ok' && result.status !== 'error';
  return html`
    ${note && html`<p class="status bad">${statusText(result)}</p>`}
    ${result.truncated && html`<p class="status">The output was cut: it was longer than the server keeps.</p>`}
    <${FileChanges} sessionId=${sessionId} files=${result.files} />`;
}

function statusText(r) {
  const what = { timeout: 'Timed out', interrupted: 'Interrupted', oom: 'Out of memory', crashed: 'The sandbox crashed' }[r.status] || r.status;
  return r.message ? `${what}: ${r.message}` : what + '.';
}

// CommandOutput shows a shell call's result.
export function CommandOutput({ sessionId, result }) {
  if (!result) return null;
  return html`
    ${result.stdout && html`<pre class="out stdout">${ansi(result.stdout)}</pre>`}
    ${result.stderr && html`<pre class="out stderr">${ansi(result.stderr)}</pre>`}
    ${result.status !== 'ok' && html`<p class="status bad">${result.message || `Exit code ${result.exit_code}` + (result.status !== 'error' ? ` (${result.status})` : '')}</p>`}
    <${FileChanges} sessionId=${sessionId} files=${result.files} />`;
}

export function FileChanges({ sessionId, files }) {
  if (!files?.length) return null;
  return html`<ul class="changes" aria-label="Files written">
    ${files.map(
      (f) => html`<li key=${f.path}>
        ${f.change === 'deleted'
          ? html`<span class="deleted">${relativePath(f.path)}</span> <span class="muted">deleted</span>`
          : html`<${DownloadButton} sessionId=${sessionId} path=${relativePath(f.path)} />${' '}
              <span class="muted">${f.change}, ${formatSize(f.size)}</span>`}
      </li>`,
    )}
  </ul>`;
}

export function DownloadButton({ sessionId, path, label = path }) {
  const [state, setState] = useState('');
  const click = async () => {
    setState('Downloading…');
    try {
      await download(sessionId, path);
      setState('');
    } catch (e) {
      setState(`Could not download ${path}: ${message(e)}`);
    }
  };
  return html`<button type="button" class="link" aria-label=${'Download ' + path} onClick=${click}>${label}</button>
    ${state && html` <span class="muted" role="status">${state}</span>`}`;
}

export function formatSize(n) {
  if (n < 1000) return `${n} B`;
  const units = ['kB', 'MB', 'GB', 'TB'];
  let i = -1;
  do {
    n /= 1000;
    i++;
  } while (n >= 1000 && i < units.length - 1);
  return `${n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

const relative = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

// ago says when t was, relative to now: "2 minutes ago".
export function ago(t) {
  const s = (new Date(t).getTime() - Date.now()) / 1000;
  for (const [unit, size] of [['day', 86400], ['hour', 3600], ['minute', 60]]) {
    if (Math.abs(s) >= size) return relative.format(Math.round(s / size), unit);
  }
  return Math.abs(s) < 10 ? 'just now' : relative.format(Math.round(s), 'second');
}

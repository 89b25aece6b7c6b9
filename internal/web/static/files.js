// A session's workspace (/mnt/data): uploads on their way, with a percentage each, and the
// files panel of the notebook: list, upload, download, delete.

import { html, useEffect, useReducer, useRef, useState } from './vendor/preact-htm.js';
import { del, filePath, get, message, relativePath, sessionPath, upload } from './api.js';
import { DownloadButton, ago, formatSize } from './cells.js';

// Uploads lists files being uploaded (state "uploading", with progress 0..1), uploaded
// ("done") or refused ("failed", with error): nothing fails unseen.
// dropTarget returns the handlers that make an element take files dropped on it: onFiles
// gets them; setDragging says whether files are over it (to show the drop zone). With
// enabled false, drops are left to the browser.
export const dropTarget = (setDragging, onFiles, enabled = true) => ({
  onDragOver: (e) => {
    if (!e.dataTransfer?.types?.includes('Files') || !enabled) return;
    e.preventDefault();
    setDragging(true);
  },
  onDragLeave: (e) => e.currentTarget === e.target && setDragging(false),
  onDrop: (e) => {
    e.preventDefault();
    setDragging(false);
    if (e.dataTransfer?.files?.length && enabled) onFiles([...e.dataTransfer.files]);
  },
});

export function Uploads({ items, label, onRemove }) {
  if (!items.length) return null;
  return html`<ul class="chips" aria-label=${label}>
    ${items.map(
      (c) => html`<li class=${'chip ' + c.state} key=${c.name}>
        <span class="name">${c.name}</span>
        ${c.state === 'uploading' &&
        html`<progress max="1" value=${c.progress} aria-label=${'Uploading ' + c.name}></progress>
          <span class="small">${Math.floor(c.progress * 100)}%</span>`}
        ${c.state === 'failed' && html`<span class="error small" role="alert">not uploaded: ${c.error}</span>`}
        ${c.state !== 'uploading' &&
        html`<button type="button" class="icon" aria-label=${'Remove ' + c.name} title="Remove" onClick=${() => onRemove(c)}>×</button>`}
      </li>`,
    )}
  </ul>`;
}

const byKindThenName = (a, b) => (b.type === 'dir') - (a.type === 'dir') || a.name.localeCompare(b.name);

// Files is the workspace of session sessionId; ensureSession() makes one for the first
// upload when there is none yet. adder.current is set to add(files), for drops elsewhere.
export function Files({ sessionId, ensureSession, refresh, adder }) {
  const [dir, setDir] = useState('');
  const [list, setList] = useState(null);
  const [error, setError] = useState('');
  const uploads = useRef([]);
  const [, render] = useReducer((n) => n + 1, 0);
  const picker = useRef();
  const now = useRef({});
  now.current = { sessionId, dir };
  const seq = useRef(0);

  async function load() {
    const { sessionId, dir } = now.current;
    const mine = ++seq.current;
    if (!sessionId) return setList(null);
    try {
      const r = await get(sessionPath(sessionId) + '/files' + (dir ? '?path=' + encodeURIComponent(dir) : ''));
      if (mine !== seq.current) return;
      setList((r?.files || []).sort(byKindThenName));
      setError('');
    } catch (e) {
      if (mine === seq.current) setError('Could not list the files: ' + message(e));
    }
  }

  useEffect(() => setDir(''), [sessionId]);
  useEffect(() => {
    load();
  }, [sessionId, dir, refresh]);

  function add(files) {
    const into = now.current.dir;
    for (const file of files) {
      const item = { name: file.name, progress: 0, state: 'uploading', error: '' };
      uploads.current = [...uploads.current.filter((u) => u.name !== file.name), item];
      (async () => {
        try {
          const id = await ensureSession();
          await upload(id, into ? `${into}/${file.name}` : file.name, file, (p) => {
            item.progress = p;
            render();
          });
          uploads.current = uploads.current.filter((u) => u !== item);
          load();
        } catch (e) {
          item.state = 'failed';
          item.error = message(e);
        }
        render();
      })();
    }
    render();
  }
  if (adder) adder.current = add;

  async function remove(path) {
    if (!confirm(`Delete ${path} from the workspace?`)) return;
    try {
      await del(filePath(sessionId, path));
      load();
    } catch (e) {
      setError(`Could not delete ${path}: ${message(e)}`);
    }
  }

  const up = () => setDir(dir.split('/').slice(0, -1).join('/'));
  return html`<section class="files" aria-labelledby="files-title">
    <h2 id="files-title">Files <span class="muted small">/mnt/data/${dir}</span></h2>
    <div class="row">
      <button type="button" onClick=${() => picker.current.click()}>Upload files</button>
      <input type="file" multiple hidden ref=${picker} onChange=${(e) => (add([...e.target.files]), (e.target.value = ''))} />
      <button type="button" onClick=${load} disabled=${!sessionId}>Refresh files</button>
      ${dir && html`<button type="button" onClick=${up}>Up one folder</button>`}
    </div>
    <${Uploads} items=${uploads.current} label="Uploads"
      onRemove=${(u) => ((uploads.current = uploads.current.filter((x) => x !== u)), render())} />
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${!sessionId && html`<p class="muted small">No session yet: running a cell or uploading a file starts one.</p>`}
    ${list?.length === 0 && html`<p class="muted small">No files here yet. Drop some onto the page, or upload them.</p>`}
    ${list?.length > 0 &&
    html`<ul class="filelist">
      ${list.map((f) => {
        const path = relativePath(f.path);
        return html`<li key=${f.path}>
          <div>
            ${f.type === 'dir'
              ? html`<button type="button" class="link" aria-label=${'Open folder ' + path} onClick=${() => setDir(path)}>${f.name}/</button>`
              : f.type === 'file'
                ? html`<${DownloadButton} sessionId=${sessionId} path=${path} label=${f.name} />`
                : html`<span>${f.name}</span>`}
            <div class="muted small">${f.type === 'file' ? formatSize(f.size) + ' · ' : ''}${ago(f.mod_time)}</div>
          </div>
          ${f.type !== 'dir' && html`<button type="button" class="small" aria-label=${'Delete ' + path} onClick=${() => remove(path)}>Delete</button>`}
        </li>`;
      })}
    </ul>`}
  </section>`;
}

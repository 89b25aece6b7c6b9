// The REST API v1 of the same origin: the API key, JSON requests, uploads with progress,
// downloads, and Server-Sent Events read from a POST's body (EventSource can neither POST
// nor send a header).

const keyName = 'cellbox.api-key'; // in sessionStorage only: this tab, until it closes

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status; // 0: no HTTP status (unreachable, or an error event of a stream)
    this.code = code;
  }
}

let askForKey = async () => null;
let asking = null;

// onKeyNeeded sets how the page asks for a key: ask(message) resolves to a key, or null
// when the person gives none.
export function onKeyNeeded(ask) {
  askForKey = ask;
}

const currentKey = () => sessionStorage.getItem(keyName) || '';

// newKey asks for a key after a 401, once for every request refused at the same time;
// it says whether there is a new key to try.
function newKey(message) {
  asking ??= askForKey(message).then((key) => {
    asking = null;
    if (!key) return false;
    sessionStorage.setItem(keyName, key);
    return true;
  });
  return asking;
}

async function errorOf(res) {
  let code = 'http_' + res.status;
  let message = `The server answered ${res.status} ${res.statusText}`.trim();
  try {
    const body = await res.json();
    if (body?.error?.message) ({ code, message } = body.error);
  } catch {
    // not the error shape: keep the status line
  }
  return new ApiError(res.status, code, message);
}

// withKey runs attempt(headers) with the key's header; after a 401 it asks for a key and
// tries again. attempt returns {status, error?: () => Promise<ApiError>, value}.
async function withKey(attempt) {
  for (;;) {
    const used = currentKey();
    const res = await attempt(used ? { Authorization: 'Bearer ' + used } : {});
    if (res.status !== 401) return res;
    const err = await res.error();
    if (used !== currentKey()) continue; // another request got a new key meanwhile
    const why = used ? `The server refused this key: ${err.message}` : 'This server needs an API key.';
    if (!(await newKey(why))) throw err;
  }
}

// send is fetch with the key; it resolves to an ok Response and throws ApiError otherwise.
async function send(method, path, { json, body, headers = {}, signal } = {}) {
  if (json !== undefined) {
    headers = { ...headers, 'Content-Type': 'application/json' };
    body = JSON.stringify(json);
  }
  const { res } = await withKey(async (auth) => {
    let res;
    try {
      res = await fetch(path, { method, headers: { ...headers, ...auth }, body, signal });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError(0, 'unreachable', 'The server could not be reached. Is cellbox still running?');
    }
    return { status: res.status, error: () => errorOf(res), res };
  });
  if (!res.ok) throw await errorOf(res);
  return res;
}

// request sends a JSON body (none when json is undefined) and resolves to the JSON answer,
// or null for an empty one.
export async function request(method, path, json, opts = {}) {
  const res = await send(method, path, { json, ...opts });
  const type = res.headers.get('Content-Type') || '';
  return res.status === 204 || !type.includes('json') ? null : res.json();
}

export const get = (path, opts) => request('GET', path, undefined, opts);
export const post = (path, json, opts) => request('POST', path, json, opts);
export const patch = (path, json) => request('PATCH', path, json);
export const del = (path) => request('DELETE', path);

// stream POSTs json with Accept: text/event-stream and calls onEvent(name, data) for every
// event as it arrives. It resolves to the data of the closing "result" event and throws the
// closing "error" event's error, or an ApiError when the stream ends without either.
export async function stream(path, json, onEvent, signal) {
  const res = await send('POST', path, { json, headers: { Accept: 'text/event-stream' }, signal });
  if (!(res.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
    return res.json(); // answered whole: no events
  }
  let result;
  let failure;
  const dispatch = (block) => {
    let event = 'message';
    const data = [];
    for (const line of block.split(/\r\n|\r|\n/)) {
      if (line === '' || line.startsWith(':')) continue; // ": keepalive"
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length === 0) return;
    const v = JSON.parse(data.join('\n'));
    if (event === 'result') result = v;
    else if (event === 'error') failure = new ApiError(0, v.error?.code, v.error?.message || 'The server failed.');
    else onEvent(event, v);
  };
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  const end = /\r\n\r\n|\n\n|\r\r/g; // an event's end
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      // Search only the new text (and the 3 characters before it, where an end may have
      // begun): a big event comes in many pieces, and searching it all each time would be
      // quadratic.
      end.lastIndex = Math.max(0, buf.length - 3);
      buf += value;
      let m;
      while ((m = end.exec(buf))) {
        dispatch(buf.slice(0, m.index));
        buf = buf.slice(m.index + m[0].length);
        end.lastIndex = 0;
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'unreachable', 'The connection to the server was lost.');
  }
  if (buf.trim()) dispatch(buf);
  if (failure) throw failure;
  if (result === undefined) throw new ApiError(0, 'unreachable', 'The connection to the server was lost before the end.');
  return result;
}

// Workspace paths: the API names files relative to /mnt/data in URLs and absolute in
// answers.

const workspaceRoots = ['/mnt/data/', '/home/user/'];

export function relativePath(path) {
  for (const root of workspaceRoots) if (path.startsWith(root)) return path.slice(root.length);
  return path.replace(/^\/+/, '');
}

export const baseName = (path) => path.split('/').filter(Boolean).pop() || path;

export const sessionPath = (id) => '/v1/sessions/' + encodeURIComponent(id);

export const filePath = (id, path) =>
  sessionPath(id) + '/files/' + relativePath(path).split('/').map(encodeURIComponent).join('/');

// upload PUTs file to path (relative to /mnt/data) in session id, calling
// onProgress(fraction) as it goes; it resolves to the FileInfo. XMLHttpRequest, as fetch
// cannot report an upload's progress.
export async function upload(id, path, file, onProgress) {
  const { value } = await withKey(
    (auth) =>
      new Promise((resolve, reject) => {
        const xhr = new XMLHttpRequest();
        xhr.open('PUT', filePath(id, path));
        for (const [k, v] of Object.entries(auth)) xhr.setRequestHeader(k, v);
        xhr.setRequestHeader('Content-Type', 'application/octet-stream');
        xhr.upload.onprogress = (e) => e.lengthComputable && onProgress?.(e.loaded / e.total);
        xhr.onerror = () => reject(new ApiError(0, 'unreachable', 'The server could not be reached.'));
        xhr.onload = () => {
          const error = async () => {
            try {
              const body = JSON.parse(xhr.responseText);
              return new ApiError(xhr.status, body.error.code, body.error.message);
            } catch {
              return new ApiError(xhr.status, 'http_' + xhr.status, `The server answered ${xhr.status}.`);
            }
          };
          let value = null;
          try {
            value = JSON.parse(xhr.responseText);
          } catch {
            // no body
          }
          resolve({ status: xhr.status, error, value, ok: xhr.status >= 200 && xhr.status < 300 });
        };
        xhr.send(file);
      }).then(async (r) => {
        if (r.status !== 401 && !r.ok) throw await r.error();
        return r;
      }),
  );
  return value;
}

// download fetches a workspace file with the key and hands it to the browser as a
// download (a plain link could not carry the key).
export async function download(id, path) {
  const res = await send('GET', filePath(id, path));
  save(await res.blob(), baseName(path));
}

// save hands blob to the browser as a download named name.
export function save(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

// message says what went wrong in plain words.
export function message(err) {
  if (err instanceof ApiError) return err.message;
  if (err?.name === 'AbortError') return 'Canceled.';
  return 'Something went wrong in the page: ' + (err?.message || err);
}

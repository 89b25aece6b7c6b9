// A session's tools: the functions its Python code marked with @tool (from cellbox import
// tool), which models call beside python and shell, from GET /v1/sessions/{id}/tools: each
// one's name, description, input schema (pretty-printed) and source. Loaded again when
// refresh changes (a cell finished). Everything here was written by code in the session:
// it is put on the page as text, never as HTML. A tool the code proposed for the API key's
// library (@tool(save=True)) is saved only when the person presses its Save button, which
// saves the source shown (POST /v1/sessions/{id}/tools/{name}/save): every session of the
// key may load it, so code never saves one by itself.

import { html, useEffect, useRef, useState } from './vendor/preact-htm.js';
import { ApiError, get, message, post, sessionPath } from './api.js';

export function Tools({ sessionId, refresh }) {
  const [tools, setTools] = useState(null);
  const [error, setError] = useState('');
  const seq = useRef(0);

  async function load() {
    const mine = ++seq.current;
    if (!sessionId) return setTools(null);
    try {
      const r = await get(sessionPath(sessionId) + '/tools');
      if (mine !== seq.current) return;
      setTools(r?.tools || []);
      setError('');
    } catch (e) {
      if (mine !== seq.current) return;
      setTools(null);
      // 404: the session ended, or a server without session tools: nothing to show.
      setError(e instanceof ApiError && e.status === 404 ? '' : 'Could not load the tools: ' + message(e));
    }
  }

  useEffect(() => {
    load();
  }, [sessionId, refresh]);

  async function save(t) {
    try {
      await post(sessionPath(sessionId) + '/tools/' + encodeURIComponent(t.name) + '/save', { source: t.source });
      await load();
    } catch (e) {
      setError('Could not save ' + t.name + ': ' + message(e));
    }
  }

  if (!sessionId || (!tools && !error)) return null;
  return html`<section class="tools" aria-labelledby="tools-title">
    <h2 id="tools-title">Tools</h2>
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${tools?.length === 0 &&
    html`<p class="muted small">No tools yet. A function marked <code>@tool</code> (<code>from cellbox import tool</code>) becomes one, for models to call.</p>`}
    ${tools?.length > 0 &&
    html`<ul class="toollist" aria-label="Session tools">
      ${tools.map(
        (t) => html`<li key=${t.name} aria-label=${'Tool ' + t.name}>
          <div class="row">
            <code class="name grow">${t.name}</code>
            ${t.saved && html`<span class="muted small">saved</span>`}
            ${!t.saved &&
            t.save_proposed &&
            html`<button
              type="button"
              class="small"
              aria-label=${'Save ' + t.name + ' to the library'}
              title="Save it, with the source below, to this API key's library: its other sessions may load it"
              onClick=${() => save(t)}
            >
              Save
            </button>`}
          </div>
          ${t.description && html`<p class="description small">${t.description}</p>`}
          <details>
            <summary class="small">Input schema</summary>
            <pre class="schema" aria-label=${'Input schema of ' + t.name}>${JSON.stringify(t.input_schema, null, 2)}</pre>
          </details>
          <details>
            <summary class="small">Source</summary>
            <pre class="source-code" aria-label=${'Source of ' + t.name}><code>${t.source}</code></pre>
          </details>
        </li>`,
      )}
    </ul>`}
  </section>`;
}

// The key's sessions: state and last use; open one (in the chat when a conversation works
// in it, else in the notebook) or end it.

import { html, useEffect, useState } from './vendor/preact-htm.js';
import { ApiError, del, get, message, post, sessionPath } from './api.js';
import { ago } from './cells.js';

const internet = { none: 'no internet', allowlist: 'internet: allowlist', public: 'public internet' };

export function Sessions({ active, go, onEnded }) {
  const [list, setList] = useState(null);
  const [error, setError] = useState('');
  const [rowError, setRowError] = useState({});

  async function load() {
    try {
      const r = await get('/v1/sessions');
      setList([...(r?.sessions || [])].sort((a, b) => new Date(b.last_active_at) - new Date(a.last_active_at)));
      setError('');
    } catch (e) {
      setError('Could not list the sessions: ' + message(e));
    }
  }

  useEffect(() => {
    if (active) load();
  }, [active]);

  async function open(s) {
    setRowError({});
    try {
      const r = await get('/v1/conversations?session_id=' + encodeURIComponent(s.id));
      const newest = r?.conversations?.[0];
      if (newest) return go('#chat/' + encodeURIComponent(newest.id));
    } catch (e) {
      // 404: a server without conversations: the notebook it is.
      if (!(e instanceof ApiError && e.status === 404)) return setRowError({ [s.id]: message(e) });
    }
    go('#notebook/' + encodeURIComponent(s.id));
  }

  async function end(s) {
    if (!confirm(`End session ${s.id}? Its kernel and variables go; its files are kept only as long as the server retains workspaces.`)) return;
    try {
      await del(sessionPath(s.id));
      onEnded(s.id);
      load();
    } catch (e) {
      setRowError({ [s.id]: 'Could not end it: ' + message(e) });
    }
  }

  // Pause writes the sandbox to disk and frees its memory; resume (or any run) brings it back.
  async function pauseOrResume(s, what) {
    setRowError({});
    try {
      await post(sessionPath(s.id) + '/' + what);
      load();
    } catch (e) {
      setRowError({ [s.id]: `Could not ${what} it: ` + message(e) });
    }
  }

  return html`<section class="view sessions" hidden=${!active} aria-labelledby="sessions-title">
    <div class="toolbar">
      <h1 id="sessions-title">Sessions</h1>
      <span class="grow"></span>
      <button type="button" onClick=${load}>Refresh</button>
    </div>
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${list?.length === 0 && html`<p class="muted">No sessions. A conversation or a notebook starts one.</p>`}
    ${list?.length > 0 &&
    html`<ul class="session-list">
      ${list.map(
        (s) => html`<li key=${s.id} class="session">
          <div class="id"><code>${s.id}</code></div>
          <div class="facts small">
            <span class=${'state ' + s.state}>${s.state}</span>
            ${s.state === 'paused' &&
            html`<span title=${new Date(s.paused_at).toLocaleString()}
              >paused ${ago(s.paused_at)}, ${Math.max(1, Math.round((s.checkpoint_bytes || 0) / 1048576))} MB on disk; a run resumes it</span
            >`}
            <span title=${new Date(s.last_active_at).toLocaleString()}>last used ${ago(s.last_active_at)}</span>
            <span>started ${ago(s.created_at)}</span>
            <span>${s.execution_count} ${s.execution_count === 1 ? 'run' : 'runs'}</span>
            <span>${internet[s.network?.egress] || internet.none}</span>
          </div>
          <div class="row">
            <button type="button" aria-label=${'Open session ' + s.id} onClick=${() => open(s)}>Open</button>
            ${s.state === 'paused' &&
            html`<button type="button" aria-label=${'Resume session ' + s.id} onClick=${() => pauseOrResume(s, 'resume')}>Resume</button>`}
            ${s.state === 'idle' &&
            s.idle_action === 'pause' &&
            html`<button type="button" aria-label=${'Pause session ' + s.id} title="Write it to disk and free its memory"
              onClick=${() => pauseOrResume(s, 'pause')}>Pause</button>`}
            <button type="button" class="danger" aria-label=${'End session ' + s.id} onClick=${() => end(s)}>End</button>
          </div>
          ${rowError[s.id] && html`<p class="error" role="alert">${rowError[s.id]}</p>`}
        </li>`,
      )}
    </ul>`}
  </section>`;
}

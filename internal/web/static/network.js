// A session's network: its egress policy (what its code may reach, and the domains whose
// requests get credentials added on the way out) and its recent connections, from
// GET /v1/sessions/{id}/egress. Loaded again when refresh changes (a cell finished).

import { html, useEffect, useRef, useState } from './vendor/preact-htm.js';
import { ApiError, get, message, sessionPath } from './api.js';
import { formatSize } from './cells.js';

const modes = {
  none: 'No internet',
  allowlist: 'Only the destinations allowed',
  public: 'Public internet (private addresses refused)',
};

const shown = 20; // connections listed; the API keeps more

const time = (t) => new Date(t).toLocaleTimeString();

// Entries is one list of the policy, or nothing when it is empty.
function Entries({ label, items }) {
  if (!items?.length) return null;
  return html`<div class="entries">
    <span class="muted small">${label}</span>
    <ul aria-label=${label}>
      ${items.map((e) => html`<li key=${e}><code>${e}</code></li>`)}
    </ul>
  </div>`;
}

export function Network({ sessionId, refresh }) {
  const [log, setLog] = useState(null);
  const [error, setError] = useState('');
  const seq = useRef(0);

  async function load() {
    const mine = ++seq.current;
    if (!sessionId) return setLog(null);
    try {
      const r = await get(sessionPath(sessionId) + '/egress');
      if (mine !== seq.current) return;
      setLog(r);
      setError('');
    } catch (e) {
      if (mine !== seq.current) return;
      setLog(null);
      // 404: the session ended, or a server without egress: nothing to show.
      setError(e instanceof ApiError && e.status === 404 ? '' : 'Could not load the network: ' + message(e));
    }
  }

  useEffect(() => {
    load();
  }, [sessionId, refresh]);

  if (!sessionId || (!log && !error)) return null;
  const net = log?.network || {};
  const conns = (log?.connections || []).slice(0, shown);
  return html`<section class="network" aria-labelledby="network-title">
    <h2 id="network-title">Network</h2>
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${log &&
    html`<p class="mode">${modes[net.egress] || modes.none}</p>
      <${Entries} label="Allowed" items=${net.allow} />
      <${Entries} label="Denied" items=${net.deny} />
      <${Entries} label="Credentials added for" items=${(net.secrets || []).map((s) => s.domain)} />
      <div class="row">
        <span class="muted small grow">${formatSize(log.bytes_used || 0)} used${log.quota_bytes ? ' of ' + formatSize(log.quota_bytes) : ''}</span>
        <button type="button" class="small" onClick=${load}>Refresh network</button>
      </div>
      ${conns.length === 0 && html`<p class="muted small">No connections yet.</p>`}
      ${conns.length > 0 &&
      html`<ul class="connections" aria-label="Connections">
        ${conns.map(
          (c, i) => html`<li key=${i} class=${'conn ' + c.decision}>
            <div class="row">
              <code class="grow">${c.host}:${c.port}</code>
              <span class="decision">${c.decision}${c.open ? ' (open)' : ''}</span>
            </div>
            <div class="muted small">
              ${time(c.time)}${c.decision === 'allowed' ? ` · ${formatSize(c.bytes_out)} out, ${formatSize(c.bytes_in)} in` : ''}${c.status ? ` · HTTP ${c.status}` : ''}
            </div>
            ${c.reason && html`<div class="reason small">${c.reason}</div>`}
          </li>`,
        )}
      </ul>`}`}
  </section>`;
}

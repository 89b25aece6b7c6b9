// The chat: a conversation with a model that writes and runs code in the conversation's
// session (POST /v1/conversations/{id}/messages, streamed), files uploaded into that
// session, and a decision on each call in ask mode.

import { html, useEffect, useReducer, useRef, useState } from './vendor/preact-htm.js';
import { ApiError, get, message, patch, post, stream, upload } from './api.js';
import { Code, CommandOutput, Markdown, Outputs, Result } from './cells.js';
import { Uploads, dropTarget } from './files.js';

const conversationPath = (id) => '/v1/conversations/' + encodeURIComponent(id);

// A fresh chat. Its state is one mutable object, drawn again after each change (render):
// events of a stream arrive quickly and change deep inside a turn.
const fresh = () => ({ conv: null, turns: [], chips: [], answering: false, stopping: false, abort: null, error: '', creating: null });

// turnOf is a turn kept by the server as the page shows it: its calls, then its answer (the
// server keeps the answer's text, not where it stood between the calls).
const turnOf = (t) => ({
  input: t.input,
  files: t.files || [],
  items: [
    ...(t.steps || []).map((step) => ({ kind: 'call', id: step.id, tool: step.tool, code: step.code, outputs: [], step })),
    ...(t.output ? [{ kind: 'text', text: t.output }] : []),
  ],
  result: t.stop_reason ? t : null,
  error: t.stop_reason ? '' : 'This answer is still being written elsewhere (another tab?). Open the conversation again later to see it.',
});

export function Chat({ active, conversationId, go, onConversation, ended }) {
  const state = useRef(null);
  state.current ??= fresh();
  const st = state.current;
  const [, render] = useReducer((n) => n + 1, 0);
  const [text, setText] = useState('');
  // The latest text and send, for an upload that ends after the person pressed Send.
  const latest = useRef({});
  const [providers, setProviders] = useState(undefined); // undefined: loading; null: failed
  const [providersError, setProvidersError] = useState('');
  const [settings, setSettings] = useState({ provider: '', model: '', approve: 'ask' });
  const [settingsError, setSettingsError] = useState('');
  const [dragging, setDragging] = useState(false);
  const box = useRef();
  const picker = useRef();
  const activeRef = useRef(active);
  activeRef.current = active;

  useEffect(() => {
    get('/v1/providers')
      .then((r) => {
        const list = r?.providers || [];
        setProviders(list);
        const p = list.find((p) => p.default) || list[0];
        if (p) setSettings((s) => (s.provider ? s : { ...s, provider: p.name, model: p.default_model || '' }));
      })
      .catch((e) => {
        setProviders(null);
        setProvidersError(message(e));
      });
  }, []);

  useEffect(() => {
    if (conversationId && conversationId !== st.conv?.id) open(conversationId);
  }, [conversationId]);

  useEffect(() => {
    onConversation(st.conv?.id || '', st.conv?.session_id || '');
  }, [st.conv?.id]);

  useEffect(() => {
    if (ended && st.conv?.session_id === ended) {
      reset();
      state.current.error = 'The session of that conversation was ended. This is a new conversation.';
    }
  }, [ended]);

  // Keep the newest part of an answer in view while it streams, unless the person scrolled up.
  const stick = useRef(true);
  useEffect(() => {
    const onScroll = () => (stick.current = innerHeight + scrollY >= document.documentElement.scrollHeight - 80);
    addEventListener('scroll', onScroll, { passive: true });
    return () => removeEventListener('scroll', onScroll);
  }, []);
  useEffect(() => {
    if (active && st.answering && stick.current) scrollTo(0, document.documentElement.scrollHeight);
  });

  function reset() {
    state.current.abort?.abort();
    state.current = fresh();
    render();
  }

  async function open(id) {
    reset();
    const mine = state.current;
    mine.loading = true;
    try {
      const c = await get(conversationPath(id));
      if (mine !== state.current) return;
      mine.conv = c;
      mine.turns = (c.turns || []).map(turnOf);
      setSettings({ provider: c.provider, model: c.model, approve: c.approve || 'auto' });
    } catch (e) {
      if (mine === state.current) mine.error = `Could not open conversation ${id}: ${message(e)}`;
    }
    mine.loading = false;
    render();
  }

  function newConversation() {
    reset();
    setText('');
    go('#chat');
    box.current?.focus();
  }

  // conversation creates the conversation (and its session) at its first need: an upload
  // or a message. Concurrent needs share one request.
  function conversation(mine) {
    if (mine.conv) return Promise.resolve(mine.conv);
    mine.creating ??= post('/v1/conversations', {
      approve: settings.approve,
      provider: settings.provider || undefined,
      model: settings.model.trim() || undefined,
    })
      .then((c) => {
        if (mine === state.current) {
          mine.conv = c;
          if (activeRef.current) go('#chat/' + encodeURIComponent(c.id), true);
          render();
        }
        return c;
      })
      .finally(() => (mine.creating = null));
    return mine.creating;
  }

  // applySettings sends a changed provider or model before the next message.
  async function applySettings(mine) {
    const model = settings.model.trim();
    if ((settings.provider && settings.provider !== mine.conv.provider) || (model && model !== mine.conv.model)) {
      mine.conv = await patch(conversationPath(mine.conv.id), { provider: settings.provider || undefined, model: model || undefined });
    }
  }

  async function setApprove(ask) {
    const approve = ask ? 'ask' : 'auto';
    setSettings((s) => ({ ...s, approve }));
    setSettingsError('');
    if (!st.conv) return;
    try {
      st.conv = await patch(conversationPath(st.conv.id), { approve });
    } catch (e) {
      setSettings((s) => ({ ...s, approve: approve === 'ask' ? 'auto' : 'ask' }));
      setSettingsError('Could not change the approval mode: ' + message(e));
    }
  }

  function addFiles(files) {
    const mine = st;
    for (const file of files) {
      mine.chips = mine.chips.filter((c) => c.name !== file.name);
      const chip = { name: file.name, size: file.size, progress: 0, state: 'uploading', error: '' };
      mine.chips.push(chip);
      (async () => {
        try {
          const c = await conversation(mine);
          await upload(c.session_id, file.name, file, (p) => {
            chip.progress = p;
            render();
          });
          chip.state = 'done';
        } catch (e) {
          chip.state = 'failed';
          chip.error = message(e);
        }
        if (mine.sendAfterUploads && !mine.chips.some((c) => c.state === 'uploading')) {
          mine.sendAfterUploads = false;
          if (mine.chips.some((c) => c.state === 'failed')) mine.error = 'Not sent: an upload failed (see the file). Remove it, or send without it.';
          else latest.current.send();
        }
        render();
      })();
    }
    render();
  }

  const uploading = st.chips.some((c) => c.state === 'uploading');
  latest.current = { text, send: () => send() };
  const noModel = Array.isArray(providers) && providers.length === 0;

  async function send() {
    const mine = st;
    const input = latest.current.text.trim();
    if (!input || mine.answering || noModel) return;
    if (mine.chips.some((c) => c.state === 'uploading')) {
      mine.sendAfterUploads = true; // sent when the last upload ends
      render();
      return;
    }
    const attached = mine.chips.filter((c) => c.state === 'done');
    const files = attached.map((c) => c.name);
    mine.chips = mine.chips.filter((c) => c.state !== 'done');
    const turn = { input, files, items: [], result: null, error: '' };
    mine.turns.push(turn);
    mine.answering = true;
    mine.error = '';
    setText('');
    render();
    let started = false;
    try {
      const c = await conversation(mine);
      await applySettings(mine);
      mine.abort = new AbortController();
      const onEvent = (event, data) => {
        started = true;
        apply(turn, event, data);
        render();
      };
      turn.result = await stream(conversationPath(c.id) + '/messages', { input, files }, onEvent, mine.abort.signal);
      if (!turn.items.some((i) => i.kind === 'text') && turn.result.output) turn.items.push({ kind: 'text', text: turn.result.output });
    } catch (e) {
      if (e.name === 'AbortError') {
        turn.error = 'Stopped: the page closed the answer.';
      } else if (!started && e instanceof ApiError && e.status >= 400) {
        // Refused before anything happened: give the message and its files back.
        mine.turns = mine.turns.filter((t) => t !== turn);
        mine.chips = [...attached, ...mine.chips];
        mine.error = 'Not sent: ' + message(e);
        setText((t) => (t ? input + '\n' + t : input));
      } else {
        turn.error = message(e);
      }
    } finally {
      mine.answering = false;
      mine.abort = null;
      render();
    }
  }

  async function stop() {
    const mine = st;
    if (!mine.conv) return mine.abort?.abort();
    mine.stopping = true;
    render();
    try {
      await post(conversationPath(mine.conv.id) + '/stop');
    } catch (e) {
      mine.error = 'Could not stop the answer: ' + message(e);
    }
    mine.stopping = false;
    render();
  }

  async function decide(call, decision) {
    call.deciding = true;
    call.decisionError = '';
    render();
    try {
      await post(conversationPath(st.conv.id) + '/approvals', { call_id: call.id, decision });
      call.approval = decision;
    } catch (e) {
      call.decisionError = message(e);
    }
    call.deciding = false;
    render();
  }

  const drop = dropTarget(setDragging, addFiles, !noModel);

  const provider = providers?.find((p) => p.name === settings.provider);
  return html`<section class="view chat" hidden=${!active} aria-label="Chat" ...${drop}>
    ${dragging && html`<div class="dropzone" aria-hidden="true">Drop files to upload them into the session</div>`}
    <div class="toolbar">
      <button type="button" onClick=${newConversation}>New conversation</button>
      ${providers?.length > 0 &&
      html`<label class="field">Provider
          <select value=${settings.provider} onChange=${(e) => {
            const p = providers.find((p) => p.name === e.target.value);
            setSettings((s) => ({ ...s, provider: p.name, model: p.default_model || '' }));
          }}>
            ${providers.map((p) => html`<option value=${p.name}>${p.name}</option>`)}
          </select></label>
        <label class="field">Model
          <input value=${settings.model} list="models" placeholder=${provider?.default_model || 'the default model'}
            onInput=${(e) => setSettings((s) => ({ ...s, model: e.target.value }))} size="14" />
          <datalist id="models">${(provider?.models || []).map((m) => html`<option value=${m} />`)}</datalist>
        </label>`}
      <label class="check"><input type="checkbox" checked=${settings.approve === 'ask'} onChange=${(e) => setApprove(e.target.checked)} />
        Ask before running code</label>
    </div>
    ${settingsError && html`<p class="error" role="alert">${settingsError}</p>`}
    ${noModel &&
    html`<div class="notice" role="note">
      <p><strong>This server has no model configured</strong>, so the chat cannot answer.</p>
      <p>Start <code>cellbox serve</code> with <code>OPENAI_API_KEY</code> or <code>ANTHROPIC_API_KEY</code> in its
        environment; <code>--provider openai|openai-responses|anthropic</code> picks one, and <code>--base-url</code> points it at another
        server that speaks the same API (Ollama, vLLM, llama.cpp, …).</p>
      <p>The notebook works without a model.</p>
    </div>`}
    ${providers === null && html`<p class="error" role="alert">Could not list the server's models: ${providersError}</p>`}
    ${st.conv && html`<p class="muted small">Session <code>${st.conv.session_id}</code> · ${st.conv.provider} ${st.conv.model}</p>`}
    ${st.loading && html`<p class="muted">Loading the conversation…</p>`}
    ${!st.turns.length && !st.loading && !noModel && html`<div class="intro">
      <p>Ask a question about your data. Drop files onto the page or use <em>Upload files</em>: they go into the session's
        workspace, <code>/mnt/data</code>. The model writes Python, runs it in the sandbox, and answers.</p>
    </div>`}
    <ol class="turns">
      ${st.turns.map((t, i) => html`<${Turn} key=${i} turn=${t} last=${i === st.turns.length - 1} st=${st} decide=${decide} />`)}
    </ol>
    <form class="composer" onSubmit=${(e) => (e.preventDefault(), send())}>
      ${st.error && html`<p class="error" role="alert">${st.error}</p>`}
      <${Uploads} items=${st.chips} label="Files for the next message"
        onRemove=${(c) => ((st.chips = st.chips.filter((x) => x !== c)), render())} />
      <textarea ref=${box} aria-label="Message" rows="2" placeholder="Ask about your data (Enter sends, Shift+Enter for a new line)"
        value=${text} onInput=${(e) => setText(e.target.value)}
        onKeyDown=${(e) => {
          if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
            e.preventDefault();
            send();
          }
        }}></textarea>
      <div class="row">
        <button type="button" onClick=${() => picker.current.click()} disabled=${noModel}>Upload files</button>
        <input type="file" multiple hidden ref=${picker} onChange=${(e) => (addFiles([...e.target.files]), (e.target.value = ''))} />
        <span class="grow"></span>
        ${uploading && html`<span class="muted small" role="status">${st.sendAfterUploads ? 'Sending when the uploads are done…' : 'Uploading…'}</span>`}
        ${st.answering
          ? html`<button type="button" class="danger" onClick=${stop} disabled=${st.stopping}>Stop</button>`
          : html`<button type="submit" class="primary" disabled=${!text.trim() || noModel || st.sendAfterUploads}>Send</button>`}
      </div>
    </form>
  </section>`;
}

// apply adds one event of a message's stream to its turn.
function apply(turn, event, data) {
  const open = () => turn.items.findLast((i) => i.kind === 'call' && !i.step);
  if (event === 'text') {
    const last = turn.items.at(-1);
    if (last?.kind === 'text') last.text += data.text;
    else turn.items.push({ kind: 'text', text: data.text });
  } else if (event === 'call') {
    turn.items.push({ kind: 'call', id: data.id, tool: data.tool, code: data.code, approval: data.approval || '', outputs: [], step: null });
  } else if (event === 'output') {
    open()?.outputs.push(data);
  } else if (event === 'step') {
    const call = turn.items.find((i) => i.kind === 'call' && !i.step && (!data.id || i.id === data.id)) || open();
    if (call) call.step = data;
    else turn.items.push({ kind: 'call', id: data.id, tool: data.tool, code: data.code, outputs: [], step: data });
  }
}

const stopReasons = {
  step_limit: 'The model reached its step limit and answered with what it had.',
  max_tokens: "The answer was cut at the model's token limit.",
  stopped: 'Stopped.',
};

function Turn({ turn, last, st, decide }) {
  const answering = last && st.answering;
  const r = turn.result;
  return html`<li class="turn">
    <div class="you">
      <p class="who">You</p>
      <p class="input">${turn.input}</p>
      ${turn.files.length > 0 && html`<p class="muted small">Files: ${turn.files.join(', ')}</p>`}
    </div>
    <div class="answer" aria-busy=${answering ? 'true' : 'false'}>
      ${turn.items.map((item, i) =>
        item.kind === 'text'
          ? html`<${Markdown} key=${i} text=${item.text} />`
          : html`<${Call} key=${i} call=${item} sessionId=${st.conv?.session_id} answering=${answering} decide=${decide} />`,
      )}
      ${answering && !turn.items.length && html`<p class="muted">Thinking…</p>`}
      ${r && stopReasons[r.stop_reason] && html`<p class="status">${stopReasons[r.stop_reason]}</p>`}
      ${r?.stop_reason === 'error' && html`<p class="error" role="alert">The answer failed: ${r.error || 'no reason given'}</p>`}
      ${turn.error && html`<p class="error" role="alert">${turn.error}</p>`}
    </div>
  </li>`;
}

function Call({ call, sessionId, answering, decide }) {
  const s = call.step;
  const waiting = answering && !s && call.approval === 'pending';
  let state = 'running…';
  if (waiting) state = 'waiting for your decision';
  else if (s?.declined) state = 'skipped';
  else if (s?.error) state = 'did not run';
  else if (s?.result) state = s.result.status === 'ok' ? 'done' : s.result.status;
  else if (s?.command_result) state = s.command_result.status === 'ok' ? 'done' : `exit code ${s.command_result.exit_code}`;
  else if (s) state = 'done';
  else if (!answering) state = 'not finished';
  const count = s?.result?.execution_count;
  return html`<article class=${'cell call' + (waiting ? ' waiting' : '')} aria-label=${`${call.tool} call`}>
    <header><span class="tool">${call.tool}${count ? ` [${count}]` : ''}</span><span class="muted small">${state}</span></header>
    <${Code} code=${call.code || ''} language=${call.tool === 'shell' ? 'bash' : 'python'} />
    ${waiting &&
    html`<div class="row decide">
      <button type="button" class="primary" disabled=${call.deciding} onClick=${() => decide(call, 'run')}>Run</button>
      <button type="button" disabled=${call.deciding} onClick=${() => decide(call, 'skip')}>Skip</button>
      <span class="muted small">The model wants to run this. Run it, or skip it and let the model try another way.</span>
    </div>`}
    ${call.decisionError && html`<p class="error" role="alert">${call.decisionError}</p>`}
    <div class="outputs">
      ${s?.result
        ? html`<${Outputs} outputs=${s.result.outputs} /><${Result} sessionId=${sessionId} result=${s.result} />`
        : s?.command_result
          ? html`<${CommandOutput} sessionId=${sessionId} result=${s.command_result} />`
          : html`<${Outputs} outputs=${call.outputs} />`}
    </div>
    ${s?.declined && html`<p class="status">Not run: you skipped it.</p>`}
    ${s?.error && html`<p class="error">Not run: ${s.error}</p>`}
  </article>`;
}

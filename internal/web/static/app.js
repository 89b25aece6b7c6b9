// The page: three views (chat, notebook, sessions) chosen by the URL's hash, and the dialog
// that asks for an API key when the server wants one. Views stay mounted while hidden, so
// an answer streaming in the chat goes on while the notebook is open.
//
// Routes: #chat, #chat/<conversation id>, #notebook, #notebook/<session id>, #sessions.

import { html, render, useEffect, useRef, useState } from './vendor/preact-htm.js';
import { onKeyNeeded } from './api.js';
import { Chat } from './chat.js';
import { Notebook } from './notebook.js';
import { Sessions } from './sessions.js';

const views = ['chat', 'notebook', 'sessions'];

function route() {
  const [view, ...rest] = location.hash.replace(/^#\/?/, '').split('/');
  let id = '';
  try {
    id = decodeURIComponent(rest.join('/'));
  } catch {
    return { view: 'chat', id: '' }; // a hash no link of ours makes: start afresh
  }
  return views.includes(view) ? { view, id } : { view: 'chat', id: '' };
}

// go shows hash; replace changes the current history entry instead (an id just learnt).
function go(hash, replace) {
  if (!replace) {
    location.hash = hash;
    return;
  }
  history.replaceState(null, '', hash);
  dispatchEvent(new HashChangeEvent('hashchange'));
}

function App() {
  const [where, setWhere] = useState(route);
  const [chat, setChat] = useState({ conversation: '', session: '' });
  const [notebookSession, setNotebookSession] = useState('');
  const [ended, setEnded] = useState('');
  useEffect(() => {
    const f = () => setWhere(route());
    addEventListener('hashchange', f);
    return () => removeEventListener('hashchange', f);
  }, []);

  // The notebook opens the chat's session when coming from the chat.
  const nbSession = (where.view === 'chat' && chat.session) || notebookSession || chat.session;
  const link = (view, href, label) =>
    html`<a href=${href} aria-current=${where.view === view ? 'page' : undefined}>${label}</a>`;
  const idOf = (view) => (where.view === view ? where.id : undefined);
  return html`
    <header class="top">
      <span class="brand">cellbox</span>
      <nav aria-label="Views">
        ${link('chat', '#chat/' + encodeURIComponent(chat.conversation), 'Chat')}
        ${link('notebook', '#notebook/' + encodeURIComponent(nbSession), 'Notebook')}
        ${link('sessions', '#sessions', 'Sessions')}
      </nav>
    </header>
    <main>
      <${Chat} active=${where.view === 'chat'} conversationId=${idOf('chat')} go=${go} ended=${ended}
        onConversation=${(conversation, session) => setChat({ conversation, session })} />
      <${Notebook} active=${where.view === 'notebook'} sessionId=${idOf('notebook')} go=${go} ended=${ended}
        onSession=${setNotebookSession} />
      <${Sessions} active=${where.view === 'sessions'} go=${go} onEnded=${setEnded} />
    </main>
    <${KeyDialog} />`;
}

// KeyDialog asks for an API key when a request answers 401 (see api.js).
function KeyDialog() {
  const [ask, setAsk] = useState(null); // {message, resolve}
  const dialog = useRef();
  const input = useRef();
  useEffect(() => onKeyNeeded((message) => new Promise((resolve) => setAsk({ message, resolve }))), []);
  useEffect(() => {
    if (!ask || dialog.current.open) return;
    input.current.value = '';
    dialog.current.showModal();
    input.current.focus();
  }, [ask]);
  const finish = (key) => {
    if (dialog.current.open) dialog.current.close();
    setAsk(null);
    ask?.resolve(key);
  };
  return html`<dialog class="key" ref=${dialog} aria-labelledby="key-title"
      onCancel=${(e) => (e.preventDefault(), finish(null))}>
    <form onSubmit=${(e) => {
      e.preventDefault();
      const key = input.current.value.trim();
      if (key) finish(key);
    }}>
      <h2 id="key-title">Sign in to cellbox</h2>
      <p class=${ask?.message?.startsWith('The server refused') ? 'error' : ''} role="alert">${ask?.message}</p>
      <label class="field">API key <input ref=${input} type="password" autocomplete="off" required /></label>
      <p class="muted small">Kept in this tab only (sessionStorage), and sent with every request.</p>
      <div class="row">
        <span class="grow"></span>
        <button type="button" onClick=${() => finish(null)}>Cancel</button>
        <button type="submit" class="primary">Use key</button>
      </div>
    </form>
  </dialog>`;
}

const root = document.getElementById('app');
root.textContent = '';
render(html`<${App} />`, root);

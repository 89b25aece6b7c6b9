// Jupyter notebooks (.ipynb, nbformat 4) in and out of the page's notebook: a file's cells
// (code with its saved outputs, Markdown, raw) as plain cells, and the page's cells as an
// nbformat 4.4 file. Outputs convert between nbformat's shape (output_type, multiline
// strings as lists) and the API's (type, strings), which cells.js shows. A code cell's
// language, when not Python, is kept in its metadata.cellbox.language; the notebook's own
// metadata says Python.

export const maxCells = 1000;

// languages are those a code cell may be written in: the API's names, as the page shows them.
export const languages = { python: 'Python', javascript: 'JavaScript', typescript: 'TypeScript', r: 'R', bash: 'Bash' };

// languageOf is the API's name of a language a notebook names (IRkernel's "R", "JavaScript"),
// or '' when no kernel of cellbox runs it.
export const languageOf = (name) => {
  const l = typeof name === 'string' ? name.toLowerCase() : '';
  return Object.hasOwn(languages, l) ? l : '';
};

// NotebookError says why a file is not a notebook the page can open.
export class NotebookError extends Error {}

const multiline = (v) => (Array.isArray(v) ? v.join('') : typeof v === 'string' ? v : '');
const jsonType = (mime) => /^application\/(.*\+)?json$/.test(mime);

// mimeBundle joins a bundle's multiline strings; JSON types are values, kept as they are.
const mimeBundle = (data, join) =>
  Object.fromEntries(Object.entries(data && typeof data === 'object' ? data : {}).map(([k, v]) => [k, jsonType(k) ? v : join(v)]));

// fromOutput is an nbformat output as the API's (null for a type the page does not show).
function fromOutput(o) {
  switch (o?.output_type) {
    case 'stream':
      return { type: 'stream', name: o.name === 'stderr' ? 'stderr' : 'stdout', text: multiline(o.text) };
    case 'display_data':
    case 'execute_result':
      return { type: o.output_type, data: mimeBundle(o.data, multiline), metadata: o.metadata || {}, execution_count: o.execution_count ?? undefined };
    case 'error':
      return { type: 'error', ename: String(o.ename ?? ''), evalue: String(o.evalue ?? ''), traceback: Array.isArray(o.traceback) ? o.traceback.map(String) : [] };
  }
  return null;
}

// toOutputs is the API's outputs as nbformat's, a stream's pieces joined.
function toOutputs(outputs) {
  const out = [];
  for (const o of outputs || []) {
    const prev = out[out.length - 1];
    const text = (v) => (typeof v === 'string' ? v : JSON.stringify(v));
    if (o.type === 'stream') {
      const name = o.name === 'stderr' ? 'stderr' : 'stdout';
      if (prev?.output_type === 'stream' && prev.name === name) prev.text += o.text || '';
      else out.push({ output_type: 'stream', name, text: o.text || '' });
    } else if (o.type === 'display_data') out.push({ output_type: o.type, data: mimeBundle(o.data, text), metadata: o.metadata || {} });
    else if (o.type === 'execute_result')
      out.push({ output_type: o.type, data: mimeBundle(o.data, text), metadata: o.metadata || {}, execution_count: o.execution_count || null });
    else if (o.type === 'error') out.push({ output_type: 'error', ename: o.ename || '', evalue: o.evalue || '', traceback: o.traceback || [] });
  }
  return out;
}

// readNotebook parses a file's text: {cells: [{type, code, outputs, count, language,
// attachments}], language}. A code cell's language is its metadata's, else the notebook's
// when cellbox runs it, else Python. It throws NotebookError for what is not an nbformat 4
// notebook.
export function readNotebook(text) {
  let nb;
  try {
    nb = JSON.parse(text);
  } catch {
    throw new NotebookError('it is not JSON, so not a Jupyter notebook (.ipynb).');
  }
  if (typeof nb?.nbformat === 'number' && nb.nbformat !== 4) {
    throw new NotebookError(`it is a notebook of nbformat ${nb.nbformat}; the page opens nbformat 4 (jupyter nbconvert --to notebook upgrades older ones).`);
  }
  if (nb?.nbformat !== 4 || !Array.isArray(nb.cells)) throw new NotebookError('it is JSON, but not a Jupyter notebook: it lacks nbformat 4 or its cells.');
  if (nb.cells.length > maxCells) throw new NotebookError(`it has ${nb.cells.length} cells; the page opens at most ${maxCells}.`);
  const m = nb.metadata || {};
  const language = String(m.kernelspec?.language || m.language_info?.name || 'python');
  const cells = nb.cells.map((c, i) => {
    const type = c?.cell_type;
    if (!['code', 'markdown', 'raw'].includes(type)) throw new NotebookError(`its cell ${i + 1} is neither code, markdown nor raw.`);
    const cell = { type, code: multiline(c.source) };
    if (type === 'code') {
      cell.outputs = (Array.isArray(c.outputs) ? c.outputs : []).map(fromOutput).filter(Boolean);
      cell.count = Number.isInteger(c.execution_count) ? c.execution_count : null;
      cell.language = languageOf(c.metadata?.cellbox?.language) || languageOf(language) || 'python';
    } else if (c.attachments && typeof c.attachments === 'object') cell.attachments = c.attachments;
    return cell;
  });
  return { cells, language };
}

// writeNotebook is cells ({type, code, outputs, count, language, attachments}) as the text
// of an nbformat 4.4 notebook for the session's Python.
export function writeNotebook(cells) {
  const nb = {
    cells: cells.map((c) => {
      if (c.type === 'markdown' || c.type === 'raw') {
        return { cell_type: c.type, metadata: {}, source: c.code, ...(c.attachments && { attachments: c.attachments }) };
      }
      const metadata = c.language && c.language !== 'python' ? { cellbox: { language: c.language } } : {};
      return { cell_type: 'code', execution_count: c.count || null, metadata, outputs: toOutputs(c.outputs), source: c.code };
    }),
    metadata: {
      kernelspec: { name: 'python3', display_name: 'Python 3', language: 'python' },
      language_info: { name: 'python' },
    },
    nbformat: 4,
    nbformat_minor: 4,
  };
  return JSON.stringify(nb, null, 1) + '\n';
}

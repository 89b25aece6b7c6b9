package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// The code interpreter (port 49999): runCode and its contexts. A context is a namespace
// of its own (api.ExecuteRequest.Context) of one language: in the session's Python kernel,
// or a kernel of its own for another language. "default" is each language's main
// namespace.

const defaultContext = "default"

func (h *Handler) interpreterRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /execute", h.execute)
	mux.HandleFunc("POST /contexts", h.createContext)
	mux.HandleFunc("GET /contexts", h.listContexts)
	mux.HandleFunc("DELETE /contexts/{id}", h.deleteContext)
	mux.HandleFunc("POST /contexts/{id}/restart", h.restartContext)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		textError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not served by cellbox's code interpreter", r.Method, r.URL.Path))
	})
	return mux
}

// textError answers the code interpreter's way: plain text, which the SDK shows for 404
// (NotFoundError) and 502.
func textError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(msg))
}

func (h *Handler) interpreterError(w http.ResponseWriter, r *http.Request, err error) {
	textError(w, status(err), h.message(r, err))
}

// codeContext is E2B's Context.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// language returns the cellbox language of an E2B language name ("python", "js", "ts",
// "r", "bash", or their long names).
func language(l string) (string, error) {
	if lang, ok := api.LanguageOf(strings.ToLower(l)); ok {
		return lang, nil
	}
	return "", fmt.Errorf("language %.50q is not supported: cellbox runs python, js, ts, r and bash: %w", l, errdefs.ErrInvalidArgument)
}

func (h *Handler) execute(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Code      string            `json:"code"`
		ContextID string            `json:"context_id"`
		Language  string            `json:"language"`
		EnvVars   map[string]string `json:"env_vars"`
	}
	if err := h.decode(w, r, &req); err != nil {
		h.interpreterError(w, r, err)
		return
	}
	if req.ContextID != "" && req.Language != "" {
		textError(w, http.StatusBadRequest, "give a context or a language, not both")
		return
	}
	id := sandboxID(r.Context())
	name, lang := "", ""
	if req.ContextID != "" && req.ContextID != defaultContext {
		c, ok := h.state(id).context(req.ContextID)
		if !ok {
			textError(w, http.StatusNotFound, fmt.Sprintf("Context %.100s not found", req.ContextID))
			return
		}
		name, lang = req.ContextID, c.Language
	}

	// Headers go out at once: the SDK's timeoutMs runs from them, and the server learns of
	// that timeout only when the client closes the connection (which interrupts the cell).
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	enc := json.NewEncoder(w) // one object a line, never a blank one
	send := func(v any) {
		enc.Encode(v)
		rc.Flush()
	}
	if name == "" {
		var err error
		if lang, err = language(req.Language); err != nil {
			send(errorLine("UnsupportedLanguage", h.message(r, err)))
			return
		}
	}
	res, err := h.m.Execute(r.Context(), id, api.ExecuteRequest{
		Code: req.Code, Context: name, Language: lang, Env: req.EnvVars, TimeoutS: h.opts.MaxExecTimeout.Seconds(),
	}, func(o api.Output) {
		if line := outputLine(o); line != nil {
			send(line)
		}
	})
	if err != nil {
		send(errorLine("SandboxError", h.message(r, err)))
		return
	}
	switch res.Status {
	case api.StatusOK, api.StatusError:
	case api.StatusTimeout:
		send(errorLine("TimeoutError", res.Message))
	default: // crashed, oom, interrupted
		send(errorLine("UnexpectedEndOfExecution", res.Message))
	}
	if res.Truncated && res.Message != "" && res.Status == api.StatusOK {
		send(map[string]any{"type": "stderr", "text": res.Message + "\n", "timestamp": now()})
	}
	send(map[string]any{"type": "number_of_executions", "execution_count": res.ExecutionCount})
	send(map[string]any{"type": "end_of_execution"})
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

func errorLine(name, value string) map[string]any {
	return map[string]any{"type": "error", "name": name, "value": value, "traceback": value}
}

// mimeKeys are the keys of E2B's Result for the MIME types it knows.
var mimeKeys = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
}

// outputLine turns a cellbox output into a line of E2B's execute stream.
func outputLine(o api.Output) map[string]any {
	switch o.Type {
	case api.OutputStream:
		return map[string]any{"type": o.Name, "text": o.Text, "timestamp": now()}
	case api.OutputError:
		return map[string]any{"type": "error", "name": o.EName, "value": o.EValue, "traceback": strings.Join(o.Traceback, "\n")}
	case api.OutputExecuteResult, api.OutputDisplayData:
		line := map[string]any{"type": "result", "is_main_result": o.Type == api.OutputExecuteResult}
		for mime, v := range o.Data {
			key, ok := mimeKeys[mime]
			if !ok {
				key = mime
			}
			if key == "text" {
				if s, ok := v.(string); ok && len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
					v = s[1 : len(s)-1] // as E2B's server does: 'abc' reads abc
				}
			}
			if key == "type" || key == "is_main_result" || key == "extra" {
				continue
			}
			line[key] = v
		}
		return line
	}
	return nil
}

func (h *Handler) createContext(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := h.decode(w, r, &req); err != nil {
		h.interpreterError(w, r, err)
		return
	}
	lang, err := language(req.Language)
	if err != nil {
		h.interpreterError(w, r, err)
		return
	}
	cwd := home
	if req.Cwd != "" {
		rel, err := workspacePath(req.Cwd)
		if err != nil {
			h.interpreterError(w, r, err)
			return
		}
		cwd = homePath(rel)
	}
	id := sandboxID(r.Context())
	st := h.state(id)
	c, err := st.addContext(lang, cwd)
	if err != nil {
		h.interpreterError(w, r, err)
		return
	}
	if err := h.enterContext(r, id, c); err != nil {
		st.removeContext(c.ID)
		h.interpreterError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// enterContext makes the context's namespace in its language's kernel, in its folder.
func (h *Handler) enterContext(r *http.Request, id string, c codeContext) error {
	// The folder is a workspace path (homePath): %q quotes it for each of these languages.
	var code string
	switch c.Language {
	case api.LanguageJavaScript, api.LanguageTypeScript:
		code = fmt.Sprintf("process.chdir(%q)", c.Cwd)
	case api.LanguageR:
		code = fmt.Sprintf("setwd(%q)", c.Cwd)
	case api.LanguageBash:
		code = "cd '" + strings.ReplaceAll(c.Cwd, "'", `'\''`) + "'"
	default:
		code = fmt.Sprintf("import os as __cellbox_os; __cellbox_os.chdir(%q); del __cellbox_os", c.Cwd)
	}
	res, err := h.m.Execute(r.Context(), id, api.ExecuteRequest{Code: code, Context: c.ID, Language: c.Language}, nil)
	if err != nil || res.Status == api.StatusOK {
		return err
	}
	why := res.Message
	for _, o := range res.Outputs {
		if o.Type == api.OutputError {
			why = o.EValue
		}
	}
	return fmt.Errorf("could not enter the context's folder %s: %s: %w", c.Cwd, why, errdefs.ErrInvalidArgument)
}

func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request) {
	out := []codeContext{{ID: defaultContext, Language: "python", Cwd: home}}
	writeJSON(w, http.StatusOK, append(out, h.state(sandboxID(r.Context())).contextList()...))
}

func (h *Handler) deleteContext(w http.ResponseWriter, r *http.Request) {
	cid := r.PathValue("id")
	id := sandboxID(r.Context())
	st := h.state(id)
	if cid == defaultContext {
		textError(w, http.StatusBadRequest, "the default context cannot be removed")
		return
	}
	if _, ok := st.context(cid); !ok {
		textError(w, http.StatusNotFound, fmt.Sprintf("Context %.100s not found", cid))
		return
	}
	err := h.m.DeleteContext(r.Context(), id, cid)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) { // not used yet: no namespace
		h.interpreterError(w, r, err)
		return
	}
	st.removeContext(cid)
	writeJSON(w, http.StatusOK, nil)
}

// restartContext gives a context a fresh namespace; the default context's restart
// restarts the kernel, which empties every context.
func (h *Handler) restartContext(w http.ResponseWriter, r *http.Request) {
	cid := r.PathValue("id")
	id := sandboxID(r.Context())
	st := h.state(id)
	var err error
	if cid == defaultContext {
		if err = h.m.Restart(r.Context(), id); err == nil {
			for _, c := range st.contextList() {
				if err = h.enterContext(r, id, c); err != nil {
					break
				}
			}
		}
	} else {
		c, ok := st.context(cid)
		if !ok {
			textError(w, http.StatusNotFound, fmt.Sprintf("Context %.100s not found", cid))
			return
		}
		if err = h.m.DeleteContext(r.Context(), id, cid); err == nil || errors.Is(err, errdefs.ErrNotFound) {
			err = h.enterContext(r, id, c)
		}
	}
	if err != nil {
		h.interpreterError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
)

// specName is the one kernelspec: Python in the server's default image.
const specName = "python3"

// kernelModel is Jupyter's kernel model.
type kernelModel struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	LastActivity   string `json:"last_activity"`
	ExecutionState string `json:"execution_state"`
	Connections    int    `json:"connections"`
}

func (h *Handler) apiVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": h.opts.Version})
}

func (h *Handler) spec() map[string]any {
	return map[string]any{
		"name": specName,
		"spec": map[string]any{
			"argv": []string{}, "display_name": "Python 3 (cellbox)", "language": "python",
			"interrupt_mode": "message", "env": map[string]string{}, "metadata": map[string]any{},
		},
		"resources": map[string]string{},
	}
}

func (h *Handler) kernelspecs(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"default": specName, "kernelspecs": map[string]any{specName: h.spec()}})
}

func (h *Handler) kernelspec(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("name") != specName {
		h.WriteError(w, r, noSpec(r.PathValue("name")))
		return
	}
	writeJSON(w, http.StatusOK, h.spec())
}

func noSpec(name string) error {
	return fmt.Errorf("no kernelspec %q: this server has %q (Python, in a cellbox sandbox): %w", name, specName, errdefs.ErrNotFound)
}

// model is session s's kernel model; false for a session that has no kernel id.
func (h *Handler) model(s api.Session) (kernelModel, bool) {
	kid, ok := h.ids.kernel(s.ID)
	if !ok {
		return kernelModel{}, false
	}
	state := "idle"
	if s.State == api.StateBusy {
		state = "busy"
	}
	conns := 0
	h.mu.Lock()
	if k := h.kernels[s.ID]; k != nil {
		k.mu.Lock()
		conns = len(k.conns)
		if k.working {
			state = "busy"
		}
		k.mu.Unlock()
	}
	h.mu.Unlock()
	last := s.LastActiveAt
	if last.IsZero() {
		last = s.CreatedAt
	}
	return kernelModel{ID: kid, Name: specName, LastActivity: timestamp(last), ExecutionState: state, Connections: conns}, true
}

func (h *Handler) listKernels(w http.ResponseWriter, r *http.Request) {
	list := h.s.List(r.Context())
	if h.opts.Elsewhere != nil {
		list = append(list, h.opts.Elsewhere(r.Context())...)
	}
	out := []kernelModel{}
	for _, s := range list {
		if m, ok := h.model(s); ok {
			out = append(out, m)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// startRequest is the body of POST /api/kernels. Jupyter's clients also send path and env
// (jupyter_server's gateway client sends KERNEL_* variables): they are not used.
type startRequest struct {
	Name string `json:"name"`
}

func (h *Handler) startKernel(w http.ResponseWriter, r *http.Request) {
	var req startRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		h.WriteError(w, r, err)
		return
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			h.WriteError(w, r, fmt.Errorf("the body is not a JSON object: %w", errdefs.ErrInvalidArgument))
			return
		}
	}
	if req.Name != "" && req.Name != specName {
		h.WriteError(w, r, noSpec(req.Name))
		return
	}
	s, err := h.s.Create(r.Context(), api.CreateSessionRequest{})
	if err != nil {
		h.WriteError(w, r, err)
		return
	}
	m, ok := h.model(*s)
	if !ok {
		h.WriteError(w, r, fmt.Errorf("session %s has an id no kernel id is made of", s.ID)) // internal: logged
		return
	}
	// Not its kernel id: with Options.OpenChannels that is the key to its websocket.
	h.log.Info("jupyter kernel started", "session_id", s.ID)
	w.Header().Set("Location", "/api/kernels/"+m.ID)
	writeJSON(w, http.StatusCreated, m)
}

// session finds the session of the request's kernel, the caller's.
func (h *Handler) session(r *http.Request) (*api.Session, error) {
	return h.lookup(r.Context(), r.PathValue("id"))
}

// lookup finds kernel kid's session, ctx's tenant's: another tenant's kernel, like an id
// that is none, is not found.
func (h *Handler) lookup(ctx context.Context, kid string) (*api.Session, error) {
	sid, ok := h.ids.session(kid)
	if !ok {
		return nil, noKernel(kid)
	}
	s, err := h.s.Get(ctx, sid)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, noKernel(kid)
	}
	return s, err
}

func noKernel(kid string) error {
	if len(kid) > 64 {
		kid = kid[:64] + "..."
	}
	return fmt.Errorf("no kernel %q: it ended, or was never started by this API key: %w", kid, errdefs.ErrNotFound)
}

func (h *Handler) getKernel(w http.ResponseWriter, r *http.Request) {
	s, err := h.session(r)
	if err != nil {
		h.WriteError(w, r, err)
		return
	}
	m, _ := h.model(*s)
	writeJSON(w, http.StatusOK, m)
}

func (h *Handler) deleteKernel(w http.ResponseWriter, r *http.Request) {
	s, err := h.session(r)
	if err == nil {
		err = h.s.Delete(r.Context(), s.ID)
	}
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		h.WriteError(w, r, err)
		return
	}
	if err != nil {
		h.WriteError(w, r, noKernel(r.PathValue("id")))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) interruptKernel(w http.ResponseWriter, r *http.Request) {
	s, err := h.session(r)
	if err == nil {
		err = h.s.Interrupt(r.Context(), s.ID)
	}
	if err != nil {
		h.WriteError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) restartKernel(w http.ResponseWriter, r *http.Request) {
	s, err := h.session(r)
	if err != nil {
		h.WriteError(w, r, err)
		return
	}
	if err := h.restart(r.Context(), s.ID); err != nil {
		h.WriteError(w, r, err)
		return
	}
	if s, err = h.s.Get(r.Context(), s.ID); err != nil {
		h.WriteError(w, r, err)
		return
	}
	m, _ := h.model(*s)
	writeJSON(w, http.StatusOK, m)
}

// restart restarts session sid's kernel, telling its websockets: status restarting, then
// idle once the new kernel is up.
func (h *Handler) restart(ctx context.Context, sid string) error {
	k := h.existing(sid)
	if k != nil {
		k.publish("status", nil, map[string]string{"execution_state": "restarting"})
	}
	err := h.s.Restart(ctx, sid)
	if k != nil {
		if err == nil {
			k.mu.Lock()
			k.count = 0
			k.mu.Unlock()
		}
		k.publish("status", nil, map[string]string{"execution_state": "idle"})
	}
	return err
}

// langInfo is what kernel_info_reply says of the language.
type langInfo struct {
	Name              string         `json:"name"`
	Version           string         `json:"version"`
	Mimetype          string         `json:"mimetype"`
	FileExtension     string         `json:"file_extension"`
	PygmentsLexer     string         `json:"pygments_lexer"`
	CodemirrorMode    map[string]any `json:"codemirror_mode"`
	NbconvertExporter string         `json:"nbconvert_exporter"`
}

func pythonInfo(version string) langInfo {
	return langInfo{Name: "python", Version: version, Mimetype: "text/x-python", FileExtension: ".py",
		PygmentsLexer: "ipython3", CodemirrorMode: map[string]any{"name": "ipython", "version": 3}, NbconvertExporter: "python"}
}

// language is the language_info of session sid, on image: its Python version is asked once
// per image and tenant (a user expression of an uncounted, empty run) and kept; "3" until
// then, or when asking fails. The answer comes from the tenant's own kernel, whose code
// may say anything: it is kept only if it reads as a version, and only for that tenant.
func (h *Handler) language(ctx context.Context, sid, image string, ask bool) langInfo {
	key := session.Tenant(ctx) + "\x00" + image
	h.mu.Lock()
	li, ok := h.langs[key]
	h.mu.Unlock()
	if ok || !ask {
		if !ok {
			li = pythonInfo("3")
		}
		return li
	}
	li = pythonInfo("3")
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := h.s.Execute(actx, sid, api.ExecuteRequest{NoHistory: true, TimeoutS: 10,
		UserExpressions: map[string]string{"v": "__import__('platform').python_version()"}}, nil)
	if err == nil {
		if v, ok := res.UserExpressions["v"].Data["text/plain"].(string); ok && pythonVersion.MatchString(trimQuotes(v)) {
			li.Version = trimQuotes(v)
			h.mu.Lock()
			h.langs[key] = li
			h.mu.Unlock()
		}
	}
	return li
}

// pythonVersion is what platform.python_version() says: 3.11.2, 3.13.0rc1, 3.14.0a1+.
var pythonVersion = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,3})?([a-z]{1,3}[0-9]{0,3})?\+?$`)

func trimQuotes(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
)

// kernelSpec is a language's kernelspec, and what its kernels say of the language.
type kernelSpec struct {
	name     string // the kernelspec's: the language's in cellbox ("python3" as ipykernel's)
	display  string
	language string // the kernelspec's language, as Jupyter's own kernels say it (IRkernel's "R")
	lang     string // api.Language*
	title    string // for the banner: "JavaScript (Node.js)"
	info     langInfo
	// version is code that prints the language's version (info.Version until it has run);
	// "": none asked.
	version string
}

// specs are the kernelspecs, one a language, the default first. JavaScript and TypeScript
// kernels of one session share Node.js; TypeScript's version is not asked (its types are
// stripped, no compiler runs).
var specs = []kernelSpec{
	{name: "python3", display: "Python 3 (cellbox)", language: "python", lang: api.LanguagePython, title: "Python",
		info: langInfo{Name: "python", Version: "3", Mimetype: "text/x-python", FileExtension: ".py", PygmentsLexer: "ipython3",
			CodemirrorMode: map[string]any{"name": "ipython", "version": 3}, NbconvertExporter: "python"},
		version: "print(__import__('platform').python_version())"},
	{name: "javascript", display: "JavaScript (cellbox)", language: "javascript", lang: api.LanguageJavaScript, title: "JavaScript (Node.js)",
		info: langInfo{Name: "javascript", Mimetype: "application/javascript", FileExtension: ".js", PygmentsLexer: "javascript",
			CodemirrorMode: "javascript"},
		version: "console.log(process.versions.node)"},
	{name: "typescript", display: "TypeScript (cellbox)", language: "typescript", lang: api.LanguageTypeScript, title: "TypeScript (Node.js)",
		info: langInfo{Name: "typescript", Mimetype: "text/typescript", FileExtension: ".ts", PygmentsLexer: "typescript",
			CodemirrorMode: "typescript"}},
	{name: "r", display: "R (cellbox)", language: "R", lang: api.LanguageR, title: "R",
		info:    langInfo{Name: "R", Mimetype: "text/x-r-source", FileExtension: ".r", PygmentsLexer: "r", CodemirrorMode: "r"},
		version: `cat(R.version$major, R.version$minor, sep = ".", fill = TRUE)`},
	{name: "bash", display: "Bash (cellbox)", language: "bash", lang: api.LanguageBash, title: "Bash",
		info:    langInfo{Name: "bash", Mimetype: "text/x-sh", FileExtension: ".sh", PygmentsLexer: "bash", CodemirrorMode: "shell"},
		version: `echo "${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]}.${BASH_VERSINFO[2]}"`},
}

// specNamed is the kernelspec name names; a kernel may also be started by a language's
// name or alias (api.LanguageOf) or by IRkernel's "ir", which R notebooks name.
func specNamed(name string, aliases bool) (*kernelSpec, bool) {
	for i := range specs {
		if specs[i].name == name {
			return &specs[i], true
		}
	}
	if !aliases {
		return nil, false
	}
	if name == "ir" {
		name = api.LanguageR
	}
	if lang, ok := api.LanguageOf(name); ok {
		return specOf(lang), true
	}
	return nil, false
}

// specOf is the kernelspec of language lang (Python's for one it does not know).
func specOf(lang string) *kernelSpec {
	lang, _ = api.LanguageOf(lang)
	for i := range specs {
		if specs[i].lang == lang {
			return &specs[i]
		}
	}
	return &specs[0]
}

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

func (ks *kernelSpec) model() map[string]any {
	return map[string]any{
		"name": ks.name,
		"spec": map[string]any{
			"argv": []string{}, "display_name": ks.display, "language": ks.language,
			"interrupt_mode": "message", "env": map[string]string{}, "metadata": map[string]any{},
		},
		"resources": map[string]string{},
	}
}

func (h *Handler) kernelspecs(w http.ResponseWriter, r *http.Request) {
	all := map[string]any{}
	for i := range specs {
		all[specs[i].name] = specs[i].model()
	}
	writeJSON(w, http.StatusOK, map[string]any{"default": specs[0].name, "kernelspecs": all})
}

func (h *Handler) kernelspec(w http.ResponseWriter, r *http.Request) {
	ks, ok := specNamed(r.PathValue("name"), false)
	if !ok {
		h.WriteError(w, r, noSpec(r.PathValue("name")))
		return
	}
	writeJSON(w, http.StatusOK, ks.model())
}

func noSpec(name string) error {
	return fmt.Errorf("no kernelspec %.100q: this server has python3 (the default), javascript, typescript, r and bash, each in a cellbox sandbox: %w",
		name, errdefs.ErrNotFound)
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
	return kernelModel{ID: kid, Name: specOf(s.Language).name, LastActivity: timestamp(last), ExecutionState: state, Connections: conns}, true
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
	ks, ok := specNamed(req.Name, true)
	if !ok {
		h.WriteError(w, r, noSpec(req.Name))
		return
	}
	s, err := h.s.Create(r.Context(), api.CreateSessionRequest{Language: ks.lang})
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
	h.log.Info("jupyter kernel started", "session_id", s.ID, "language", ks.lang)
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
	Name              string `json:"name"`
	Version           string `json:"version,omitempty"`
	Mimetype          string `json:"mimetype"`
	FileExtension     string `json:"file_extension"`
	PygmentsLexer     string `json:"pygments_lexer"`
	CodemirrorMode    any    `json:"codemirror_mode"` // a mode's name, or a CodeMirror mode spec
	NbconvertExporter string `json:"nbconvert_exporter,omitempty"`
}

// language is the language_info of kernel spec ks of session sid, on image: the language's
// version is asked once per language, image and tenant (an uncounted run of ks.version)
// and kept; ks.info's until then, or when asking fails. The answer comes from the tenant's
// own kernel, whose code may say anything: it is kept only if it reads as a version, and
// only for that tenant.
func (h *Handler) language(ctx context.Context, sid, image string, ks *kernelSpec, ask bool) langInfo {
	key := session.Tenant(ctx) + "\x00" + image + "\x00" + ks.lang
	h.mu.Lock()
	li, ok := h.langs[key]
	h.mu.Unlock()
	if ok || !ask || ks.version == "" {
		if !ok {
			li = ks.info
		}
		return li
	}
	li = ks.info
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out strings.Builder
	_, err := h.s.Execute(actx, sid, api.ExecuteRequest{Code: ks.version, Language: ks.lang, NoHistory: true, TimeoutS: 10}, func(o api.Output) {
		if o.Type == api.OutputStream && o.Name == "stdout" && out.Len() < 100 {
			out.WriteString(o.Text)
		}
	})
	if v := strings.TrimSpace(out.String()); err == nil && version.MatchString(v) {
		li.Version = v
		h.mu.Lock()
		h.langs[key] = li
		h.mu.Unlock()
	}
	return li
}

// version is what the languages say of their versions: 3.11.2, 3.13.0rc1, 3.14.0a1+ (Python),
// 20.19.2 (Node.js), 4.2.2 (R), 5.2.15 (Bash).
var version = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,3})?([a-z]{1,3}[0-9]{0,3})?\+?$`)

package jupyter

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/session"
)

// versionSays is a session manager whose every kernel says its language's version is
// version: what a tenant's code can make its own kernel say (platform.python_version
// replaced). It counts the runs of each language.
type versionSays struct {
	Sessions // the rest is not called
	version  string
	runs     map[string]int
}

func (v *versionSays) Get(ctx context.Context, id string) (*api.Session, error) {
	return &api.Session{ID: id, Image: "default"}, nil
}

func (v *versionSays) Execute(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	if v.runs == nil {
		v.runs = map[string]int{}
	}
	v.runs[req.Language]++
	onOutput(api.Output{Type: api.OutputStream, Name: "stdout", Text: v.version + "\n"})
	return &api.ExecuteResult{Status: api.StatusOK}, nil
}

// TestLanguageVersion: the language version kernel_info_reply states is what the tenant's
// own kernel said, when it reads as a version; one tenant's kernel cannot choose what
// another's clients are told, nor one language's what another's are.
func TestLanguageVersion(t *testing.T) {
	s := &versionSays{}
	h := &Handler{s: s, langs: map[string]langInfo{}}
	mallory, alice := session.WithTenant(context.Background(), "mallory"), session.WithTenant(context.Background(), "alice")
	py, js, ts := specOf(api.LanguagePython), specOf(api.LanguageJavaScript), specOf(api.LanguageTypeScript)
	s.version = "<img src=x onerror=alert(1)>"
	if v := h.language(mallory, "s1", "default", py, true).Version; v != "3" {
		t.Errorf("a version that is none: %q", v)
	}
	s.version = "2.7.18"
	if v := h.language(mallory, "s1", "default", py, true).Version; v != "2.7.18" {
		t.Errorf("mallory's kernel says 2.7.18, mallory is told %q", v)
	}
	s.version = "3.13.0rc1"
	if v := h.language(alice, "s2", "default", py, true).Version; v != "3.13.0rc1" {
		t.Errorf("alice's kernel says 3.13.0rc1, alice is told %q (mallory's answer kept for her?)", v)
	}
	s.version = "20.19.2"
	if li := h.language(alice, "s3", "default", js, true); li.Version != "20.19.2" || li.Name != "javascript" {
		t.Errorf("alice's JavaScript kernel says 20.19.2, alice is told %+v", li)
	}
	if v := h.language(alice, "s2", "default", py, true).Version; v != "3.13.0rc1" {
		t.Errorf("alice's Python after her JavaScript: %q", v)
	}
	if li := h.language(alice, "s4", "default", ts, true); li.Version != "" || li.Name != "typescript" || s.runs[api.LanguageTypeScript] != 0 {
		t.Errorf("TypeScript's version is none of Node.js's: %+v, %d runs", li, s.runs[api.LanguageTypeScript])
	}
	if s.runs[api.LanguagePython] != 3 || s.runs[api.LanguageJavaScript] != 1 {
		t.Errorf("versions asked once a tenant, language and image: %v", s.runs)
	}
}

func (v *versionSays) Create(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error) {
	return &api.Session{ID: "9837de5dc60eee5f1b625950", Image: "default"}, nil
}

// TestKernelIDNotLogged: with open channels a kernel id is the key to its websocket, so
// the server's log names kernels by their session ids only.
func TestKernelIDNotLogged(t *testing.T) {
	var logs bytes.Buffer
	ids, _ := newIDCodec([]byte("0123456789abcdef"))
	h := &Handler{s: &versionSays{}, ids: ids, kernels: map[string]*kernel{}, langs: map[string]langInfo{},
		log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	w := httptest.NewRecorder()
	h.startKernel(w, httptest.NewRequest("POST", "/api/kernels", strings.NewReader(`{"name":"python3"}`)))
	var m kernelModel
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil || w.Code != 201 || m.ID == "" {
		t.Fatalf("start: %d %s", w.Code, w.Body)
	}
	if strings.Contains(logs.String(), m.ID) {
		t.Errorf("the log has kernel id %s: %s", m.ID, logs.String())
	}
}

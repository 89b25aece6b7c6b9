package e2b

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/sandbox/sandboxtest"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
)

func TestImageOf(t *testing.T) {
	for in, want := range map[string]string{"": "", "code-interpreter-v1": "", "base": "", "default": "default", "py": "py", "Bad Name": "Bad Name"} {
		if got := imageOf(in); got != want {
			t.Errorf("imageOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func newTemplateHandler(t *testing.T, m *session.Manager) *Handler {
	t.Helper()
	h, err := New(m, Options{StateDir: t.TempDir(), MaxBodyBytes: 1 << 20, MaxUploadBytes: 1 << 20,
		MaxExecTimeout: time.Minute, MaxIdleTimeout: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// call serves one control-plane request and decodes its answer into v (may be nil).
func call(t *testing.T, h *Handler, method, path, body string, v any) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	if v != nil && rec.Code < 300 {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, rec.Body)
		}
	}
	return rec.Code, rec.Body.String()
}

// E2B's default templates are sessions on the server's default image, any other template
// id names an image; every answer about a sandbox names the template it was created with.
// A template whose image is not built is E2B's 404, a bad name its 400, with what to do.
func TestTemplates(t *testing.T) {
	fake := sandboxtest.Images(sessiontest.Local(t), "default", "py")
	h := newTemplateHandler(t, sessiontest.NewOn(t, fake, func(c *config.Config) { c.RootFS = "image" }))
	ids := map[string]string{} // template → sandbox id
	for _, tt := range []struct{ template, image, reported string }{
		{"", "default", "code-interpreter-v1"},
		{"base", "default", "base"},
		{"code-interpreter-v1", "default", "code-interpreter-v1"},
		{"py", "py", "py"},
	} {
		var sb sandbox
		body, _ := json.Marshal(map[string]any{"templateID": tt.template, "timeout": 60})
		if st, b := call(t, h, "POST", "/v2/sandboxes", string(body), &sb); st != http.StatusCreated {
			t.Fatalf("create %q: %d %s", tt.template, st, b)
		}
		if sb.TemplateID != tt.reported || sb.Alias != tt.reported || fake.ImageOf(sb.SandboxID) != tt.image {
			t.Errorf("create %q: template %q alias %q on image %q; want %q on %q", tt.template, sb.TemplateID, sb.Alias,
				fake.ImageOf(sb.SandboxID), tt.reported, tt.image)
		}
		ids[tt.template] = sb.SandboxID
	}

	var info detail
	call(t, h, "GET", "/sandboxes/"+ids["py"], "", &info)
	var conn sandbox
	call(t, h, "POST", "/sandboxes/"+ids["py"]+"/connect", `{}`, &conn)
	if info.TemplateID != "py" || conn.TemplateID != "py" {
		t.Errorf("the sandbox on py: info says %q, connect %q", info.TemplateID, conn.TemplateID)
	}
	var list []listed
	call(t, h, "GET", "/v2/sandboxes", "", &list)
	for _, l := range list {
		want := "code-interpreter-v1"
		if l.SandboxID == ids["py"] {
			want = "py"
		}
		if l.TemplateID != want || l.Alias != want {
			t.Errorf("listed %s: template %q alias %q, want %q", l.SandboxID, l.TemplateID, l.Alias, want)
		}
	}

	for _, tt := range []struct {
		template string
		status   int
		want     []string
	}{
		{"ml", 404, []string{`"code":404`, "template 'ml' not found", "cellbox image build ml"}},
		{"Bad Name", 400, []string{`"code":400`, `image name \"Bad Name\"`}},
	} {
		st, body := call(t, h, "POST", "/v2/sandboxes", `{"templateID":"`+tt.template+`"}`, nil)
		if st != tt.status {
			t.Errorf("template %q: %d %s; want %d", tt.template, st, body, tt.status)
		}
		for _, w := range tt.want {
			if !strings.Contains(body, w) {
				t.Errorf("template %q: %s; want it to say %s", tt.template, body, w)
			}
		}
	}
}

// On a server whose sandboxes run on the host's root, E2B's default templates are all
// there is: another template is refused, saying what would serve it.
func TestTemplatesOnHostRoot(t *testing.T) {
	h := newTemplateHandler(t, sessiontest.New(t, nil))
	st, body := call(t, h, "POST", "/v2/sandboxes", `{"templateID":"py"}`, nil)
	if st != 400 || !strings.Contains(body, `"code":400`) || !strings.Contains(body, "--rootfs image (runc) or --backend docker") {
		t.Errorf("template py on the host's root: %d %s", st, body)
	}
	var sb sandbox
	if st, body := call(t, h, "POST", "/v2/sandboxes", `{"templateID":"base"}`, &sb); st != http.StatusCreated || sb.TemplateID != "base" {
		t.Errorf("template base on the host's root: %d %s", st, body)
	}
}

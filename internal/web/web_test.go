package web

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/testbin"
)

func get(t *testing.T, method, target string, header http.Header) *http.Response {
	t.Helper()
	r := httptest.NewRequest(method, "/", nil)
	// httptest.NewRequest would clean or refuse some of the raw targets under test.
	r.RequestURI = target
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatalf("parse %q: %v", target, err)
	}
	r.URL = u
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestServesFiles(t *testing.T) {
	index, err := fs.ReadFile(static, "static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", string(index)},
		{"/assets/app.js", "text/javascript; charset=utf-8", "import"},
		{"/assets/api.js", "text/javascript; charset=utf-8", "Authorization"},
		{"/assets/style.css", "text/css; charset=utf-8", "prefers-color-scheme"},
		{"/assets/icon.svg", "image/svg+xml", "<svg"},
		{"/assets/vendor/preact-htm.js", "text/javascript; charset=utf-8", "export"},
		{"/assets/vendor/marked.js", "text/javascript; charset=utf-8", "marked"},
		{"/assets/vendor/purify.js", "text/javascript; charset=utf-8", "DOMPurify"},
		{"/assets/vendor/highlight.js", "text/javascript; charset=utf-8", "Highlight.js"},
		{"/assets/vendor/highlight-dark.css", "text/css; charset=utf-8", ".hljs"},
		{"/assets/vendor/VERSIONS", "text/plain; charset=utf-8", "dompurify"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			res := get(t, http.MethodGet, tc.target, nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", res.StatusCode)
			}
			if got := res.Header.Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type %q, want %q", got, tc.contentType)
			}
			if b := body(t, res); !strings.Contains(b, tc.contains) {
				t.Errorf("body does not contain %q", tc.contains)
			}
			if res.Header.Get("ETag") == "" {
				t.Error("no ETag")
			}
			checkSecurityHeaders(t, res)
		})
	}
}

func checkSecurityHeaders(t *testing.T, res *http.Response) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-cache",
	}
	for k, v := range want {
		if got := res.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

func TestNotFound(t *testing.T) {
	for _, target := range []string{
		"/assets/",
		"/assets/vendor",
		"/assets/vendor/",
		"/assets/nope.js",
		"/assets/../web.go",
		"/assets/vendor/../app.js",
		"/assets/./app.js",
		"/assets//app.js",
		"/assets/%2e%2e/web.go",
		"/assets/vendor%2fmarked.js",
		"/assets/vendor%2Fmarked.js",
		"/assets/vendor%5cmarked.js",
		`/assets/vendor\marked.js`,
		"/assets/static/app.js",
		"/static/app.js",
		"/index.html",
		"/app.js",
		"/v1/sessions",
		"/assets",
	} {
		t.Run(target, func(t *testing.T) {
			res := get(t, http.MethodGet, target, nil)
			if res.StatusCode != http.StatusNotFound {
				t.Fatalf("status %d, want 404", res.StatusCode)
			}
			if ct := res.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type %q, want plain text", ct)
			}
			if b := body(t, res); strings.Contains(b, "<") {
				t.Errorf("body %q: want plain text, no listing", b)
			}
			checkSecurityHeaders(t, res)
		})
	}
}

func TestETag(t *testing.T) {
	first := get(t, http.MethodGet, "/assets/app.js", nil)
	etag := first.Header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || len(etag) < 10 {
		t.Fatalf("ETag %q: want a quoted hash", etag)
	}
	if other := get(t, http.MethodGet, "/assets/style.css", nil).Header.Get("ETag"); other == etag {
		t.Errorf("two files share the ETag %q", etag)
	}
	res := get(t, http.MethodGet, "/assets/app.js", http.Header{"If-None-Match": {etag}})
	if res.StatusCode != http.StatusNotModified {
		t.Fatalf("status %d with If-None-Match, want 304", res.StatusCode)
	}
	if b := body(t, res); b != "" {
		t.Errorf("304 with a body of %d bytes", len(b))
	}
	checkSecurityHeaders(t, res)
	res = get(t, http.MethodGet, "/assets/app.js", http.Header{"If-None-Match": {`"stale"`}})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d with a stale ETag, want 200", res.StatusCode)
	}
}

func TestMethods(t *testing.T) {
	res := get(t, http.MethodHead, "/", nil)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("HEAD /: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if b := body(t, res); b != "" {
		t.Errorf("HEAD / has a body of %d bytes", len(b))
	}
	res = get(t, http.MethodPost, "/assets/app.js", nil)
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d, want 405", res.StatusCode)
	}
	checkSecurityHeaders(t, res)
}

// TestNothingFromElsewhere keeps the page from loading anything from another origin: the
// CSP would block it anyway, and a broken page is the result.
func TestNothingFromElsewhere(t *testing.T) {
	err := fs.WalkDir(static, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(name, "static/vendor/") {
			return err
		}
		b, err := fs.ReadFile(static, name)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(b), `xmlns="http://www.w3.org/2000/svg"`, "")
		for _, bad := range []string{"http://", "https://", "//cdn", "@import"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMounted serves the handler as the REST server mounts it, over real HTTP: the mux
// cleans paths first, and encoded slashes reach the handler as they were sent.
func TestMounted(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", Handler())
	mux.Handle("GET /assets/", Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		target string
		status int
	}{
		{"/", http.StatusOK},
		{"/assets/app.js", http.StatusOK},
		{"/assets/vendor/purify.js", http.StatusOK},
		{"/assets/", http.StatusNotFound},
		{"/assets/vendor/", http.StatusNotFound},
		{"/assets/vendor%2Fpurify.js", http.StatusNotFound},
		{"/assets/%2e%2e/web.go", http.StatusNotFound},
		{"/assets/vendor/..%2fapp.js", http.StatusNotFound},
	} {
		t.Run(tc.target, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, srv.URL+tc.target, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
			}
			checkSecurityHeaders(t, res)
		})
	}
}

// TestNotebookLanguages runs ipynb.js in Node: a code cell's language other than Python is
// kept in its metadata and read back, a notebook for a language cellbox runs (IRkernel's
// "R") opens in it, and the file itself stays Python's.
func TestNotebookLanguages(t *testing.T) {
	node := testbin.NeedProgram(t, "node", "nodejs")
	src, err := fs.ReadFile(static, "static/ipynb.js")
	if err != nil {
		t.Fatal(err)
	}
	module := filepath.Join(t.TempDir(), "ipynb.mjs")
	if err := os.WriteFile(module, src, 0o644); err != nil {
		t.Fatal(err)
	}
	const script = `const { readNotebook, writeNotebook } = await import(process.argv[1]);
const code = (code, language) => ({ type: 'code', code, language, outputs: [] });
const text = writeNotebook([code('print(1)', 'python'), code('console.log(1)', 'javascript'), { type: 'markdown', code: '# A' }, code('echo 1', 'bash')]);
const langs = (text) => readNotebook(text).cells.map((c) => c.language || '-');
const nb = (metadata, ...cells) => JSON.stringify({ nbformat: 4, metadata, cells: cells.map((m) => ({ cell_type: 'code', source: '', metadata: m })) });
console.log(JSON.stringify({ file: JSON.parse(text), back: langs(text),
  r: langs(nb({ kernelspec: { language: 'R' } }, {}, { cellbox: { language: 'bash' } })),
  other: langs(nb({ kernelspec: { language: 'julia' } }, {}, { cellbox: { language: 'cobol' } })) }));`
	out, err := exec.Command(node, "--input-type=module", "-e", script, module).Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got struct {
		File struct {
			Cells []struct {
				Metadata map[string]any `json:"metadata"`
			} `json:"cells"`
			Metadata struct {
				Kernelspec struct {
					Language string `json:"language"`
				} `json:"kernelspec"`
			} `json:"metadata"`
		} `json:"file"`
		Back, R, Other []string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var metadata []string
	for _, c := range got.File.Cells {
		b, _ := json.Marshal(c.Metadata)
		metadata = append(metadata, string(b))
	}
	want := []string{`{}`, `{"cellbox":{"language":"javascript"}}`, `{}`, `{"cellbox":{"language":"bash"}}`}
	if strings.Join(metadata, " ") != strings.Join(want, " ") {
		t.Errorf("the cells' metadata: %s, want %s", metadata, want)
	}
	if got.File.Metadata.Kernelspec.Language != "python" {
		t.Errorf("the notebook's language: %q, want python", got.File.Metadata.Kernelspec.Language)
	}
	for _, tc := range []struct {
		name      string
		got, want []string
	}{
		{"read back", got.Back, []string{"python", "javascript", "-", "bash"}},
		{"an R notebook", got.R, []string{"r", "bash"}},
		{"another language", got.Other, []string{"python", "python"}},
	} {
		if strings.Join(tc.got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: languages %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

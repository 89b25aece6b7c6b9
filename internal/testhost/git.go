package testhost

import (
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/testbin"
)

// GitOptions are Git's options.
type GitOptions struct {
	// RequireHeader, when set, is a request header that must have Value: any request
	// without it is answered 401.
	RequireHeader, Value string
}

// Git serves a bare repository, /repo.git, with one commit of files (by slash-separated
// path), over git's smart HTTP (git http-backend, through CGI): `git clone URL/repo.git`.
// It needs git.
func Git(t testing.TB, files map[string]string, opts ...GitOptions) http.Handler {
	t.Helper()
	testbin.NeedProgram(t, "git", "git")
	var opt GitOptions
	if len(opts) > 0 {
		opt = opts[0]
	}
	dir := t.TempDir()
	src, root := filepath.Join(dir, "src"), filepath.Join(dir, "root")
	for name, body := range files {
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=testhost", "GIT_AUTHOR_EMAIL=testhost@example.com",
		"GIT_COMMITTER_NAME=testhost", "GIT_COMMITTER_EMAIL=testhost@example.com")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", src},
		{"-C", src, "add", "-A"},
		{"-C", src, "commit", "-q", "--allow-empty", "-m", "testhost"},
		{"clone", "-q", "--bare", src, filepath.Join(root, "repo.git")},
	} {
		cmd := exec.Command("git", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(out)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"},
	}
	if opt.RequireHeader == "" {
		return backend
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(opt.RequireHeader) != opt.Value {
			w.Header().Set("WWW-Authenticate", `Basic realm="testhost"`)
			http.Error(w, "this repository needs the "+opt.RequireHeader+" header", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	})
}

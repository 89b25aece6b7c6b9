package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// in runs code in execution context name and returns its stdout, failing on any other status
// than ok.
func (g *guestT) in(t *testing.T, name, code string) string {
	t.Helper()
	r, err := g.Execute(context.Background(), api.ExecuteRequest{Code: code, Context: name, TimeoutS: 30}, nil)
	if err != nil || r.Status != api.StatusOK {
		t.Fatalf("in context %q, %q: %+v, %v", name, code, r, err)
	}
	return text(r, "stdout")
}

// TestContexts: named contexts are separate namespaces of one kernel, each with its own
// working directory; deleting one or restarting the kernel drops it.
func TestContexts(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	ctx := context.Background()
	os.Mkdir(filepath.Join(g.dir, "sub"), 0o755)

	g.in(t, "", "x = 'default'\nimport json\ndef f(): return x")
	g.in(t, "a", "x = 'a'\ny = 1\ndef f(): return x\nclass P: pass")
	cases := []struct{ ctx, code, want string }{
		{"", "print(x, f())", "default default\n"},
		{"a", "print(x, f(), y)", "a a 1\n"},
		{"", "print('y' in globals(), 'P' in dir())", "False False\n"},
		{"a", "print('json' in globals())", "False\n"}, // an import binds its name in its context only
		{"b", "print('x' in globals(), 'f' in globals(), 'In' in globals())", "False False True\n"},
		{"a", "print(sorted(get_ipython().run_line_magic('who_ls', '')))", "['P', 'f', 'x', 'y']\n"},
		{"", "print(sorted(get_ipython().run_line_magic('who_ls', '')))", "['f', 'json', 'x']\n"},
		// __main__ follows the context: pickle finds the class where it was defined.
		{"a", "import pickle, sys\nprint(type(pickle.loads(pickle.dumps(P()))) is P, sys.modules['__main__'].__dict__ is globals())", "True True\n"},
		{"", "import sys\nprint(sys.modules['__main__'].__dict__ is globals())", "True\n"},
	}
	for _, c := range cases {
		if got := g.in(t, c.ctx, c.code); got != c.want {
			t.Errorf("in %q, %q: %q, want %q", c.ctx, c.code, got, c.want)
		}
	}

	// Working directories: each context keeps its own; a new one starts in the workspace.
	ws := pyQuote(g.dir)
	g.in(t, "a", "import os\nos.chdir('sub')")
	g.in(t, "", "import os\nos.chdir('/')")
	for _, c := range []struct{ ctx, want string }{{"a", "sub"}, {"", "/"}, {"c", "ws"}, {"a", "sub"}} {
		got := g.in(t, c.ctx, "import os\nd = os.getcwd()\nprint('ws' if d == "+ws+" else 'sub' if d == os.path.join("+ws+", 'sub') else d, end='')")
		if got != c.want {
			t.Errorf("cwd in %q: %q, want %q", c.ctx, got, c.want)
		}
	}
	// A context whose folder is removed meanwhile comes back in the workspace.
	g.in(t, "", "import os\nos.rmdir("+pyQuote(filepath.Join(g.dir, "sub"))+")")
	if got := g.in(t, "a", "import os\nprint(os.getcwd() == "+ws+", end='')"); got != "True" {
		t.Errorf("a context whose folder was removed: cwd is the workspace: %s", got)
	}

	// Deleting a context: fresh at its next use; others untouched; the one the last cell ran
	// in can be deleted too.
	if err := g.DeleteContext(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got := g.in(t, "a", "print('x' in globals(), end='')"); got != "False" {
		t.Errorf("a deleted context kept its variables: %s", got)
	}
	if err := g.DeleteContext(ctx, "a"); err != nil {
		t.Fatalf("delete the context the last cell ran in: %v", err)
	}
	if got := g.in(t, "", "print(x, os.getcwd(), end='')"); got != "default /" {
		t.Errorf("the default context after a delete: %q", got)
	}
	err := g.DeleteContext(ctx, "never")
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `"never"`) {
		t.Errorf("delete an unknown context: %v, want not found naming it", err)
	}
	if err := g.DeleteContext(ctx, ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("delete the default context: %v, want invalid argument", err)
	}

	// A restart drops every context.
	g.in(t, "r", "z = 1")
	if err := g.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteContext(ctx, "r"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a context after a restart: %v, want not found", err)
	}
	if got := g.in(t, "r", "print('z' in globals(), end='')"); got != "False" {
		t.Errorf("a context kept its variables across a restart: %s", got)
	}
}

// TestAttackContexts: names that are paths, control bytes or huge are refused before
// anything runs; the 65th context is refused until one is deleted.
func TestAttackContexts(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	ctx := context.Background()
	for _, name := range []string{"../../etc", "a/b", "/", "a\x00b", "a\nb", strings.Repeat("c", 65), strings.Repeat("c", 10<<10), "ü"} {
		_, err := g.Execute(ctx, api.ExecuteRequest{Code: "open('ran', 'w')", Context: name, TimeoutS: 5}, nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("execute in context %.20q: %v, want invalid argument", name, err)
		}
		if err := g.DeleteContext(ctx, name); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("delete context %.20q: %v, want invalid argument", name, err)
		}
		if len(fmt.Sprint(err)) > 300 {
			t.Errorf("the refusal of a %d-byte name is %d bytes long", len(name), len(fmt.Sprint(err)))
		}
	}
	if fileExists(filepath.Join(g.dir, "ran")) {
		t.Error("code ran in a refused context")
	}

	for i := range guestproto.MaxContexts {
		g.in(t, fmt.Sprintf("c%d", i), "v = 1")
	}
	_, err := g.Execute(ctx, api.ExecuteRequest{Code: "v = 1", Context: "one-more", TimeoutS: 5}, nil)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "delete one") {
		t.Fatalf("context %d: %v, want resource exhausted", guestproto.MaxContexts+1, err)
	}
	g.in(t, "c0", "v = 2") // the existing ones still run
	g.in(t, "", "v = 2")
	if err := g.DeleteContext(ctx, "c5"); err != nil {
		t.Fatal(err)
	}
	g.in(t, "one-more", "v = 1")
}

// TestExecuteEnv: a cell's env is set for that cell only, its children included; what the
// code itself sets stays.
func TestExecuteEnv(t *testing.T) {
	needIPython(t)
	t.Parallel()
	cfg := testConfig()
	cfg.Env = map[string]string{"FROM_SESSION": "session"}
	g := startKernelGuest(t, cfg)
	ctx := context.Background()
	show := "import os, subprocess\nprint([os.environ.get(k) for k in ('FROM_SESSION', 'NEW', 'CODE_SET')], end=' ')\n"
	r, err := g.Execute(ctx, api.ExecuteRequest{Code: show +
		"print(subprocess.run(['sh', '-c', 'echo $NEW'], capture_output=True, text=True).stdout, end='')\n" +
		"os.environ['CODE_SET'] = 'kept'\nos.environ['FROM_SESSION'] = 'changed by code'",
		Env: map[string]string{"NEW": "new", "FROM_SESSION": "cell"}, TimeoutS: 30}, nil)
	if err != nil || text(r, "stdout") != "['cell', 'new', None] new\n" {
		t.Fatalf("in the cell: %+v, %v", r, err)
	}
	if got := g.in(t, "", show); got != "['session', None, 'kept'] " {
		t.Errorf("after the cell: %q, want the session's value back, NEW gone, CODE_SET kept", got)
	}
	// Restored after a timeout too, and in a named context.
	r, err = g.Execute(ctx, api.ExecuteRequest{Code: "import time\nwhile True: time.sleep(0.01)", Context: "e",
		Env: map[string]string{"NEW": "new"}, TimeoutS: 0.5}, nil)
	if err != nil || r.Status != api.StatusTimeout {
		t.Fatalf("timeout: %+v, %v", r, err)
	}
	if got := g.in(t, "e", show); got != "['session', None, 'kept'] " {
		t.Errorf("after a timeout: %q", got)
	}
	for _, env := range []map[string]string{{"A": "x\x00y"}, {"A=B": "x"}, {"": "x"}, {"A\x00": "x"}} {
		if _, err := g.Execute(ctx, api.ExecuteRequest{Code: "1", Env: env, TimeoutS: 5}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("env %q: %v, want invalid argument", env, err)
		}
	}
}

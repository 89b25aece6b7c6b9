package guest

import (
	"context"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/testbin"
)

// python is Debian's interpreter, which has IPython, numpy, pandas and matplotlib.
const python = "/usr/bin/python3"

var (
	pyOnce sync.Once
	pyErr  error
)

// needIPython skips the test when the kernel's Python cannot import what the runner needs.
func needIPython(t testing.TB) {
	t.Helper()
	pyOnce.Do(func() {
		out, err := exec.Command(python, "-c", "import IPython, matplotlib_inline").CombinedOutput()
		if err != nil {
			pyErr = &skipErr{string(out)}
		}
	})
	if pyErr != nil {
		testbin.Missing(t, "%s cannot import IPython and matplotlib_inline (install python3-ipython and python3-matplotlib-inline): %v", python, pyErr)
	}
}

type skipErr struct{ out string }

func (e *skipErr) Error() string { return e.out }

// pipeConn is one end of two os.Pipes, like a guest's stdin and stdout.
type pipeConn struct {
	r *os.File
	w *os.File
}

func (p pipeConn) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipeConn) Close() error {
	p.r.Close()
	return p.w.Close()
}

type guestT struct {
	*guestproto.Client
	dir  string
	done chan error
}

// startGuest runs Serve in-process over two pipes and dials it with the real client.
func startGuest(t testing.TB, opts Options) *guestT {
	t.Helper()
	if opts.Workspace == "" {
		opts.Workspace = t.TempDir()
	}
	sr, cw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cr, sw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	g := &guestT{dir: opts.Workspace, done: make(chan error, 1)}
	go func() { g.done <- Serve(context.Background(), pipeConn{sr, sw}, opts) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := guestproto.Dial(ctx, pipeConn{cr, cw})
	if err != nil {
		t.Fatalf("dial guest: %v", err)
	}
	c.Slack = 20 * time.Second
	g.Client = c
	t.Cleanup(func() {
		c.Close()
		select {
		case err := <-g.done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Serve did not return after the connection closed")
		}
	})
	return g
}

// testConfig is a kernel configuration for tests.
func testConfig() guestproto.Config {
	return guestproto.Config{Python: python, MaxOutputBytes: 1 << 20, MaxRichBytes: 8 << 20,
		DefaultTimeoutS: 30, InterruptGraceS: 2}
}

// startKernelGuest starts a guest and configures its kernel.
func startKernelGuest(t testing.TB, cfg guestproto.Config) *guestT {
	t.Helper()
	needIPython(t)
	g := startGuest(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := g.Configure(ctx, cfg); err != nil {
		t.Fatalf("configure: %v", err)
	}
	return g
}

func (g *guestT) exec(t testing.TB, code string, timeoutS float64) *api.ExecuteResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if timeoutS == 0 {
		timeoutS = 30
	}
	r, err := g.Execute(ctx, api.ExecuteRequest{Code: code, TimeoutS: timeoutS}, nil)
	if err != nil {
		t.Fatalf("execute %q: %v", code, err)
	}
	return r
}

// text joins the stream outputs named name.
func text(r *api.ExecuteResult, name string) string {
	s := ""
	for _, o := range r.Outputs {
		if o.Type == api.OutputStream && o.Name == name {
			s += o.Text
		}
	}
	return s
}

func readAll(t testing.TB, r io.ReadCloser) []byte {
	t.Helper()
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var servers sync.Map // workspace folder → *server

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	testHookServe = func(s *server) { servers.Store(s.opts.Workspace, s) }
	os.Exit(m.Run())
}

// serverOf returns the server behind a guest started by startGuest.
func serverOf(t testing.TB, g *guestT) *server {
	t.Helper()
	s, ok := servers.Load(g.dir)
	if !ok {
		t.Fatal("no server for this guest")
	}
	return s.(*server)
}

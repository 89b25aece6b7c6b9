package guest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
)

func TestHello(t *testing.T) {
	g := startGuest(t, Options{})
	h := g.Hello()
	if h.Version != guestproto.Version || h.PID != os.Getpid() || h.Root != g.dir {
		t.Errorf("hello = %+v", h)
	}
}

func TestBeforeConfigure(t *testing.T) {
	g := startGuest(t, Options{})
	ctx := context.Background()
	if _, err := g.Execute(ctx, api.ExecuteRequest{Code: "1", TimeoutS: 5}, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("execute before configure: %v, want failed_precondition", err)
	}
	if err := g.Restart(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("restart before configure: %v, want failed_precondition", err)
	}
	if err := g.Interrupt(ctx); err != nil {
		t.Errorf("interrupt before configure: %v", err)
	}
	// Commands and files work without a kernel.
	r, err := g.Command(ctx, api.CommandRequest{Cmd: []string{"true"}, TimeoutS: 5})
	if err != nil || r.Status != api.StatusOK {
		t.Errorf("command before configure: %+v, %v", r, err)
	}
}

func TestConfigureErrors(t *testing.T) {
	needIPython(t)
	t.Parallel()
	tests := []struct {
		name string
		cfg  guestproto.Config
		code error
		want string
	}{
		{"no python", guestproto.Config{}, errdefs.ErrInvalidArgument, "Python interpreter"},
		{"python missing", guestproto.Config{Python: "/nonexistent/python3"}, errdefs.ErrInvalidArgument, "not found"},
		{"not python", guestproto.Config{Python: "/bin/false"}, errdefs.ErrUnavailable, "did not start"},
		{"preimport fails", guestproto.Config{Python: python, Preimport: "1/0"}, errdefs.ErrInvalidArgument, "ZeroDivisionError"},
	}
	t.Run("preimport of a module the image lacks", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.Preimport = "import json as preimported, no_such_module_xyz"
		g := startKernelGuest(t, cfg)
		r, err := g.Execute(context.Background(), api.ExecuteRequest{Code: "print(preimported.dumps(1)); import no_such_module_xyz"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		last := r.Outputs[len(r.Outputs)-1]
		if text(r, "stdout") != "1\n" || r.Status != api.StatusError || last.EName != "ModuleNotFoundError" {
			t.Errorf("the kernel after a preimport of a missing module: %+v", r)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := startGuest(t, Options{})
			err := g.Configure(context.Background(), tt.cfg)
			if !errors.Is(err, tt.code) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("configure: %v, want %v containing %q", err, tt.code, tt.want)
			}
		})
	}
}

// TestExecute runs cells one after another in one kernel.
func TestExecute(t *testing.T) {
	cfg := testConfig()
	cfg.Preimport = "import json as preimported; print('not shown')"
	g := startKernelGuest(t, cfg)
	tests := []struct {
		name  string
		code  string
		check func(t *testing.T, r *api.ExecuteResult)
	}{
		{"first cell is 1 after preimport", "x = 41", func(t *testing.T, r *api.ExecuteResult) {
			if r.Status != api.StatusOK || r.ExecutionCount != 1 || len(r.Outputs) != 0 {
				t.Errorf("got %+v", r)
			}
		}},
		{"state and preimport kept", "print(x + 1, preimported.dumps(1))", func(t *testing.T, r *api.ExecuteResult) {
			if got := text(r, "stdout"); got != "42 1\n" {
				t.Errorf("stdout %q", got)
			}
		}},
		{"stdout and stderr", "import sys; print('out'); print('err', file=sys.stderr)", func(t *testing.T, r *api.ExecuteResult) {
			if text(r, "stdout") != "out\n" || text(r, "stderr") != "err\n" {
				t.Errorf("outputs %+v", r.Outputs)
			}
		}},
		{"execute_result", "x + 1", func(t *testing.T, r *api.ExecuteResult) {
			if len(r.Outputs) != 1 || r.Outputs[0].Type != api.OutputExecuteResult ||
				r.Outputs[0].Data["text/plain"] != "42" || r.Outputs[0].ExecutionCount != r.ExecutionCount {
				t.Errorf("outputs %+v (count %d)", r.Outputs, r.ExecutionCount)
			}
		}},
		{"trailing semicolon hides the value", "x;", func(t *testing.T, r *api.ExecuteResult) {
			if len(r.Outputs) != 0 {
				t.Errorf("outputs %+v", r.Outputs)
			}
		}},
		{"display order", "print('a'); display('x'); print('b'); display('y')", func(t *testing.T, r *api.ExecuteResult) {
			var got []string
			for _, o := range r.Outputs {
				if o.Type == api.OutputStream {
					got = append(got, strings.TrimSpace(o.Text))
				} else {
					got = append(got, o.Data["text/plain"].(string))
				}
			}
			if strings.Join(got, ",") != "a,'x',b,'y'" {
				t.Errorf("order %q", got)
			}
		}},
		{"error", "def f():\n    return 1/0\nf()", func(t *testing.T, r *api.ExecuteResult) {
			if r.Status != api.StatusError || len(r.Outputs) != 1 {
				t.Fatalf("got %+v", r)
			}
			o := r.Outputs[0]
			tb := strings.Join(o.Traceback, "\n")
			if o.Type != api.OutputError || o.EName != "ZeroDivisionError" || o.EValue != "division by zero" ||
				!strings.Contains(tb, "return 1/0") || strings.Contains(tb, "\x1b[") {
				t.Errorf("error output %+v", o)
			}
		}},
		{"syntax error", "def (:", func(t *testing.T, r *api.ExecuteResult) {
			if r.Status != api.StatusError || len(r.Outputs) != 1 || r.Outputs[0].EName != "SyntaxError" {
				t.Errorf("got %+v", r)
			}
		}},
		{"input does not hang", "input()", func(t *testing.T, r *api.ExecuteResult) {
			if r.Status != api.StatusError {
				t.Errorf("got %+v", r)
			}
		}},
		{"output from C and child processes", "import ctypes, subprocess\nctypes.CDLL(None).printf(b'from C\\n')\nsubprocess.run(['echo', 'from child'])\nimport os; os.write(2, b'raw fd 2\\n')", func(t *testing.T, r *api.ExecuteResult) {
			out := text(r, "stdout")
			if !strings.Contains(out, "from C\n") || !strings.Contains(out, "from child\n") || text(r, "stderr") != "raw fd 2\n" {
				t.Errorf("outputs %+v", r.Outputs)
			}
		}},
		{"shell escape", "!echo hi; echo err >&2\nx = 41", func(t *testing.T, r *api.ExecuteResult) {
			if text(r, "stdout") != "hi\n" || text(r, "stderr") != "err\n" {
				t.Errorf("outputs %+v", r.Outputs)
			}
		}},
		{"dataframe", "import pandas as pd\npd.DataFrame({'a': [1, 2]})", func(t *testing.T, r *api.ExecuteResult) {
			if len(r.Outputs) != 1 {
				t.Fatalf("outputs %+v", r.Outputs)
			}
			html, _ := r.Outputs[0].Data["text/html"].(string)
			plain, _ := r.Outputs[0].Data["text/plain"].(string)
			if !strings.Contains(html, "<table") || !strings.Contains(plain, "a") {
				t.Errorf("data %+v", r.Outputs[0].Data)
			}
		}},
		{"plt.show", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nprint('after')", func(t *testing.T, r *api.ExecuteResult) {
			if n := pngs(t, r); n != 1 {
				t.Errorf("%d PNGs, want 1; outputs %+v", n, r.Outputs)
			}
			if last := r.Outputs[len(r.Outputs)-1]; last.Text != "after\n" {
				t.Errorf("last output %+v, want the print after the figure", last)
			}
		}},
		{"figures left open are shown", "fig, ax = plt.subplots(); ax.plot([3, 1])\nfig2 = plt.figure(); plt.bar([1], [2]);", func(t *testing.T, r *api.ExecuteResult) {
			if n := pngs(t, r); n != 2 {
				t.Errorf("%d PNGs, want 2; outputs %+v", n, r.Outputs)
			}
		}},
		{"json bundle", "from IPython.display import JSON\nJSON({'k': [1, 2]})", func(t *testing.T, r *api.ExecuteResult) {
			v, ok := r.Outputs[0].Data["application/json"].(map[string]any)
			if !ok || v["k"] == nil {
				t.Errorf("data %+v", r.Outputs[0].Data)
			}
		}},
		{"NaN in a bundle does not hang", "from IPython.display import JSON\nJSON({'k': float('nan')})", func(t *testing.T, r *api.ExecuteResult) {
			if r.Status != api.StatusOK {
				t.Errorf("got %+v", r)
			}
		}},
		{"sys.exit is an error", "import sys; sys.exit(3)", func(t *testing.T, r *api.ExecuteResult) {
			if r.Status != api.StatusError {
				t.Errorf("got %+v", r)
			}
		}},
		{"unicode", "print('héllo ✓ 𝄞')", func(t *testing.T, r *api.ExecuteResult) {
			if text(r, "stdout") != "héllo ✓ 𝄞\n" {
				t.Errorf("stdout %q", text(r, "stdout"))
			}
		}},
		{"file changes", "open('new.txt', 'w').write('hi')\nimport os; os.makedirs('sub', exist_ok=True); open('sub/b.bin', 'wb').write(b'12345')", func(t *testing.T, r *api.ExecuteResult) {
			want := []api.FileChange{
				{Path: "/mnt/data/new.txt", Size: 2, Change: api.ChangeCreated},
				{Path: "/mnt/data/sub/b.bin", Size: 5, Change: api.ChangeCreated},
			}
			if !equalChanges(r.Files, want) {
				t.Errorf("files %+v, want %+v", r.Files, want)
			}
		}},
		{"file modified and deleted", "open('new.txt', 'a').write('!')\nos.remove('sub/b.bin')", func(t *testing.T, r *api.ExecuteResult) {
			want := []api.FileChange{
				{Path: "/mnt/data/new.txt", Size: 3, Change: api.ChangeModified},
				{Path: "/mnt/data/sub/b.bin", Size: 0, Change: api.ChangeDeleted},
			}
			if !equalChanges(r.Files, want) {
				t.Errorf("files %+v, want %+v", r.Files, want)
			}
		}},
		{"cwd is the workspace", "import os; os.remove('new.txt'); os.rmdir('sub'); print(os.listdir('.'))", func(t *testing.T, r *api.ExecuteResult) {
			if text(r, "stdout") != "[]\n" {
				t.Errorf("stdout %q", text(r, "stdout"))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, g.exec(t, tt.code, 0))
		})
	}
	// Nothing of IPython's or matplotlib's own lands in the workspace.
	entries, err := os.ReadDir(g.dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("workspace holds %v (%v), want nothing", entries, err)
	}
}

func pngs(t *testing.T, r *api.ExecuteResult) int {
	t.Helper()
	n := 0
	for _, o := range r.Outputs {
		s, ok := o.Data["image/png"].(string)
		if !ok || o.Type != api.OutputDisplayData {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("image/png is not a base64 PNG: %v", err)
		}
		n++
	}
	return n
}

func equalChanges(a, b []api.FileChange) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTimeout(t *testing.T) {
	needIPython(t)
	t.Parallel()
	t.Run("interrupted, state kept", func(t *testing.T) {
		t.Parallel()
		g := startKernelGuest(t, testConfig())
		g.exec(t, "x = 41", 0)
		start := time.Now()
		r := g.exec(t, "while True: pass", 2)
		if el := time.Since(start); r.Status != api.StatusTimeout || el > 4*time.Second || r.Message == "" {
			t.Errorf("after %v: %+v", el, r)
		}
		if r := g.exec(t, "x + 1", 0); r.Outputs[0].Data["text/plain"] != "42" {
			t.Errorf("state lost: %+v", r)
		}
	})
	t.Run("stuck, kernel restarted", func(t *testing.T) {
		t.Parallel()
		g := startKernelGuest(t, testConfig()) // grace 2 s
		g.exec(t, "x = 41", 0)
		start := time.Now()
		r := g.exec(t, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(0.01)", 1)
		if el := time.Since(start); r.Status != api.StatusTimeout || el > 6*time.Second || !strings.Contains(r.Message, "restarted") || !r.KernelRestarted {
			t.Errorf("after %v: %+v", el, r)
		}
		r = g.exec(t, "x", 0)
		if r.Status != api.StatusError || r.Outputs[0].EName != "NameError" || r.ExecutionCount != 1 || r.KernelRestarted {
			t.Errorf("after restart: %+v", r)
		}
	})
}

func TestInterrupt(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	ctx := context.Background()
	if err := g.Interrupt(ctx); err != nil {
		t.Fatalf("interrupt when idle: %v", err)
	}
	g.exec(t, "x = 1", 0)
	started := make(chan struct{})
	var once sync.Once
	start := time.Now()
	r, err := g.Execute(ctx, api.ExecuteRequest{Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(30)", TimeoutS: 30},
		func(o api.Output) {
			once.Do(func() {
				close(started)
				go g.Interrupt(ctx)
			})
		})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); r.Status != api.StatusInterrupted || el > 5*time.Second {
		t.Errorf("after %v: %+v", el, r)
	}
	if last := r.Outputs[len(r.Outputs)-1]; last.EName != "KeyboardInterrupt" {
		t.Errorf("last output %+v", last)
	}
	if r := g.exec(t, "x", 0); r.Status != api.StatusOK {
		t.Errorf("state lost: %+v", r)
	}

	// A second Execute while one runs is refused.
	done := make(chan *api.ExecuteResult)
	running := make(chan struct{}, 1) // the cell printed "go"
	go func() {
		r, _ := g.Execute(ctx, api.ExecuteRequest{Code: "import time; print('go', flush=True); time.sleep(30)", TimeoutS: 30},
			said(running, "go"))
		done <- r
	}()
	waitSaid(t, running)
	if _, err := g.Execute(ctx, api.ExecuteRequest{Code: "1", TimeoutS: 5}, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("concurrent execute: %v, want failed_precondition", err)
	}
	// Cancelling the context of Execute interrupts too.
	g.Interrupt(ctx)
	if r := <-done; r == nil || r.Status != api.StatusInterrupted {
		t.Errorf("interrupted cell: %+v", r)
	}
}

func TestCrash(t *testing.T) {
	needIPython(t)
	t.Parallel()
	tests := []struct {
		name   string
		cgroup func(dir string) string // prepares a fake cgroup folder; returns the counter file
		code   string
		status string
		msg    string
	}{
		{"exit", nil, "import os; print('bye', flush=True); os._exit(1)", api.StatusCrashed, "exit code 1"},
		{"segfault", nil, "import ctypes; ctypes.string_at(0)", api.StatusCrashed, "SIGSEGV"},
		{"sigkill without cgroup", nil, "import os; os.kill(os.getpid(), 9)", api.StatusCrashed, "memory"},
		{"oom cgroup v2", func(dir string) string {
			os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"), 0o644)
			return filepath.Join(dir, "memory.events")
		}, "import os; open(%q, 'w').write('oom 2\\noom_kill 2\\n'); os.kill(os.getpid(), 9)", api.StatusOOM, "out of memory (limit 256 MiB)"},
		{"oom cgroup v1", func(dir string) string {
			os.Mkdir(filepath.Join(dir, "memory"), 0o755)
			p := filepath.Join(dir, "memory", "memory.oom_control")
			os.WriteFile(p, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"), 0o644)
			return p
		}, "import os; open(%q, 'w').write('oom_kill_disable 0\\nunder_oom 0\\noom_kill 1\\n'); os.kill(os.getpid(), 9)", api.StatusOOM, "out of memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := Options{}
			code := tt.code
			if tt.cgroup != nil {
				opts.Cgroup = t.TempDir()
				code = strings.Replace(code, "%q", `"`+tt.cgroup(opts.Cgroup)+`"`, 1)
			}
			g := startGuest(t, opts)
			cfg := testConfig()
			cfg.MemoryMB = 256
			if err := g.Configure(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			g.exec(t, "x = 1", 0)
			r := g.exec(t, code, 0)
			if r.Status != tt.status || !strings.Contains(r.Message, tt.msg) || !strings.Contains(r.Message, "files in /mnt/data are kept") || r.ExecutionCount != 2 || !r.KernelRestarted {
				t.Errorf("got %+v, want %s with %q, the kernel restarted", r, tt.status, tt.msg)
			}
			r = g.exec(t, "x", 0)
			if r.Status != api.StatusError || r.Outputs[0].EName != "NameError" || r.ExecutionCount != 1 || r.KernelRestarted {
				t.Errorf("after the crash: %+v", r)
			}
		})
	}
}

func TestRestart(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	ctx := context.Background()
	g.exec(t, "x = 1", 0)
	g.exec(t, "open('kept.txt', 'w').write('x')", 0)
	if err := g.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	r := g.exec(t, "x", 0)
	if r.Status != api.StatusError || r.ExecutionCount != 1 {
		t.Errorf("after restart: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(g.dir, "kept.txt")); err != nil {
		t.Errorf("workspace file lost: %v", err)
	}
	// A restart while a cell runs ends the cell.
	done := make(chan *api.ExecuteResult)
	running := make(chan struct{}, 1) // the cell printed "go"
	go func() {
		r, _ := g.Execute(ctx, api.ExecuteRequest{Code: "import time; print('go', flush=True); time.sleep(30)", TimeoutS: 30},
			said(running, "go"))
		done <- r
	}()
	waitSaid(t, running)
	if err := g.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r == nil || r.Status != api.StatusInterrupted || !strings.Contains(r.Message, "restarted") {
		t.Errorf("cell during restart: %+v", r)
	}
	if r := g.exec(t, "1", 0); r.Status != api.StatusOK || r.ExecutionCount != 1 {
		t.Errorf("after restart: %+v", r)
	}
}

func TestOutputLimits(t *testing.T) {
	needIPython(t)
	t.Parallel()
	cfg := testConfig()
	cfg.MaxOutputBytes = 1000
	cfg.MaxRichBytes = 20000
	g := startKernelGuest(t, cfg)
	t.Run("20 MB print", func(t *testing.T) {
		start := time.Now()
		r := g.exec(t, "print('x' * 20_000_000); print('still running')", 0)
		out := text(r, "stdout")
		if !r.Truncated || r.Status != api.StatusOK || len(out) < 1000 || len(out) > 1300 ||
			!strings.Contains(out, "output truncated") || time.Since(start) > 10*time.Second {
			t.Errorf("truncated=%v status=%s len=%d after %v; tail %q", r.Truncated, r.Status, len(out), time.Since(start), out[max(0, len(out)-200):])
		}
	})
	t.Run("rich output dropped", func(t *testing.T) {
		r := g.exec(t, "from IPython.display import HTML, display\ndisplay(HTML('<p>' + 'y' * 30000 + '</p>'))\ndisplay(HTML('<b>small</b>'))", 0)
		var html []string
		for _, o := range r.Outputs {
			if h, ok := o.Data["text/html"].(string); ok {
				html = append(html, h)
			}
		}
		if !r.Truncated || len(html) != 1 || html[0] != "<b>small</b>" || !strings.Contains(text(r, "stderr"), "rich output") {
			t.Errorf("truncated=%v html=%d outputs=%+v", r.Truncated, len(html), r.Outputs)
		}
	})
	t.Run("long traceback keeps its end", func(t *testing.T) {
		code := "def f0(): return 1/0\n"
		for i := 1; i <= 40; i++ {
			code += fmt.Sprintf("def f%d(): return f%d()\n", i, i-1)
		}
		r := g.exec(t, code+"f40()", 0)
		var e *api.Output
		for i := range r.Outputs {
			if r.Outputs[i].Type == api.OutputError {
				e = &r.Outputs[i]
			}
		}
		if e == nil || !r.Truncated || !strings.Contains(e.Traceback[len(e.Traceback)-1], "ZeroDivisionError") {
			t.Errorf("got %+v", r)
		}
	})
	t.Run("next cell has a fresh budget", func(t *testing.T) {
		if r := g.exec(t, "print('ok')", 0); r.Truncated || text(r, "stdout") != "ok\n" {
			t.Errorf("got %+v", r)
		}
	})
}

func TestStreaming(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	start := time.Now()
	var first time.Duration
	r, err := g.Execute(context.Background(), api.ExecuteRequest{Code: "import time\nprint('early')\ntime.sleep(3)\nprint('late')", TimeoutS: 30},
		func(o api.Output) {
			if first == 0 {
				first = time.Since(start)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if total := time.Since(start); first == 0 || first > total-2*time.Second {
		t.Errorf("first output after %v of %v: not streamed", first, total)
	}
	if text(r, "stdout") != "early\nlate\n" {
		t.Errorf("stdout %q", text(r, "stdout"))
	}
}

func TestKernelEnv(t *testing.T) {
	needIPython(t)
	t.Parallel()
	cfg := testConfig()
	cfg.Env = map[string]string{"CELLBOX_TEST": "yes"}
	g := startKernelGuest(t, cfg)
	r := g.exec(t, "import os\nprint(os.environ['CELLBOX_TEST'], os.getcwd() == "+pyQuote(g.dir)+
		", open('/proc/self/oom_score_adj').read().strip(), os.getpgid(0) == os.getpid())", 0)
	if got := text(r, "stdout"); got != "yes True 1000 True\n" {
		t.Errorf("stdout %q", got)
	}
}

func pyQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

func TestRunnerHidden(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	r := g.exec(t, "import os, sys\nprint('CELLBOX_RUNNER' in os.environ, '_main' in dir(), len(open('/proc/self/cmdline').read()) < 200)", 0)
	if got := text(r, "stdout"); got != "False False True\n" {
		t.Errorf("stdout %q, want the runner invisible to user code", got)
	}
}

func TestMplCache(t *testing.T) {
	needIPython(t)
	t.Parallel()
	cache := t.TempDir()
	os.WriteFile(filepath.Join(cache, "fontlist-test.json"), []byte("{}"), 0o644)
	g := startGuest(t, Options{MplCache: cache})
	if err := g.Configure(context.Background(), testConfig()); err != nil {
		t.Fatal(err)
	}
	r := g.exec(t, "import os\nd = os.environ['MPLCONFIGDIR']\nprint(os.listdir(d), os.access(d, os.W_OK), d.startswith("+pyQuote(g.dir)+"))", 0)
	if got := text(r, "stdout"); got != "['fontlist-test.json'] True False\n" {
		t.Errorf("stdout %q", got)
	}
}

// A kernel that cannot start because the sandbox is at its limits is a resource the caller
// ran out of, said as such; any other failure is the kernel's configuration.
func TestKernelStartErrorClasses(t *testing.T) {
	for _, tt := range []struct {
		err    error
		want   error
		advice bool
	}{
		{fmt.Errorf("could not start the Python interpreter %q: %w", "python3", syscall.EAGAIN), errdefs.ErrResourceExhausted, true},
		{fmt.Errorf("could not start the Python interpreter %q: %w", "python3", syscall.ENOMEM), errdefs.ErrResourceExhausted, true},
		{errors.New(`the Python interpreter "python9" was not found`), errdefs.ErrInvalidArgument, false},
		{fmt.Errorf("could not start the Python interpreter %q: %w", "python3", syscall.EACCES), errdefs.ErrInvalidArgument, false},
	} {
		got := kernelStartError(tt.err)
		if !errors.Is(got, tt.want) || strings.Contains(got.Error(), "limit of processes") != tt.advice ||
			!strings.Contains(got.Error(), tt.err.Error()) {
			t.Errorf("%v: %v, want %v (advice %v)", tt.err, got, tt.want, tt.advice)
		}
	}
}

// said returns an output callback that signals on c (once; c has room for one) when an
// output contains text: the cell got that far.
func said(c chan<- struct{}, text string) func(api.Output) {
	return func(o api.Output) {
		if strings.Contains(o.Text, text) {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// waitSaid waits for said's signal.
func waitSaid(t *testing.T, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatal("the cell did not start within 30 s")
	}
}

package guest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
)

func TestCommand(t *testing.T) {
	t.Parallel()
	g := startGuest(t, Options{})
	ctx := context.Background()
	// Configure is not needed for commands, but its Env and caps apply when given. Use a
	// config without a kernel start: write it directly.
	cfg := withDefaults(guestproto.Config{Env: map[string]string{"FROM_CONFIG": "cfg", "BOTH": "cfg"}, MaxOutputBytes: 1000})
	setConfig(t, g, cfg)
	os.Mkdir(filepath.Join(g.dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(g.dir, "sub", "here.txt"), nil, 0o644)

	tests := []struct {
		name  string
		req   api.CommandRequest
		check func(t *testing.T, r *api.CommandResult, el time.Duration)
	}{
		{"ok", api.CommandRequest{Cmd: []string{"echo", "hello"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Status != api.StatusOK || r.ExitCode != 0 || r.Stdout != "hello\n" || r.Stderr != "" {
				t.Errorf("got %+v", r)
			}
		}},
		{"exit code", api.CommandRequest{Cmd: []string{"sh", "-c", "echo oops >&2; exit 3"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Status != api.StatusError || r.ExitCode != 3 || r.Stderr != "oops\n" {
				t.Errorf("got %+v", r)
			}
		}},
		{"no shell", api.CommandRequest{Cmd: []string{"echo", "$HOME", ";", "ls"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Stdout != "$HOME ; ls\n" {
				t.Errorf("got %+v", r)
			}
		}},
		{"stdin", api.CommandRequest{Cmd: []string{"wc", "-c"}, Stdin: strings.Repeat("x", 200000)}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if strings.TrimSpace(r.Stdout) != "200000" {
				t.Errorf("got %+v", r)
			}
		}},
		{"stdin not read", api.CommandRequest{Cmd: []string{"true"}, Stdin: strings.Repeat("x", 1<<20)}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Status != api.StatusOK {
				t.Errorf("got %+v", r)
			}
		}},
		{"env", api.CommandRequest{Cmd: []string{"sh", "-c", "echo $FROM_CONFIG $BOTH $FROM_REQ"}, Env: map[string]string{"BOTH": "req", "FROM_REQ": "r"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Stdout != "cfg req r\n" {
				t.Errorf("got %+v", r)
			}
		}},
		{"cwd is the workspace", api.CommandRequest{Cmd: []string{"ls"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Stdout != "sub\n" {
				t.Errorf("got %+v", r)
			}
		}},
		{"cwd", api.CommandRequest{Cmd: []string{"ls"}, Cwd: "/mnt/data/sub"}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Stdout != "here.txt\n" {
				t.Errorf("got %+v", r)
			}
		}},
		{"not found", api.CommandRequest{Cmd: []string{"no-such-program-xyz"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Status != api.StatusError || r.ExitCode != -1 || r.Message != "program not found: no-such-program-xyz" {
				t.Errorf("got %+v", r)
			}
		}},
		{"not found by path", api.CommandRequest{Cmd: []string{"./nope.sh"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Status != api.StatusError || r.ExitCode != -1 || !strings.Contains(r.Message, "program not found") {
				t.Errorf("got %+v", r)
			}
		}},
		{"not executable", api.CommandRequest{Cmd: []string{"./sub/here.txt"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Status != api.StatusError || r.ExitCode != -1 || !strings.Contains(r.Message, "permission denied") {
				t.Errorf("got %+v", r)
			}
		}},
		{"timeout kills the group", api.CommandRequest{Cmd: []string{"sh", "-c", "sleep 30 & sleep 30"}, TimeoutS: 0.5}, func(t *testing.T, r *api.CommandResult, el time.Duration) {
			if r.Status != api.StatusTimeout || el > 3*time.Second || !strings.Contains(r.Message, "time limit") {
				t.Errorf("after %v: %+v", el, r)
			}
		}},
		{"background child does not hold the answer", api.CommandRequest{Cmd: []string{"sh", "-c", "sleep 30 & echo started"}}, func(t *testing.T, r *api.CommandResult, el time.Duration) {
			if r.Status != api.StatusOK || r.Stdout != "started\n" || el > 2*time.Second {
				t.Errorf("after %v: %+v", el, r)
			}
		}},
		{"escaped child does not hold the answer", api.CommandRequest{Cmd: []string{"sh", "-c", "setsid sleep 30 & echo started"}}, func(t *testing.T, r *api.CommandResult, el time.Duration) {
			if r.Status != api.StatusOK || el > 2*time.Second {
				t.Errorf("after %v: %+v", el, r)
			}
		}},
		{"killed by a signal", api.CommandRequest{Cmd: []string{"sh", "-c", "kill -SEGV $$"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if r.Status != api.StatusError || r.ExitCode != 128+11 || !strings.Contains(r.Message, "SIGSEGV") {
				t.Errorf("got %+v", r)
			}
		}},
		{"output capped", api.CommandRequest{Cmd: []string{"sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x; echo done >&2"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			if !r.Truncated || len(r.Stdout) != 1000 || r.Stderr != "done\n" || !strings.Contains(r.Message, "truncated") {
				t.Errorf("truncated=%v stdout=%d stderr=%q message=%q", r.Truncated, len(r.Stdout), r.Stderr, r.Message)
			}
		}},
		{"file changes", api.CommandRequest{Cmd: []string{"sh", "-c", "echo hi > made.txt; rm sub/here.txt"}}, func(t *testing.T, r *api.CommandResult, _ time.Duration) {
			want := []api.FileChange{{Path: "/mnt/data/made.txt", Size: 3, Change: api.ChangeCreated},
				{Path: "/mnt/data/sub/here.txt", Change: api.ChangeDeleted}}
			if !equalChanges(r.Files, want) {
				t.Errorf("files %+v, want %+v", r.Files, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.req.TimeoutS == 0 {
				tt.req.TimeoutS = 10
			}
			start := time.Now()
			r, err := g.Command(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r, time.Since(start))
		})
	}

	for _, req := range []api.CommandRequest{{}, {Cmd: []string{""}}, {Cmd: []string{"echo", "a\x00b"}}} {
		if _, err := g.Command(ctx, req); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("command %q: %v, want invalid_argument", req.Cmd, err)
		}
	}
}

// setConfig gives a guest a configuration without starting a kernel (commands only).
func setConfig(t *testing.T, g *guestT, cfg guestproto.Config) {
	t.Helper()
	s := serverOf(t, g)
	s.mu.Lock()
	s.cfg = &cfg
	s.mu.Unlock()
}

func TestCommandOOM(t *testing.T) {
	t.Parallel()
	cg := t.TempDir()
	events := filepath.Join(cg, "memory.events")
	os.WriteFile(events, []byte("oom 0\noom_kill 0\n"), 0o644)
	g := startGuest(t, Options{Cgroup: cg})
	setConfig(t, g, withDefaults(guestproto.Config{MemoryMB: 64}))
	ctx := context.Background()
	// The kernel's OOM killer, faked: the counter goes up and the process dies of SIGKILL.
	r, err := g.Command(ctx, api.CommandRequest{Cmd: []string{"sh", "-c", "printf 'oom 1\\noom_kill 1\\n' > " + events + "; kill -9 $$"}, TimeoutS: 5})
	if err != nil || r.Status != api.StatusOOM || r.ExitCode != 137 || !strings.Contains(r.Message, "limit 64 MiB") {
		t.Errorf("got %+v, %v", r, err)
	}
	// A SIGKILL without the counter moving is not an OOM.
	r, err = g.Command(ctx, api.CommandRequest{Cmd: []string{"sh", "-c", "kill -9 $$"}, TimeoutS: 5})
	if err != nil || r.Status != api.StatusError || r.ExitCode != 137 {
		t.Errorf("got %+v, %v", r, err)
	}
}

// streamCommand runs a streaming command and returns its result and the outputs in order.
func streamCommand(t *testing.T, g *guestT, req api.CommandRequest, each func(api.Output)) (*api.CommandResult, []api.Output) {
	t.Helper()
	if req.TimeoutS == 0 {
		req.TimeoutS = 20
	}
	var outs []api.Output
	r, err := g.CommandRun(context.Background(), "run-"+t.Name(), "", req, func(o api.Output) {
		outs = append(outs, o)
		if each != nil {
			each(o)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return r, outs
}

// joined concatenates the outputs of one stream, failing on a chunk that is not UTF-8.
func joined(t *testing.T, outs []api.Output, name string) string {
	t.Helper()
	var b strings.Builder
	for _, o := range outs {
		if o.Type != api.OutputStream || (o.Name != "stdout" && o.Name != "stderr") {
			t.Errorf("output %+v", o)
		}
		if !utf8.ValidString(o.Text) {
			t.Errorf("a chunk is not valid UTF-8: %q", o.Text)
		}
		if o.Name == name {
			b.WriteString(o.Text)
		}
	}
	return b.String()
}

func TestCommandStream(t *testing.T) {
	t.Parallel()
	g := startGuest(t, Options{})
	setConfig(t, g, withDefaults(guestproto.Config{MaxOutputBytes: 1 << 20}))

	t.Run("streamed while it runs", func(t *testing.T) {
		// The program waits for a file that the test makes only when its first line
		// arrived: it ends only if that line was sent while it ran.
		goFile := filepath.Join(g.dir, "go")
		r, outs := streamCommand(t, g, api.CommandRequest{Cmd: []string{"sh", "-c",
			"echo first; echo warn >&2; while [ ! -e go ]; do sleep 0.01; done; echo second"}},
			func(o api.Output) {
				if o.Text == "first\n" {
					os.WriteFile(goFile, nil, 0o644)
				}
			})
		if r.Status != api.StatusOK || r.Stdout != "" || r.Stderr != "" {
			t.Errorf("result %+v: the text went as outputs, not in the result", r)
		}
		if got := joined(t, outs, "stdout"); got != "first\nsecond\n" {
			t.Errorf("stdout %q", got)
		}
		if got := joined(t, outs, "stderr"); got != "warn\n" {
			t.Errorf("stderr %q", got)
		}
	})
	t.Run("utf-8 cut across reads", func(t *testing.T) {
		// 'é' is two bytes; the program writes them apart, and many in one go.
		r, outs := streamCommand(t, g, api.CommandRequest{Cmd: []string{"sh", "-c",
			`printf '\303'; sleep 0.2; printf '\251\n'; head -c 300000 /dev/zero | sed 's/\x0/é/g'; printf '\377end'`}}, nil)
		want := "é\n" + strings.Repeat("é", 300000) + "\ufffdend"
		if got := joined(t, outs, "stdout"); r.Status != api.StatusOK || got != want {
			t.Errorf("status %s, stdout of %d bytes, want %d (first %.20q)", r.Status, len(got), len(want), got)
		}
	})
	t.Run("capped", func(t *testing.T) {
		setConfig(t, g, withDefaults(guestproto.Config{MaxOutputBytes: 1001}))
		defer setConfig(t, g, withDefaults(guestproto.Config{MaxOutputBytes: 1 << 20}))
		r, outs := streamCommand(t, g, api.CommandRequest{Cmd: []string{"sh", "-c",
			"head -c 5000000 /dev/zero | sed 's/\\x0/é/g'; echo done >&2"}}, nil)
		got := joined(t, outs, "stdout")
		if !r.Truncated || got != strings.Repeat("é", 500) || joined(t, outs, "stderr") != "done\n" ||
			!strings.Contains(r.Message, "of stdout not shown (limit 1001 bytes per stream)") {
			t.Errorf("truncated=%v stdout=%d bytes message=%q", r.Truncated, len(got), r.Message)
		}
	})
	t.Run("killed at its timeout", func(t *testing.T) {
		r, outs := streamCommand(t, g, api.CommandRequest{Cmd: []string{"sh", "-c", "echo started; sleep 30"}, TimeoutS: 0.5}, nil)
		if r.Status != api.StatusTimeout || joined(t, outs, "stdout") != "started\n" {
			t.Errorf("result %+v, outputs %+v", r, outs)
		}
	})
}

// TestCommandsBesideCell: commands run while a cell runs, and beside each other: each
// waits for what another makes, so it finishes only if they ran at the same time.
func TestCommandsBesideCell(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	ctx := context.Background()
	cell := make(chan *api.ExecuteResult, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		r, err := g.Execute(ctx, api.ExecuteRequest{Code: "import os, time\nprint('waiting', flush=True)\n" +
			"while not os.path.exists('from-command'): time.sleep(0.01)\nprint('seen')", TimeoutS: 30},
			func(api.Output) { once.Do(func() { close(started) }) })
		if err != nil {
			t.Error(err)
		}
		cell <- r
	}()
	<-started
	wait := func(file string) []string {
		return []string{"sh", "-c", "while [ ! -e " + file + " ]; do sleep 0.01; done; echo " + file}
	}
	both := make(chan *api.CommandResult, 1)
	go func() {
		r, err := g.Command(ctx, api.CommandRequest{Cmd: wait("b"), TimeoutS: 20})
		if err != nil {
			t.Error(err)
		}
		both <- r
	}()
	r, err := g.Command(ctx, api.CommandRequest{Cmd: []string{"sh", "-c", "touch b; echo a"}, TimeoutS: 20})
	if err != nil || r.Status != api.StatusOK {
		t.Fatalf("a command while a cell runs: %+v, %v", r, err)
	}
	if r := <-both; r == nil || r.Status != api.StatusOK || r.Stdout != "b\n" {
		t.Errorf("a command that waited for another: %+v", r)
	}
	if _, err := g.Command(ctx, api.CommandRequest{Cmd: []string{"touch", "from-command"}, TimeoutS: 20}); err != nil {
		t.Fatal(err)
	}
	if r := <-cell; r == nil || r.Status != api.StatusOK || text(r, "stdout") != "waiting\nseen\n" {
		t.Errorf("the cell: %+v", r)
	}
}

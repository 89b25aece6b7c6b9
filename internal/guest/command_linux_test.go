package guest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

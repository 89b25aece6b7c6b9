package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/local"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/workspace"
)

// newManager runs a Manager on the local-unsafe backend with the real guest and IPython:
// fast, and enough for what this package decides (isolation is tested on runc elsewhere).
func newManager(t *testing.T, mod func(*config.Config)) *Manager {
	t.Helper()
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.Preimport = ""
	cfg.PoolSize = 0
	if mod != nil {
		mod(&cfg)
	}
	return startManager(t, cfg, localBackend(t), filepath.Join(cfg.StateDir, "workspaces"), nil)
}

var testLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// localBackend is the local-unsafe backend running the real guest.
func localBackend(t *testing.T) *local.Backend {
	t.Helper()
	testbin.NeedIPython(t)
	b, err := local.New(local.Config{GuestBinary: testbin.Cellbox(t), Logger: testLog})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startManager starts a Manager on b with its workspaces in wsDir, and shuts it down when
// the test ends (Shutdown again is harmless).
func startManager(t *testing.T, cfg config.Config, b sandbox.Backend, wsDir string, reg prometheus.Registerer) *Manager {
	t.Helper()
	store, err := workspace.NewStore(workspace.StoreConfig{Dir: wsDir, Quota: "none", Logger: testLog})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(context.Background(), cfg, b, store, testLog, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m
}

func TestLimits(t *testing.T) {
	m := &Manager{cfg: config.Default()}
	m.cfg.MaxMemoryMB = 4096
	tests := []struct {
		name string
		in   *api.Limits
		want api.Limits
		bad  string
	}{
		{name: "defaults", in: nil, want: m.defaults()},
		{name: "some", in: &api.Limits{MemoryMB: 512}, want: api.Limits{MemoryMB: 512, CPUs: 1, Pids: 256, DiskMB: 1024}},
		{name: "above max", in: &api.Limits{MemoryMB: 5000}, bad: "memory_mb 5000 is above"},
		{name: "negative", in: &api.Limits{Pids: -1}, bad: "pids must not be negative"},
		{name: "tiny memory", in: &api.Limits{MemoryMB: 8}, bad: "at least 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := m.limits(tt.in)
			if tt.bad != "" {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.bad) {
					t.Fatalf("err = %v, want invalid argument mentioning %q", err, tt.bad)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("limits = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestCheckEnv(t *testing.T) {
	for _, bad := range []map[string]string{{"": "x"}, {"1A": "x"}, {"A=B": "x"}, {"A": "x\x00y"}, {"A-B": "x"}} {
		if err := checkEnv(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("checkEnv(%q) = %v, want invalid argument", bad, err)
		}
	}
	if err := checkEnv(map[string]string{"MY_VAR_1": "any value = ok"}); err != nil {
		t.Errorf("valid env refused: %v", err)
	}
}

func TestMaxSessions(t *testing.T) {
	m := newManager(t, func(c *config.Config) { c.MaxSessions = 2 })
	ctx := context.Background()
	for range 2 {
		if _, err := m.Create(ctx, api.CreateSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.Create(ctx, api.CreateSessionRequest{})
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("third session: %v, want resource exhausted", err)
	}
	if _, err := m.OneShot(ctx, api.OneShotRequest{Code: "1"}, nil); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("one-shot past the limit: %v, want resource exhausted", err)
	}
}

func TestIdleSessionEnds(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{IdleTimeoutS: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !testbin.Eventually(20*time.Second, func() bool { _, err := m.Get(ctx, s.ID); return errors.Is(err, errdefs.ErrNotFound) }) {
		t.Fatal("a session idle past its timeout was not ended")
	}
}

// TestAttackIdleTimeout: an idle timeout that overflows a time.Duration is refused, not
// taken for a negative one that ends the session at once.
func TestAttackIdleTimeout(t *testing.T) {
	m := newManager(t, nil)
	for _, secs := range []int{1 << 62, 9223372037, 86401} {
		_, err := m.Create(context.Background(), api.CreateSessionRequest{IdleTimeoutS: secs})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "above this server's maximum 86400") {
			t.Errorf("idle_timeout_s %d: %v, want invalid argument naming the maximum", secs, err)
		}
	}
}

// TestOneExecutionAtATime: concurrent executions in one session run one after the other.
func TestOneExecutionAtATime(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "import time\nlog = []"}, nil)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "log.append(('start', time.time())); time.sleep(0.3); log.append(('end', time.time()))"}, nil)
			if err != nil || r.Status != api.StatusOK {
				t.Errorf("cell %d: %v %+v", i, err, r)
			}
		}()
	}
	wg.Wait()
	r, _ := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "print(''.join(k[0] for k, _ in log))"}, nil)
	if got := r.Outputs[0].Text; got != "sesese\n" {
		t.Fatalf("cells interleaved: %q", got)
	}
}

// TestSandboxDeathIsRecovered: when the whole guest dies, the execution reports crashed,
// a new sandbox takes over the same workspace and the session goes on.
func TestSandboxDeathIsRecovered(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "open('kept.txt', 'w').write('k')"}, nil)
	sess, _ := m.lookup(ctx, s.ID)
	pid := m.current(sess).guest.Hello().PID
	ws := m.current(sess).ws
	var kill sync.Once // once the cell runs (it says so)
	r, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "import time; print('running', flush=True); time.sleep(30)"}, func(o api.Output) {
		if strings.Contains(o.Text, "running") {
			kill.Do(func() { syscall.Kill(pid, syscall.SIGKILL) })
		}
	})
	if err != nil || r.Status != api.StatusCrashed || !strings.Contains(r.Message, "files in /mnt/data are kept") {
		t.Fatalf("execute while the guest died: %v %+v", err, r)
	}
	r, err = m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "print(open('kept.txt').read())"}, nil)
	if err != nil || r.Status != api.StatusOK || r.Outputs[0].Text != "k\n" {
		t.Fatalf("after recovery: %v %+v", err, r)
	}
	if _, err := os.Stat(filepath.Join(ws, "kept.txt")); err != nil {
		t.Fatalf("workspace lost: %v", err)
	}
}

// TestShutdownInterrupts: Shutdown interrupts the running cell, whose Execute returns
// interrupted, and an execution queued behind it never starts.
func TestShutdownInterrupts(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := m.lookup(ctx, s.ID)
	ws := m.current(sess).ws
	type answer struct {
		r   *api.ExecuteResult
		err error
	}
	running, queued := make(chan answer, 1), make(chan answer, 1)
	go func() {
		r, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "import time; time.sleep(60)"}, nil)
		running <- answer{r, err}
	}()
	if !testbin.Eventually(20*time.Second, func() bool { v, _ := m.Get(ctx, s.ID); return v != nil && v.State == "busy" }) {
		t.Fatal("session not busy")
	}
	go func() {
		r, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "open('queued.txt', 'w')"}, nil)
		queued <- answer{r, err}
	}()
	// Until it waits for the turn, admitted: a run that Shutdown knows of.
	testbin.WaitFor(t, 20*time.Second, "the second execution to queue", func() error {
		if n := sess.turn.queued(); n != 1 {
			return fmt.Errorf("%d runs waiting for the turn", n)
		}
		return nil
	})
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-running; a.err != nil || a.r.Status != api.StatusInterrupted {
		t.Errorf("running cell: %v %+v, want interrupted", a.err, a.r)
	}
	if a := <-queued; a.err == nil {
		t.Errorf("queued cell ran: %+v", a.r)
	}
	if _, err := os.Stat(filepath.Join(ws, "queued.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("queued cell ran: %v", err)
	}
}

// TestNewSweeps checks that a Manager deletes workspaces past retention when it starts, not
// only minutes later: a short-lived server (cellbox run) would otherwise never sweep.
func TestNewSweeps(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := workspace.NewStore(workspace.StoreConfig{Dir: dir, Quota: "none"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old", "new"} {
		if _, err := store.Create(ctx, id, 0); err != nil {
			t.Fatal(err)
		}
		if err := store.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// Retention counts from the marker's mtime (see workspace.Store).
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "old.released"), past, past); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	backend, err := local.New(local.Config{GuestBinary: exe}) // starts nothing: no pool
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize = 0
	cfg.Retention = time.Hour
	m, err := New(ctx, cfg, backend, store, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(ctx)
	if _, err := os.Stat(filepath.Join(dir, "old")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("workspace past retention not swept at start: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); err != nil {
		t.Errorf("workspace within retention: %v", err)
	}
}

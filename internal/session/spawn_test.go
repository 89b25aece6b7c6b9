package session

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

// waitFor runs a shell loop that ends once file exists in the workspace, then runs then.
func waitFor(file, then string) []string {
	return []string{"sh", "-c", "touch started-" + file + "; while [ ! -e " + file + " ]; do sleep 0.01; done; " + then}
}

// spawnAsync runs Spawn in the background; its answer comes on the channel.
func spawnAsync(t *testing.T, m *Manager, ctx context.Context, id string, req api.CommandRequest, onOutput func(api.Output)) <-chan *api.CommandResult {
	t.Helper()
	done := make(chan *api.CommandResult, 1)
	go func() {
		r, err := m.Spawn(ctx, id, "", req, onOutput)
		if err != nil {
			t.Errorf("spawn %q: %v", req.Cmd, err)
		}
		done <- r
	}()
	return done
}

// workspaceOf is the host folder of a session's workspace.
func workspaceOf(t *testing.T, m *Manager, id string) string {
	t.Helper()
	s, err := m.lookup(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return m.current(s).ws
}

// waitExists waits until the program made its file: it is running.
func waitExists(t *testing.T, p string) {
	t.Helper()
	if !testbin.Eventually(20*time.Second, func() bool { return exists(p) }) {
		t.Fatalf("%s never appeared", filepath.Base(p))
	}
}

// TestSpawnBesideExecution: spawned programs run while a cell holds the session's turn and
// beside each other; each waits for what another makes, so it ends only if they ran at once.
func TestSpawnBesideExecution(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cell := startCell(t, m, ctx, s.ID, "import os, time\nprint('waiting', flush=True)\n"+
		"while not os.path.exists('from-spawn'): time.sleep(0.01)\nprint('seen')")
	other := spawnAsync(t, m, ctx, s.ID, api.CommandRequest{Cmd: waitFor("b", "echo b")}, nil)
	var mu sync.Mutex
	var streamed []string
	r, err := m.Spawn(ctx, s.ID, "", api.CommandRequest{Cmd: []string{"sh", "-c", "touch b; echo a; echo err >&2"}},
		func(o api.Output) {
			mu.Lock()
			streamed = append(streamed, o.Name+":"+o.Text)
			mu.Unlock()
		})
	if err != nil || r.Status != api.StatusOK || r.Stdout != "" {
		t.Fatalf("spawn while a cell runs: %+v, %v", r, err)
	}
	if got := strings.Join(streamed, ","); got != "stdout:a\n,stderr:err\n" && got != "stderr:err\n,stdout:a\n" {
		t.Errorf("streamed %q", got)
	}
	if r := <-other; r == nil || r.Status != api.StatusOK || r.Stdout != "b\n" {
		t.Errorf("the spawn that waited for another: %+v", r)
	}
	if r, err := m.Spawn(ctx, s.ID, "", api.CommandRequest{Cmd: []string{"touch", "from-spawn"}}, nil); err != nil || r.Status != api.StatusOK {
		t.Fatalf("spawn: %+v, %v", r, err)
	}
	if r := <-cell; r == nil || r.Status != api.StatusOK {
		t.Errorf("the cell: %+v", r)
	}
}

// TestSpawnLifetime: Interrupt and Restart leave a spawned program alone; its caller going
// away or its timeout kills it with what it started; the idle reaper spares its session;
// Shutdown ends it.
func TestSpawnLifetime(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ws := workspaceOf(t, m, s.ID)

	done := spawnAsync(t, m, ctx, s.ID, api.CommandRequest{Cmd: waitFor("stop", "echo survived")}, nil)
	waitExists(t, filepath.Join(ws, "started-stop"))
	if err := m.Interrupt(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Spawn(ctx, s.ID, "", api.CommandRequest{Cmd: []string{"touch", "stop"}}, nil); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r == nil || r.Status != api.StatusOK || r.Stdout != "survived\n" {
		t.Errorf("a spawned program across Interrupt and Restart: %+v", r)
	}

	cctx, cancel := context.WithCancel(ctx)
	done = spawnAsync(t, m, cctx, s.ID, api.CommandRequest{Cmd: waitFor("never", "true")}, nil)
	waitExists(t, filepath.Join(ws, "started-never"))
	cancel()
	if r := <-done; r == nil || r.Status != api.StatusInterrupted {
		t.Errorf("a spawned program whose caller left: %+v", r)
	}
	r, err := m.Spawn(ctx, s.ID, "", api.CommandRequest{Cmd: []string{"sh", "-c", "sleep 3017 & sleep 3019"}, TimeoutS: 0.5}, nil)
	if err != nil || r.Status != api.StatusTimeout {
		t.Errorf("a spawned program past its timeout: %+v, %v", r, err)
	}
	// This backend shares the host's processes, other tests' among them: look for this
	// test's programs by their own command lines.
	ps, err := m.Spawn(ctx, s.ID, "", api.CommandRequest{Cmd: []string{"ps", "-eo", "args"}}, nil)
	if err != nil || strings.Contains(ps.Stdout, "started-never") || strings.Contains(ps.Stdout, "sleep 3017") || strings.Contains(ps.Stdout, "sleep 3019") {
		t.Errorf("killed programs live on: %v\n%s", err, ps.Stdout)
	}

	done = spawnAsync(t, m, ctx, s.ID, api.CommandRequest{Cmd: waitFor("shutdown", "true")}, nil)
	waitExists(t, filepath.Join(ws, "started-shutdown"))
	// A session where a program runs is not idle, however long ago it was last active.
	sess, _ := m.lookup(ctx, s.ID)
	sess.mu.Lock()
	sess.lastActive = time.Now().Add(-time.Hour)
	sess.mu.Unlock()
	m.endIdle(ctx, time.Now())
	if _, err := m.Get(ctx, s.ID); err != nil {
		t.Fatalf("the reaper ended a session with a spawned program: %v", err)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := m.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r == nil || r.Status != api.StatusInterrupted {
		t.Errorf("a spawned program at shutdown: %+v", r)
	}
}

// TestAttackSpawn: past 16 programs at once, past the tenant's cap, with a cwd outside the
// workspace or a timeout above the server's: refused.
func TestAttackSpawn(t *testing.T) {
	m := newManager(t, func(c *config.Config) { c.TenantMaxExecutions = maxSpawns + 2 })
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ws := workspaceOf(t, m, s.ID)
	for _, req := range []api.CommandRequest{
		{Cmd: []string{"ls"}, Cwd: "/etc"},
		{Cmd: []string{"ls"}, Cwd: "../.."},
		{Cmd: []string{"ls"}, TimeoutS: 1e9},
		{Cmd: []string{"ls"}, Env: map[string]string{"A": "a\x00b"}},
		{Cmd: []string{"ls", "a\x00b"}},
	} {
		if _, err := m.Spawn(ctx, s.ID, "", req, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("spawn %+v: %v, want invalid argument", req, err)
		}
	}
	if r, err := m.Spawn(ctx, s.ID, "", api.CommandRequest{Cmd: []string{"pwd"}}, nil); err != nil || r.Stdout != "/mnt/data\n" && r.Stdout != ws+"\n" {
		t.Errorf("spawn pwd: %+v, %v", r, err)
	}

	var running []<-chan *api.CommandResult
	for range maxSpawns {
		running = append(running, spawnAsync(t, m, ctx, s.ID, api.CommandRequest{Cmd: waitFor("release", "true")}, nil))
	}
	// Every place is taken once every program started.
	testbin.WaitFor(t, 20*time.Second, "every spawn to run", func() error {
		sess, _ := m.lookup(ctx, s.ID)
		n := sess.turn.spawning()
		if n != maxSpawns {
			return fmt.Errorf("%d spawns running, want %d", n, maxSpawns)
		}
		return nil
	})
	_, err = m.Spawn(ctx, s.ID, "", api.CommandRequest{Cmd: []string{"true"}}, nil)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "16 programs") {
		t.Errorf("spawn %d: %v, want resource exhausted", maxSpawns+1, err)
	}
	// The session's turn is free: an execution runs; and it takes the tenant's last run.
	if r, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "open('release', 'w')"}, nil); err != nil || r.Status != api.StatusOK {
		t.Fatalf("execute beside 16 programs: %+v, %v", r, err)
	}
	for _, done := range running {
		if r := <-done; r == nil || r.Status != api.StatusOK {
			t.Errorf("a spawned program: %+v", r)
		}
	}

	// Spawned programs count against the tenant's cap.
	m2 := newManager(t, func(c *config.Config) { c.TenantMaxExecutions = 1 })
	s2, err := m2.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	done := spawnAsync(t, m2, ctx, s2.ID, api.CommandRequest{Cmd: waitFor("go", "true")}, nil)
	waitExists(t, filepath.Join(workspaceOf(t, m2, s2.ID), "started-go"))
	if _, err := m2.Execute(ctx, s2.ID, api.ExecuteRequest{Code: "1"}, nil); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("an execution beside a spawn past the tenant's cap: %v, want resource exhausted", err)
	}
	if err := m2.PutFiles(ctx, s2.ID, []api.InputFile{{Path: "go"}}); err != nil {
		t.Fatal(err)
	}
	<-done
}

// TestSpawnSandboxDeath: when the guest dies under a spawned program and a cell at once,
// both report crashed, and the session goes on in one new sandbox.
func TestSpawnSandboxDeath(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "open('kept.txt', 'w').write('k')"}, nil)
	sess, _ := m.lookup(ctx, s.ID)
	old := m.current(sess)
	cell := startCell(t, m, ctx, s.ID, "import time\nprint('go', flush=True)\ntime.sleep(60)")
	spawned := spawnAsync(t, m, ctx, s.ID, api.CommandRequest{Cmd: waitFor("never", "true")}, nil)
	waitExists(t, filepath.Join(old.ws, "started-never"))
	syscall.Kill(old.guest.Hello().PID, syscall.SIGKILL)
	if r := <-spawned; r == nil || r.Status != api.StatusCrashed {
		t.Errorf("a spawned program when the sandbox died: %+v", r)
	}
	if r := <-cell; r == nil || r.Status != api.StatusCrashed {
		t.Errorf("a cell when the sandbox died: %+v", r)
	}
	if b := m.current(sess); b == old || !b.alive() {
		t.Fatal("the session has no new sandbox")
	}
	r, err := m.Spawn(ctx, s.ID, "", api.CommandRequest{Cmd: []string{"cat", "kept.txt"}}, nil)
	if err != nil || r.Status != api.StatusOK || r.Stdout != "k" {
		t.Errorf("after the crash: %+v, %v", r, err)
	}
}

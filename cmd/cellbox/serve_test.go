package main

// cellbox serve as an operator runs it: the built binary as a subprocess, on the runc backend.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testserver"
)

// served is a `cellbox serve` process.
// served is a `cellbox serve` process of a test.
type served = testserver.Served

// serve starts `cellbox serve` on a free port and the state dir and waits until it answers
// /healthz (testserver.Serve), skipping when this machine cannot run runc.
func serve(t testing.TB, state string, args ...string) *served {
	t.Helper()
	needRunc(t)
	return testserver.Serve(t, state, args...)
}

// TestServeShutdown sends SIGTERM to a server that ends its sessions on exit, while a cell
// runs: the cell is interrupted and its result reaches the client, the server exits 0,
// nothing of its sandboxes is left running or mounted, and the workspace stays on disk.
func TestServeShutdown(t *testing.T) {
	needRunc(t)
	state := t.TempDir()
	srv := serve(t, state, "--pool-size", "1", "--log-level", "info")
	c := client.New(srv.URL)
	ctx := t.Context()

	sess, err := c.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Execute(ctx, sess.ID, api.ExecuteRequest{Code: "open('kept.txt', 'w').write('kept')"})
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("write a file: %+v, %v", res, err)
	}
	type answer struct {
		res *api.ExecuteResult
		err error
	}
	running := make(chan answer, 1)
	go func() {
		res, err := c.Execute(context.Background(), sess.ID, api.ExecuteRequest{Code: "import time; time.sleep(600)", TimeoutS: 900})
		running <- answer{res, err}
	}()
	// Busy, and the pool refilled: every sandbox of the server is running.
	testbin.WaitFor(t, time.Minute, "the session busy and the pool refilled", func() error {
		s, err := c.GetSession(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		h, err := c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.State != "busy" || h.Pool != 1 {
			return fmt.Errorf("session %s, pool %d", s.State, h.Pool)
		}
		return nil
	})
	runcRoot := filepath.Join(state, "runc", "runtime") // runc.Config.StateDir is <state>/runc
	ids := runcList(t, runcRoot)
	if len(ids) != 2 {
		t.Fatalf("sandboxes %v; want the session's and the pool's", ids)
	}

	if err := srv.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-running:
		if a.err != nil || a.res.Status != api.StatusInterrupted {
			t.Errorf("running cell's answer: %+v, %v; want status %s", a.res, a.err, api.StatusInterrupted)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no answer to the running cell\n%s", srv.Output())
	}
	select {
	case <-srv.Exited:
		if srv.Err != nil {
			t.Errorf("cellbox serve: %v, want exit 0\n%s", srv.Err, srv.Output())
		}
	case <-time.After(40 * time.Second): // its own shutdown gives up after 30 s
		t.Fatalf("cellbox serve still runs 40 s after SIGTERM\n%s", srv.Output())
	}
	if !strings.Contains(srv.Output(), "msg=stopped") {
		t.Errorf("log lacks the end of shutdown:\n%s", srv.Output())
	}

	if left := runcList(t, runcRoot); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
	for _, pid := range procsInCgroups(ids) {
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		cgroup, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		t.Errorf("process %d left in a sandbox's cgroup: %.200s %s", pid, status, cgroup)
	}
	resolved, err := filepath.EvalSymlinks(state) // mountinfo shows real paths
	if err != nil {
		t.Fatal(err)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && strings.HasPrefix(f[4], resolved+"/") {
			t.Errorf("still mounted: %s", f[4])
		}
	}
	// The workspace is kept: an ext4 image with quotas (read without mounting it), a
	// folder without.
	ws := filepath.Join(state, "workspaces", sess.ID)
	var kept []byte
	if _, err := os.Stat(ws + ".img"); err == nil {
		kept, err = exec.Command("debugfs", "-R", "cat /kept.txt", ws+".img").Output()
		if err != nil {
			t.Errorf("debugfs: %v", err)
		}
	} else if strings.Contains(srv.Output(), "workspace disk quotas off") {
		kept, _ = os.ReadFile(filepath.Join(ws, "kept.txt"))
	} else {
		t.Errorf("workspace image: %v", err)
	}
	if string(kept) != "kept" {
		t.Errorf("kept.txt in the kept workspace: %q", kept)
	}
}

// runcList returns the ids of the containers under a runc root.
func runcList(t *testing.T, root string) []string {
	t.Helper()
	out, err := exec.Command("runc", "--root", root, "list", "-q").Output()
	if err != nil {
		t.Fatalf("runc list: %v", err)
	}
	return strings.Fields(string(out))
}

// procsInCgroups returns the processes whose cgroup path names one of ids.
func procsInCgroups(ids []string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup"))
		if err != nil {
			continue // ended meanwhile
		}
		for _, id := range ids {
			if strings.Contains(string(b), id) {
				var pid int
				fmt.Sscan(filepath.Base(d), &pid)
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// TestServeStateDirInUse starts a second server on a state dir in use: it fails at once,
// naming the first; a `cellbox run` on the same --state-dir still works (its embedded server
// takes a slot of its own).
func TestServeStateDirInUse(t *testing.T) {
	needRunc(t)
	state := t.TempDir()
	first := serve(t, state, "--pool-size", "0", "--log-level", "warn")

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	second := exec.CommandContext(ctx, testbin.Cellbox(t), "serve", "--addr", "127.0.0.1:0", "--state-dir", state)
	out, err := second.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("second serve: %v, want exit 1\n%s", err, out)
	}
	want := fmt.Sprintf("cellbox serve: another cellbox server uses state dir %s (pid %d)\n", state, first.Cmd.Process.Pid)
	if string(out) != want {
		t.Errorf("second serve says %q, want %q", out, want)
	}

	r := cellbox(t, "", "run", "--state-dir", state, "-c", "print(2)")
	r.want(t, exitOK)
	if r.stdout != "2\n" {
		t.Errorf("run next to serve: stdout %q, stderr %s", r.stdout, r.stderr)
	}
	if _, err := client.New(first.URL).Health(t.Context()); err != nil {
		t.Errorf("first server after the run: %v", err)
	}
}

// TestServeRestart stops the server with SIGTERM, then with kill -9, and starts it again
// on the same state dir each time: live sessions answer under their ids with their
// variables, files, metadata and deadline. Meanwhile one session's idle time runs out (it
// ends at start), another's deadline passes (it ends at start too) and another's sandbox
// dies (it is replaced: files kept, variables lost, and the next cell says so). A last
// server that ends sessions on exit leaves nothing behind.
func TestServeRestart(t *testing.T) {
	needRunc(t)
	state := t.TempDir()
	keep := "--end-sessions-on-exit=false"
	srv := serve(t, state, keep, "--pool-size", "1", "--log-level", "info")
	c := client.New(srv.URL)
	ctx := t.Context()
	run := func(c *client.Client, id, code string) *api.ExecuteResult {
		t.Helper()
		res, err := c.Execute(ctx, id, api.ExecuteRequest{Code: code})
		if err != nil {
			t.Fatalf("execute %q in %s: %v", code, id, err)
		}
		return res
	}
	stdout := func(r *api.ExecuteResult) string {
		var b strings.Builder
		for _, o := range r.Outputs {
			if o.Type == api.OutputStream && o.Name == "stdout" {
				b.WriteString(o.Text)
			}
		}
		return b.String()
	}
	var ids [4]string // live, idle, dies, expires
	var liveAtStart *api.Session
	for i := range ids {
		req := api.CreateSessionRequest{Env: map[string]string{"WHO": fmt.Sprint(i)}}
		if i == 0 || i == 3 {
			req.LifetimeS, req.Metadata = 3600, map[string]string{"who": fmt.Sprint(i), "ünï": "cødé"}
		}
		s, err := c.CreateSession(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			liveAtStart = s
		}
		ids[i] = s.ID
		if r := run(c, s.ID, "x = 42\nopen('kept.txt', 'w').write('kept')"); r.Status != api.StatusOK {
			t.Fatalf("session %d: %+v", i, r)
		}
	}
	live, idle, dies, expires := ids[0], ids[1], ids[2], ids[3]
	sameLive := func(c *client.Client) {
		t.Helper()
		s, err := c.GetSession(ctx, live)
		if err != nil || !maps.Equal(s.Metadata, liveAtStart.Metadata) || s.ExpiresAt == nil || !s.ExpiresAt.Equal(*liveAtStart.ExpiresAt) {
			t.Errorf("live session after a restart: %+v, %v; want metadata %v and expires_at %v", s, err, liveAtStart.Metadata, liveAtStart.ExpiresAt)
		}
	}
	runcRoot := filepath.Join(state, "runc", "runtime")

	stopped := func(srv *served, how syscall.Signal) {
		t.Helper()
		srv.Cmd.Process.Signal(how)
		select {
		case <-srv.Exited:
		case <-time.After(time.Minute):
			t.Fatalf("cellbox serve still runs a minute after %v\n%s", how, srv.Output())
		}
		if how == syscall.SIGTERM && srv.Err != nil {
			t.Fatalf("cellbox serve: %v, want exit 0\n%s", srv.Err, srv.Output())
		}
	}
	stopped(srv, syscall.SIGTERM)
	left := runcList(t, runcRoot)
	for _, id := range ids {
		if !slices.Contains(left, id) {
			t.Errorf("session %s's sandbox did not outlive the server: %v", id, left)
		}
	}
	if len(left) != 4 {
		t.Errorf("sandboxes after SIGTERM: %v, want the 4 sessions' (the pool's is stopped)", left)
	}

	// While no server runs: idle's time runs out, expires's deadline passes, dies's sandbox
	// dies.
	backdate := func(id, field string) {
		t.Helper()
		recPath := filepath.Join(state, "sessions", id+".json")
		rec, err := os.ReadFile(recPath)
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(recPath); fi.Mode().Perm() != 0o600 {
			t.Errorf("session record mode %v, want 0600", fi.Mode().Perm())
		}
		var m map[string]any
		if err := json.Unmarshal(rec, &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m[field]; !ok {
			t.Fatalf("the record of %s has no %s: %s", id, field, rec)
		}
		m[field] = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
		rec, _ = json.Marshal(m)
		if err := os.WriteFile(recPath, rec, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	backdate(idle, "last_active_at")
	backdate(expires, "expires_at")
	if out, err := exec.Command("runc", "--root", runcRoot, "kill", dies, "KILL").CombinedOutput(); err != nil {
		t.Fatalf("runc kill: %v %s", err, out)
	}

	srv = serve(t, state, keep, "--pool-size", "1", "--log-level", "info")
	c = client.New(srv.URL)
	if got := stdout(run(c, live, "print(x, open('kept.txt').read(), __import__('os').environ['WHO'])")); got != "42 kept 0\n" {
		t.Errorf("live session after SIGTERM and restart: %q, want 42 kept 0", got)
	}
	if _, err := c.GetSession(ctx, idle); !client.IsNotFound(err) {
		t.Errorf("session idle too long while the server was down: %v, want not found", err)
	}
	if _, err := c.GetSession(ctx, expires); !client.IsNotFound(err) {
		t.Errorf("session past its deadline while the server was down: %v, want not found", err)
	}
	if !strings.Contains(srv.Output(), "ending a session whose lifetime ran out while the server was down") {
		t.Errorf("the end of the session past its deadline is not logged:\n%s", srv.Output())
	}
	sameLive(c)
	r := run(c, dies, "print(open('kept.txt').read(), __import__('os').environ['WHO'])\nx")
	if r.Status != api.StatusError || stdout(r) != "kept 2\n" || len(r.Outputs) == 0 ||
		!strings.Contains(r.Outputs[0].Text, "was replaced: variables are lost, files in /mnt/data are kept") {
		t.Errorf("session whose sandbox died: %+v; want the notice, its file and env, and x undefined", r)
	}
	if r := run(c, dies, "print('again')"); len(r.Outputs) != 1 || stdout(r) != "again\n" {
		t.Errorf("the notice is told once: %+v", r.Outputs)
	}
	if !strings.Contains(srv.Output(), "attached=1 replaced=1 ended=0") {
		t.Errorf("the restart is not reported:\n%s", srv.Output())
	}

	// kill -9 while a cell runs; the next server interrupts it and keeps the state.
	started := make(chan struct{})
	running := make(chan struct{})
	go func() {
		defer close(running)
		var once sync.Once
		c.ExecuteStream(context.Background(), live, api.ExecuteRequest{Code: "y = 1\nprint('started', flush=True)\nimport time; time.sleep(600)", TimeoutS: 900},
			func(o api.Output) {
				if strings.Contains(o.Text, "started") {
					once.Do(func() { close(started) })
				}
			})
	}()
	select {
	case <-started:
	case <-running:
		t.Fatal("the cell ended before it printed")
	case <-time.After(time.Minute):
		t.Fatal("the cell does not run")
	}
	stopped(srv, syscall.SIGKILL)
	<-running
	srv = serve(t, state, keep, "--pool-size", "0", "--log-level", "info")
	c = client.New(srv.URL)
	if got := stdout(run(c, live, "print(x, y)")); got != "42 1\n" {
		t.Errorf("live session after kill -9 and restart: %q, want 42 1\n%s", got, srv.Output())
	}
	sameLive(c)
	list, err := c.ListSessions(ctx)
	if err != nil || len(list) != 2 {
		t.Errorf("sessions after the restarts: %+v, %v; want live and dies", list, err)
	}
	stopped(srv, syscall.SIGTERM)

	// A server that ends sessions on exit ends those it finds at start, and leaves nothing.
	srv = serve(t, state, "--pool-size", "0", "--log-level", "info")
	if list, err := client.New(srv.URL).ListSessions(ctx); err != nil || len(list) != 0 {
		t.Errorf("sessions on a server that ends them: %+v, %v; want none", list, err)
	}
	stopped(srv, syscall.SIGTERM)
	if left := runcList(t, runcRoot); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
	resolved, _ := filepath.EvalSymlinks(state)
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && strings.HasPrefix(f[4], resolved+"/") {
			t.Errorf("still mounted: %s", f[4])
		}
	}
}

// TestServeRunsTheGuestBinary: the binary built as scripts/build.sh builds it carries the
// guest's own binary; the server writes it into its state dir, and each sandbox's guest
// (and the template) runs that small binary, not the whole of cellbox.
func TestServeRunsTheGuestBinary(t *testing.T) {
	needRunc(t)
	state := t.TempDir()
	srv := serve(t, state, "--pool-size", "1")
	c := client.New(srv.URL)
	sess, err := c.CreateSession(t.Context(), api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Execute(t.Context(), sess.ID, api.ExecuteRequest{Code: "print(6 * 7)"}); err != nil || res.Status != api.StatusOK {
		t.Fatalf("a cell: %+v, %v", res, err)
	}
	guests, _ := filepath.Glob(filepath.Join(state, "guest", "cellbox-guest-*"))
	if len(guests) != 1 {
		t.Fatalf("guest binaries in the state dir: %q, want one", guests)
	}
	small, err := os.Stat(guests[0])
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := os.Stat(testbin.Cellbox(t))
	if small.Size()*4 > whole.Size() || small.Mode().Perm() != 0o755 {
		t.Errorf("the guest binary is %d bytes (mode %v), cellbox %d: want a small executable", small.Size(), small.Mode().Perm(), whole.Size())
	}
	ran := 0
	for _, pid := range procsInCgroups(runcList(t, filepath.Join(state, "runc", "runtime"))) {
		exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), "guest") || strings.Contains(string(cmdline), "python") {
			continue
		}
		ran++
		if !os.SameFile(exe, small) {
			t.Errorf("sandbox process %d (%q) runs another binary than %s", pid, cmdline, guests[0])
		}
	}
	if ran < 2 {
		t.Errorf("%d guests found in the sandboxes' cgroups, want the session's and the pool's", ran)
	}
}

package main

// cellbox serve as an operator runs it: the built binary as a subprocess, on the runc backend.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/testbin"
)

// served is a `cellbox serve` process.
type served struct {
	cmd    *exec.Cmd
	url    string
	log    string        // path of its stdout and stderr
	exited chan struct{} // closed when it has exited; err is then its Wait error
	err    error
}

// serve starts `cellbox serve` on a free port and the state dir and waits until it answers
// /healthz. A server still running when the test ends gets SIGTERM, then SIGKILL.
func serve(t *testing.T, state string, args ...string) *served {
	t.Helper()
	needRunc(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &served{url: "http://" + addr, log: filepath.Join(t.TempDir(), "serve.log"), exited: make(chan struct{})}
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(testbin.Cellbox(t), append([]string{"serve", "--addr", addr, "--state-dir", state}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = s.cmd.Wait()
		logf.Close()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(time.Minute):
			s.cmd.Process.Kill()
			<-s.exited
		}
	})
	c := client.New(s.url)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			return s
		}
		select {
		case <-s.exited:
			t.Fatalf("cellbox serve exited: %v\n%s", s.err, s.output())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("cellbox serve does not answer /healthz: %v\n%s", err, s.output())
		}
	}
}

func (s *served) output() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// TestServeShutdown sends SIGTERM to a server whose cell runs: the cell is interrupted and
// its result reaches the client, the server exits 0, nothing of its sandboxes is left
// running or mounted, and the workspace stays on disk.
func TestServeShutdown(t *testing.T) {
	needRunc(t)
	state := t.TempDir()
	srv := serve(t, state, "--pool-size", "1", "--log-level", "info")
	c := client.New(srv.url)
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
	for deadline := time.Now().Add(time.Minute); ; {
		s, err := c.GetSession(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		h, err := c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.State == "busy" && h.Pool == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s, pool %d after a minute", s.State, h.Pool)
		}
		time.Sleep(50 * time.Millisecond)
	}
	runcRoot := filepath.Join(state, "runc", "runtime") // runc.Config.StateDir is <state>/runc
	ids := runcList(t, runcRoot)
	if len(ids) != 2 {
		t.Fatalf("sandboxes %v; want the session's and the pool's", ids)
	}

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-running:
		if a.err != nil || a.res.Status != api.StatusInterrupted {
			t.Errorf("running cell's answer: %+v, %v; want status %s", a.res, a.err, api.StatusInterrupted)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no answer to the running cell\n%s", srv.output())
	}
	select {
	case <-srv.exited:
		if srv.err != nil {
			t.Errorf("cellbox serve: %v, want exit 0\n%s", srv.err, srv.output())
		}
	case <-time.After(40 * time.Second): // its own shutdown gives up after 30 s
		t.Fatalf("cellbox serve still runs 40 s after SIGTERM\n%s", srv.output())
	}
	if !strings.Contains(srv.output(), "msg=stopped") {
		t.Errorf("log lacks the end of shutdown:\n%s", srv.output())
	}

	if left := runcList(t, runcRoot); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
	for _, pid := range procsInCgroups(ids) {
		t.Errorf("process %d left in a sandbox's cgroup", pid)
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
	} else if strings.Contains(srv.output(), "workspace disk quotas off") {
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
	want := fmt.Sprintf("cellbox serve: another cellbox server uses state dir %s (pid %d)\n", state, first.cmd.Process.Pid)
	if string(out) != want {
		t.Errorf("second serve says %q, want %q", out, want)
	}

	r := cellbox(t, "", "run", "--state-dir", state, "-c", "print(2)")
	r.want(t, exitOK)
	if r.stdout != "2\n" {
		t.Errorf("run next to serve: stdout %q, stderr %s", r.stdout, r.stderr)
	}
	if _, err := client.New(first.url).Health(t.Context()); err != nil {
		t.Errorf("first server after the run: %v", err)
	}
}

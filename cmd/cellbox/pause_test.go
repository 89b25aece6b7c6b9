package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/testbin"
)

// TestServePause pauses and resumes sessions of `cellbox serve`, on runc (CRIU) and on
// gVisor (runsc's own checkpoints): state across a pause (variables, a thread, an open file,
// a process the kernel started), the refusals (a session not made pausable, a busy one, the
// paused sessions' disk quota), the idle timeout pausing, a paused session across a
// SIGTERM and a kill -9 of the server, a damaged checkpoint (the session ends, its
// files are kept), and (under gVisor) an MCP client's session resumed by its next call.
func TestServePause(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) { testServePause(t, rt) })
	}
}

func testServePause(t *testing.T, runtime string) {
	needRunc(t)
	testbin.NeedProgram(t, runtime, runtime)
	if runtime == "runc" {
		testbin.NeedProgram(t, "criu", "criu (scripts/criu.sh builds it; make deps installs it)")
	}
	state := t.TempDir()
	args := []string{"--end-sessions-on-exit=false", "--pool-size", "1", "--log-level", "info", "--runtime", runtime,
		"--paused-quota-mb", "1"}
	if runtime == "runsc" {
		args = append(args, "--gvisor-platform", "systrap")
	}
	srv := serve(t, state, args...)
	c := client.New(srv.URL)
	ctx := t.Context()
	out := func(c *client.Client, id, code string) string {
		t.Helper()
		res, err := c.Execute(ctx, id, api.ExecuteRequest{Code: code})
		if err != nil {
			t.Fatalf("execute %q in %s: %v", code, id, err)
		}
		var b strings.Builder
		for _, o := range res.Outputs {
			b.WriteString(o.Text)
		}
		if res.Status != api.StatusOK {
			t.Fatalf("execute %q in %s: %+v", code, id, res)
		}
		return strings.TrimSpace(b.String())
	}
	paused := func(c *client.Client, id string) {
		t.Helper()
		s, err := c.GetSession(ctx, id)
		if err != nil || s.State != api.StatePaused || s.PausedAt == nil || s.CheckpointBytes <= 0 {
			t.Fatalf("session %s: %+v, %v; want paused with a checkpoint", id, s, err)
		}
		if ids := runcListOf(t, state, runtime); slices.Contains(ids, id) {
			t.Fatalf("a paused session's sandbox runs: %v", ids)
		}
	}

	a, err := c.CreateSession(ctx, api.CreateSessionRequest{IdleAction: api.IdleActionPause})
	if err != nil {
		t.Fatal(err)
	}
	if a.IdleAction != api.IdleActionPause {
		t.Errorf("idle_action %q, want pause", a.IdleAction)
	}
	out(c, a.ID, `
import threading, subprocess, time
x = 41
ticks = [0]
def tick():
    while True:
        ticks[0] += 1
        time.sleep(0.01)
threading.Thread(target=tick, daemon=True).start()
f = open('log.txt', 'w'); f.write('before\n'); f.flush()
p = subprocess.Popen(['sleep', '1000'])
`)
	s, err := c.Pause(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != api.StatePaused {
		t.Fatalf("after pause: %+v", s)
	}
	paused(c, a.ID)
	if list, err := c.ListSessions(ctx); err != nil || len(list) != 1 || list[0].State != api.StatePaused {
		t.Errorf("the session list while paused: %+v, %v", list, err)
	}
	// Pausing again changes nothing; the quota (1 MiB) is taken by the first: another
	// pausable session is refused.
	if _, err := c.Pause(ctx, a.ID); err != nil {
		t.Errorf("pause of a paused session: %v", err)
	}
	b, err := c.CreateSession(ctx, api.CreateSessionRequest{IdleAction: api.IdleActionPause})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, b.ID); !isCode(err, api.CodeResourceExhausted) {
		t.Errorf("pause past the quota: %v, want resource_exhausted", err)
	}
	// Any call resumes: a cell here.
	if got := out(c, a.ID, "n = ticks[0]; time.sleep(0.2)\nf.write('after\\n'); f.flush()\nprint(x + 1, ticks[0] > n, p.poll() is None, open('log.txt').read().split())"); got != "42 True True ['before', 'after']" {
		t.Fatalf("after resume: %q", got)
	}
	if s, _ := c.GetSession(ctx, a.ID); s.State != api.StateIdle || s.PausedAt != nil {
		t.Errorf("after resume: %+v", s)
	}
	// The restored kernel is confined as before: its seccomp filter, no_new_privs, no
	// capability; the guest (process 1) is not dumpable again, its /proc files its own.
	const confined = "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n" +
		"print(st['Seccomp'].strip(), st['NoNewPrivs'].strip(), st['CapEff'].strip(), st['CapPrm'].strip())\n" +
		"try:\n    open('/proc/1/environ').read(); print('guest readable')\nexcept PermissionError:\n    print('guest private')"
	if got := out(c, a.ID, confined); got != "2 1 0000000000000000 0000000000000000\nguest private" {
		t.Errorf("the resumed kernel's confinement: %q", got)
	}

	// Refusals: a busy session; on runc, one created to end when idle.
	running := make(chan error, 1)
	go func() {
		_, err := c.Execute(context.Background(), a.ID, api.ExecuteRequest{Code: "import time; time.sleep(3)"})
		running <- err
	}()
	testbin.WaitFor(t, 30*time.Second, "the cell running", func() error {
		if s, _ := c.GetSession(ctx, a.ID); s.State != api.StateBusy {
			return fmt.Errorf("state %s", s.State)
		}
		return nil
	})
	if _, err := c.Pause(ctx, a.ID); !isCode(err, api.CodeFailedPrecondition) {
		t.Errorf("pause while a cell runs: %v, want failed_precondition", err)
	}
	if err := <-running; err != nil {
		t.Fatal(err)
	}
	plain, err := c.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, plain.ID); runtime == "runc" && !isCode(err, api.CodeFailedPrecondition) {
		t.Errorf("pause of a session not created pausable on runc: %v, want failed_precondition", err)
	} else if runtime == "runsc" && err != nil {
		t.Errorf("pause of any session on gVisor: %v", err)
	}
	if runtime == "runsc" {
		c.Resume(ctx, plain.ID)
	}

	// The idle timeout pauses a session that asks for it (the quota is free again).
	idle, err := c.CreateSession(ctx, api.CreateSessionRequest{IdleAction: api.IdleActionPause, IdleTimeoutS: 1})
	if err != nil {
		t.Fatal(err)
	}
	out(c, idle.ID, "y = 'idle'")
	testbin.WaitFor(t, time.Minute, "the idle session paused", func() error {
		if s, err := c.GetSession(ctx, idle.ID); err != nil || s.State != api.StatePaused {
			return fmt.Errorf("%+v, %v", s, err)
		}
		return nil
	})
	if got := out(c, idle.ID, "print(y)"); got != "idle" {
		t.Errorf("the idle-paused session after resume: %q", got)
	}
	if err := c.DeleteSession(ctx, idle.ID); err != nil { // before it pauses again, taking the quota
		t.Fatal(err)
	}

	// Forks: each a copy of the variables and the workspace, apart from each other and
	// from the session, which runs on; their random numbers differ.
	out(c, a.ID, "import numpy as np; base = 'from-a'; open('shared.txt', 'w').write('a')")
	forked, err := c.Fork(ctx, a.ID, api.ForkRequest{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(forked.Sessions) != 3 {
		t.Fatalf("forks: %+v", forked)
	}
	draws := map[string]bool{}
	for i, f := range forked.Sessions {
		if f.ID == a.ID || f.State != api.StateIdle || f.IdleAction != api.IdleActionPause {
			t.Errorf("fork %d: %+v", i, f)
		}
		if got := out(c, f.ID, confined); got != "2 1 0000000000000000 0000000000000000\nguest private" {
			t.Errorf("fork %d's confinement: %q", i, got)
		}
		got := out(c, f.ID, fmt.Sprintf("print(base, x, open('shared.txt').read(), np.random.randint(1 << 30))\nbase = 'fork%d'; open('shared.txt', 'w').write('fork%d')", i, i))
		fields := strings.Fields(got)
		if len(fields) != 4 || fields[0] != "from-a" || fields[2] != "a" {
			t.Errorf("fork %d sees %q", i, got)
		} else {
			draws[fields[3]] = true
		}
	}
	if len(draws) != 3 {
		t.Errorf("the forks drew the same random numbers: %v", draws)
	}
	if got := out(c, a.ID, "print(base, open('shared.txt').read())"); got != "from-a a" {
		t.Errorf("the forked session after its forks wrote: %q", got)
	}
	for _, f := range forked.Sessions {
		if err := c.DeleteSession(ctx, f.ID); err != nil {
			t.Error(err)
		}
	}
	// A paused session is forked from its checkpoint, and stays paused.
	if _, err := c.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if forked, err = c.Fork(ctx, a.ID, api.ForkRequest{Count: 1}); err != nil {
		t.Fatal(err)
	}
	if got := out(c, forked.Sessions[0].ID, "print(base, open('shared.txt').read())"); got != "from-a a" {
		t.Errorf("the fork of a paused session sees %q", got)
	}
	paused(c, a.ID)
	if err := c.DeleteSession(ctx, forked.Sessions[0].ID); err != nil {
		t.Error(err)
	}

	// A paused session outlives the server, by SIGTERM and by kill -9.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if _, err := c.Pause(ctx, a.ID); err != nil {
			gl, _ := os.ReadFile(filepath.Join(state, "runc", "bundles", a.ID, "run", "guest.log"))
			rl, _ := os.ReadFile(filepath.Join(state, "runc", "bundles", a.ID, "guest.log"))
			t.Fatalf("%v\nguest log: %s\nruntime log: %s", err, gl, rl)
		}
		srv.Cmd.Process.Signal(sig)
		<-srv.Exited
		srv = serve(t, state, args...)
		c = client.New(srv.URL)
		paused(c, a.ID)
		if got := out(c, a.ID, "x += 1; print(x, p.poll() is None)"); !strings.HasSuffix(got, "True") {
			t.Fatalf("after %v and a new server: %q", sig, got)
		}
	}

	// A damaged checkpoint: the session ends with a clear error, its files stay.
	if _, err := c.Pause(ctx, a.ID); err != nil {
		gl, _ := os.ReadFile(filepath.Join(state, "runc", "bundles", a.ID, "run", "guest.log"))
		rl, _ := os.ReadFile(filepath.Join(state, "runc", "bundles", a.ID, "guest.log"))
		t.Fatalf("%v\nguest log: %s\nruntime log: %s", err, gl, rl)
	}
	images := filepath.Join(state, "checkpoints", a.ID, "images")
	entries, err := os.ReadDir(images)
	if err != nil || len(entries) == 0 {
		t.Fatalf("checkpoint images: %v, %v", entries, err)
	}
	for _, e := range entries {
		p := filepath.Join(images, e.Name())
		if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
			os.Truncate(p, fi.Size()/2)
		}
	}
	_, err = c.Execute(ctx, a.ID, api.ExecuteRequest{Code: "print(1)"})
	if !client.IsNotFound(err) || !strings.Contains(err.Error(), "could not be resumed") {
		t.Errorf("execute on a session whose checkpoint is damaged: %v", err)
	}
	if _, err := c.GetSession(ctx, a.ID); !client.IsNotFound(err) {
		t.Errorf("the session after its checkpoint failed: %v, want not found", err)
	}
	// Its workspace is kept, released for --retention: its image and the release's marker.
	// (Not read here: another test's server on this machine may have a copy of its mount in
	// a mount namespace of its own, which keeps the image's file system unsynced.)
	for _, name := range []string{a.ID + ".img", a.ID + ".released"} {
		if _, err := os.Stat(filepath.Join(state, "workspaces", name)); err != nil {
			t.Errorf("the ended session's workspace: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "checkpoints", a.ID)); !os.IsNotExist(err) {
		t.Errorf("the damaged checkpoint is left: %v", err)
	}

	if runtime == "runsc" { // where any session pauses, an MCP connection's own too
		mcpResumes(t, srv.URL, c)
	}

	// A server that ends sessions on exit ends the paused ones too, and leaves nothing.
	last, err := c.CreateSession(ctx, api.CreateSessionRequest{IdleAction: api.IdleActionPause})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, last.ID); err != nil {
		t.Fatal(err)
	}
	srv.Cmd.Process.Signal(syscall.SIGTERM)
	<-srv.Exited
	// (No pool: the check below is of what the paused sessions leave.)
	srv = serve(t, state, append(args[1:], "--pool-size", "0")...)
	if list, err := client.New(srv.URL).ListSessions(ctx); err != nil || len(list) != 0 {
		t.Errorf("sessions on a server that ends them: %+v, %v; want none", list, err)
	}
	srv.Cmd.Process.Signal(syscall.SIGTERM)
	<-srv.Exited
	if left := runcListOf(t, state, runtime); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
	if cps, _ := os.ReadDir(filepath.Join(state, "checkpoints")); len(cps) > 0 {
		t.Errorf("checkpoints left: %v", cps)
	}
}

// runcListOf lists the sandboxes of the server on state that runs runtime.
func runcListOf(t *testing.T, state, runtime string) []string {
	t.Helper()
	out, err := exec.Command(runtime, "--root", filepath.Join(state, "runc", "runtime"), "list", "--quiet").Output()
	if err != nil {
		t.Fatalf("%s list: %v", runtime, err)
	}
	return strings.Fields(string(out))
}

// isCode reports whether err is an API error with code.
func isCode(err error, code string) bool { return err != nil && client.Code(err) == code }

// mcpResumes: an MCP client (the official Go SDK, over streamable HTTP) whose connection's
// session is paused meanwhile gets its next call answered from the resumed kernel.
func mcpResumes(t *testing.T, url string, c *client.Client) {
	t.Helper()
	ctx := t.Context()
	before, err := c.ListSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mc := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(code string) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "python", Arguments: map[string]any{"code": code}})
		if err != nil || res.IsError {
			t.Fatalf("MCP python %q: %+v, %v", code, res, err)
		}
		return text(res)
	}
	call("y = 5")
	after, err := c.ListSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, s := range after {
		if !slices.ContainsFunc(before, func(b api.Session) bool { return b.ID == s.ID }) {
			id = s.ID
		}
	}
	if id == "" {
		t.Fatal("the MCP connection's session is not listed")
	}
	if s, err := c.Pause(ctx, id); err != nil || s.State != api.StatePaused {
		t.Fatalf("pause the MCP connection's session: %+v, %v", s, err)
	}
	if got := call("print(y + 1)"); !strings.Contains(got, "6") {
		t.Errorf("the MCP call after a pause: %q; want 6", got)
	}
	if s, err := c.GetSession(ctx, id); err != nil || s.State == api.StatePaused {
		t.Errorf("after the MCP call: %+v, %v; want resumed", s, err)
	}
}

// Package sandboxtest is the conformance suite every sandbox backend passes: Run starts
// real sandboxes with a real guest and checks what the sandbox.Backend contract promises,
// and, as far as the backend's Capabilities claim them, isolation and limits.
//
// The guest must find Python at /usr/bin/python3 (with IPython). Only tests import this
// package.
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/egress"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/testbin"
)

// Python is the interpreter the suite configures the guest with.
const Python = "/usr/bin/python3"

// limits are those of the suite's ordinary sandboxes.
var limits = sandbox.Limits{MemoryMB: 1024, CPUs: 1, Pids: 256, TmpMB: 64}

// Run runs the suite against b. Sandboxes of b that the suite did not create are left alone.
func Run(t *testing.T, b sandbox.Backend) {
	caps := b.Capabilities()
	t.Run("hello", func(t *testing.T) { testHello(t, b) })
	t.Run("execute", func(t *testing.T) { testExecute(t, b) })
	t.Run("files", func(t *testing.T) { testFiles(t, b) })
	t.Run("commands", func(t *testing.T) { testCommands(t, b) })
	t.Run("separate_workspaces", func(t *testing.T) { testSeparate(t, b) })
	t.Run("symlink_out_of_workspace", func(t *testing.T) { testSymlink(t, b) })
	t.Run("stop", func(t *testing.T) { testStop(t, b) })
	t.Run("cleanup", func(t *testing.T) { testCleanup(t, b) })
	// What a backend does not claim (local-unsafe claims none of it) it has nothing to prove:
	// these run only for the capabilities the backend reports, and are not skipped otherwise.
	if caps.Isolated {
		t.Run("isolation", func(t *testing.T) { testIsolation(t, b) })
	}
	if caps.GuestProtected {
		t.Run("guest_out_of_reach", func(t *testing.T) { testGuestOutOfReach(t, b) })
	}
	if caps.Reattach {
		t.Run("reattach", func(t *testing.T) { testReattach(t, b) })
	} else {
		t.Run("no_reattach", func(t *testing.T) { testNoReattach(t, b) })
	}
	if caps.NoNetwork {
		t.Run("no_network", func(t *testing.T) { testNoNetwork(t, b) })
		t.Run("egress_proxy", func(t *testing.T) { testEgressProxy(t, b) })
	}
	if caps.Limits {
		t.Run("limits", func(t *testing.T) {
			t.Run("memory", func(t *testing.T) { testMemory(t, b) })
			t.Run("pids", func(t *testing.T) { testPids(t, b) })
			t.Run("pids_restart", func(t *testing.T) { testPidsRestart(t, b) })
			t.Run("pids_held", func(t *testing.T) { testPidsHeld(t, b) })
			t.Run("fork_bomb", func(t *testing.T) { testForkBomb(t, b) })
			t.Run("cpu", func(t *testing.T) { testCPU(t, b) })
			t.Run("change", func(t *testing.T) { testLimitsChange(t, b) })
		})
	}
}

// box is one sandbox of the suite with its guest client and host workspace.
type box struct {
	sb        sandbox.Sandbox
	c         *guestproto.Client
	workspace string // host folder
}

// Workspace makes a host folder the sandbox user (uid 1000 or the test's own) can write.
func Workspace(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ID returns a fresh sandbox id.
func ID() string {
	var b [6]byte
	rand.Read(b[:])
	return "sbt-" + hex.EncodeToString(b[:])
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// start creates a sandbox, dials and configures its guest; t's cleanup stops it.
func start(t *testing.T, b sandbox.Backend, l sandbox.Limits) *box {
	t.Helper()
	ws := Workspace(t)
	ctx := ctxT(t, 60*time.Second)
	sb, err := b.Create(ctx, sandbox.Spec{ID: ID(), Workspace: ws, Limits: l})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Stop(context.Background()); err != nil {
			t.Errorf("stop sandbox: %v", err)
		}
	})
	c, err := guestproto.Dial(ctx, sb.Conn())
	if err != nil {
		t.Fatalf("dial guest: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	err = c.Configure(ctx, guestproto.Config{
		Python:          Python,
		MaxOutputBytes:  1 << 20,
		MaxRichBytes:    4 << 20,
		DefaultTimeoutS: 30,
		InterruptGraceS: 2,
		MemoryMB:        l.MemoryMB,
	})
	if err != nil {
		t.Fatalf("configure guest: %v", err)
	}
	return &box{sb: sb, c: c, workspace: ws}
}

// exec runs code and returns its result; any error fails the test.
func (x *box) exec(t *testing.T, code string, timeoutS float64) *api.ExecuteResult {
	t.Helper()
	r, err := x.c.Execute(ctxT(t, time.Duration(timeoutS+30)*time.Second), api.ExecuteRequest{Code: code, TimeoutS: timeoutS}, nil)
	if err != nil {
		t.Fatalf("execute %q: %v", code, err)
	}
	return r
}

// run runs code that must succeed and returns what it printed.
func (x *box) run(t *testing.T, code string) string {
	t.Helper()
	r := x.exec(t, code, 30)
	if r.Status != api.StatusOK {
		t.Fatalf("execute %q: status %s (%s), outputs %+v", code, r.Status, r.Message, r.Outputs)
	}
	return stdout(r)
}

func (x *box) command(t *testing.T, cmd ...string) *api.CommandResult {
	t.Helper()
	r, err := x.c.Command(ctxT(t, 60*time.Second), api.CommandRequest{Cmd: cmd, TimeoutS: 20})
	if err != nil {
		t.Fatalf("command %q: %v", cmd, err)
	}
	return r
}

// popen starts up to n processes in the sandbox's kernel, says how many started before one
// was refused, and ends them.
func (x *box) popen(t *testing.T, n int) int {
	t.Helper()
	code := fmt.Sprintf(`import subprocess
ps = []
try:
    for i in range(%d):
        ps.append(subprocess.Popen(['sleep', '60']))
except OSError:
    pass
print(len(ps), end='')
for p in ps:
    p.kill()
    p.wait()`, n)
	var got int
	fmt.Sscan(x.run(t, code), &got)
	return got
}

func stdout(r *api.ExecuteResult) string {
	var sb strings.Builder
	for _, o := range r.Outputs {
		if o.Type == api.OutputStream && o.Name == "stdout" {
			sb.WriteString(o.Text)
		}
	}
	return sb.String()
}

func (x *box) get(t *testing.T, path string) (string, error) {
	t.Helper()
	_, rc, err := x.c.GetFile(ctxT(t, 30*time.Second), path)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

func testHello(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	h := x.c.Hello()
	if h.Version != guestproto.Version {
		t.Errorf("guest protocol version %d, want %d", h.Version, guestproto.Version)
	}
	if h.Root != x.sb.GuestWorkspace() {
		t.Errorf("guest workspace %q, sandbox says %q", h.Root, x.sb.GuestWorkspace())
	}
	if b.Capabilities().Isolated {
		if h.PID != 1 {
			t.Errorf("guest is pid %d, want 1 (own pid namespace)", h.PID)
		}
		if x.sb.GuestWorkspace() != api.WorkspaceDir {
			t.Errorf("guest workspace %q, want %s", x.sb.GuestWorkspace(), api.WorkspaceDir)
		}
	}
	select {
	case <-x.sb.Done():
		t.Error("Done is closed while the sandbox runs")
	default:
	}
}

func testExecute(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	x.run(t, "x = 41")
	r := x.exec(t, "print('hi')\nx + 1", 30)
	if r.Status != api.StatusOK {
		t.Fatalf("status %s, outputs %+v", r.Status, r.Outputs)
	}
	if got := stdout(r); got != "hi\n" {
		t.Errorf("stdout %q, want %q", got, "hi\n")
	}
	var result string
	for _, o := range r.Outputs {
		if o.Type == api.OutputExecuteResult {
			result, _ = o.Data["text/plain"].(string)
		}
	}
	if result != "42" {
		t.Errorf("execute_result %q, want 42 (state kept between cells); outputs %+v", result, r.Outputs)
	}
	r = x.exec(t, "1/0", 30)
	if r.Status != api.StatusError {
		t.Errorf("1/0: status %s, want error", r.Status)
	}
	// multiprocessing needs a writable /dev/shm (semaphores) and fork.
	code := "import multiprocessing as mp\nwith mp.Pool(2) as p:\n    print(sum(p.map(abs, range(10))), end='')"
	if got := x.run(t, code); got != "45" {
		t.Errorf("multiprocessing pool printed %q, want 45", got)
	}
}

func testFiles(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	ctx := ctxT(t, 60*time.Second)
	if _, err := x.c.PutFile(ctx, "in/a.txt", strings.NewReader("from the host")); err != nil {
		t.Fatalf("put file: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(x.workspace, "in", "a.txt")); err != nil || string(got) != "from the host" {
		t.Errorf("host workspace has %q, %v", got, err)
	}
	guestPath := x.sb.GuestWorkspace() + "/in/a.txt"
	if got := x.run(t, fmt.Sprintf("print(open(%q).read(), end='')", guestPath)); got != "from the host" {
		t.Errorf("code reads %q at %s", got, guestPath)
	}
	x.run(t, fmt.Sprintf("open(%q, 'w').write('from code')", x.sb.GuestWorkspace()+"/out.txt"))
	if got, err := x.get(t, "out.txt"); err != nil || got != "from code" {
		t.Errorf("get file: %q, %v", got, err)
	}
	if got, err := x.get(t, api.WorkspaceDir+"/out.txt"); err != nil || got != "from code" {
		t.Errorf("get file by its absolute path: %q, %v", got, err)
	}
	list, err := x.c.ListFiles(ctx, "in")
	if err != nil {
		t.Fatalf("list files: %v", err)
	}
	if len(list.Files) != 1 || list.Files[0].Name != "a.txt" || list.Files[0].Size != 13 {
		t.Errorf("list in/: %+v", list.Files)
	}
	if err := x.c.DeleteFile(ctx, "in/a.txt"); err != nil {
		t.Fatalf("delete file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(x.workspace, "in", "a.txt")); !os.IsNotExist(err) {
		t.Errorf("deleted file still on the host: %v", err)
	}
	if _, err := x.get(t, "in/a.txt"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get deleted file: %v, want not found", err)
	}
	if _, err := x.get(t, "../etc/passwd"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("get ../etc/passwd: %v, want invalid argument", err)
	}

	// Folders, moves, stat and a recursive remove, done by the guest.
	if e, err := x.c.MakeDir(ctx, "made/deep"); err != nil || !e.Created || e.Type != "dir" {
		t.Fatalf("make dir: %+v, %v", e, err)
	}
	if e, err := x.c.Move(ctx, "out.txt", "made/deep/moved.txt"); err != nil || e.Path != api.WorkspaceDir+"/made/deep/moved.txt" {
		t.Fatalf("move: %+v, %v", e, err)
	}
	if e, err := x.c.Stat(ctx, "made/deep/moved.txt"); err != nil || e.Type != "file" || e.Size != 9 {
		t.Errorf("stat: %+v, %v", e, err)
	}
	// User code may write into what the guest made for it.
	if r := x.command(t, "sh", "-c", "echo more >> made/deep/moved.txt && touch made/deep/by-code"); r.Status != api.StatusOK {
		t.Errorf("user code writing into the guest's folder: %+v", r)
	}
	if err := x.c.Remove(ctx, "made"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := os.Stat(filepath.Join(x.workspace, "made")); !os.IsNotExist(err) {
		t.Errorf("removed folder still on the host: %v", err)
	}
	// A command may start in a folder outside the workspace.
	r, err := x.c.CommandRun(ctx, "in-tmp", "/tmp", api.CommandRequest{Cmd: []string{"pwd"}, TimeoutS: 30}, nil)
	if err != nil || r.Status != api.StatusOK || strings.TrimSpace(r.Stdout) != "/tmp" {
		t.Errorf("a command in /tmp: %+v, %v", r, err)
	}
}

func testCommands(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	r := x.command(t, "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.Status != api.StatusError || r.ExitCode != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("got %+v, want status error, exit 3, stdout out, stderr err", r)
	}
	r = x.command(t, "sh", "-c", "pwd; touch made-by-command")
	if r.Status != api.StatusOK || strings.TrimSpace(r.Stdout) != x.sb.GuestWorkspace() {
		t.Errorf("pwd: %+v, want ok and %s", r, x.sb.GuestWorkspace())
	}
	if _, err := os.Stat(filepath.Join(x.workspace, "made-by-command")); err != nil {
		t.Errorf("file made by a command is not in the host workspace: %v", err)
	}
	// /tmp is HOME: what is built or installed there runs, on every backend alike.
	r = x.command(t, "sh", "-c", "printf '#!/bin/sh\necho ran\n' > /tmp/x.sh && chmod +x /tmp/x.sh && /tmp/x.sh")
	if r.Status != api.StatusOK || r.Stdout != "ran\n" {
		t.Errorf("a program in /tmp: %+v, want it to run", r)
	}
}

func testSeparate(t *testing.T, b sandbox.Backend) {
	x, y := start(t, b, limits), start(t, b, limits)
	ctx := ctxT(t, 30*time.Second)
	if _, err := x.c.PutFile(ctx, "only-x.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	x.run(t, fmt.Sprintf("open(%q, 'w').write('x')", x.sb.GuestWorkspace()+"/only-x-code.txt"))
	list, err := y.c.ListFiles(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Files) != 0 {
		t.Errorf("the other sandbox lists %+v", list.Files)
	}
	if entries, _ := os.ReadDir(y.workspace); len(entries) != 0 {
		t.Errorf("the other sandbox's host workspace has %d entries", len(entries))
	}
	if b.Capabilities().Isolated {
		code := fmt.Sprintf("import os\nprint(os.path.exists(%q), os.path.exists(%q), end='')", x.workspace, api.WorkspaceDir+"/only-x.txt")
		if got := y.run(t, code); got != "False False" {
			t.Errorf("the other sandbox sees the first one's files: %s", got)
		}
	}
}

func testSymlink(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	x.run(t, fmt.Sprintf("import os\nos.symlink('/etc/passwd', %q)\nos.symlink('/etc', %q)",
		x.sb.GuestWorkspace()+"/link", x.sb.GuestWorkspace()+"/etclink"))
	for _, p := range []string{"link", "etclink/passwd"} {
		if got, err := x.get(t, p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("get file %s (a symlink out of the workspace): %q, %v; want invalid argument", p, got, err)
		}
	}
	ctx := ctxT(t, 30*time.Second)
	if list, err := x.c.ListFiles(ctx, "etclink"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("list etclink (a symlink out of the workspace): %+v, %v; want invalid argument", list, err)
	}
	if _, err := x.c.PutFile(ctx, "etclink/cellbox-test", strings.NewReader("x")); err == nil {
		t.Error("put file through a symlink out of the workspace succeeded")
	}
	if _, err := os.Stat("/etc/cellbox-test"); err == nil {
		t.Error("put file through a symlink wrote /etc/cellbox-test on the host")
		os.Remove("/etc/cellbox-test")
	}
}

// processesWith lists host pids whose command line contains marker (Linux).
func processesWith(marker string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), marker) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func testStop(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	// Two processes that left the guest's process groups: a child of the kernel in a
	// session of its own, and an orphaned daemon started by a command.
	var n [4]byte
	rand.Read(n[:])
	kernelChild := fmt.Sprintf("1000.%d%d", n[0], n[1])
	daemon := fmt.Sprintf("1000.%d%d", n[2], n[3])
	x.run(t, fmt.Sprintf("import subprocess\np = subprocess.Popen(['sleep', %q], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)", kernelChild))
	// The command returns once the daemon has called setsid (and exec'd sleep).
	r := x.command(t, "sh", "-c", "setsid sleep "+daemon+" </dev/null >/dev/null 2>&1 & p=$!; "+
		"while [ \"$(cat /proc/$p/comm 2>/dev/null)\" != sleep ]; do sleep 0.01; done")
	if r.Status != api.StatusOK {
		t.Fatalf("start a daemon: %+v", r)
	}
	markers := []string{"sleep " + kernelChild, "sleep " + daemon}
	// Where the sandbox's processes are the host's, Stop must leave none of them behind.
	hostProcs := runtime.GOOS == "linux" && b.Capabilities().HostProcesses
	if hostProcs {
		for _, m := range markers {
			if !testbin.Eventually(5*time.Second, func() bool { return len(processesWith(m)) > 0 }) {
				t.Fatalf("%q does not show in the host's /proc", m)
			}
		}
	}

	// Concurrent and repeated Stops all succeed.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = x.sb.Stop(ctxT(t, 30*time.Second))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("stop: %v", err)
		}
	}
	select {
	case <-x.sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done is not closed after Stop")
	}
	if err := x.sb.Stop(ctxT(t, 30*time.Second)); err != nil {
		t.Errorf("second stop: %v", err)
	}
	for _, m := range markers {
		if hostProcs && !testbin.Eventually(5*time.Second, func() bool { return len(processesWith(m)) == 0 }) {
			t.Errorf("%q survived Stop: pids %v", m, processesWith(m))
		}
	}
	select {
	case <-x.c.Done():
	case <-time.After(10 * time.Second):
		t.Error("the guest connection is still open after Stop")
	}
	if _, err := x.c.ListFiles(ctxT(t, 10*time.Second), ""); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a call after Stop: %v, want unavailable", err)
	}
}

func testCleanup(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	if err := b.Cleanup(ctxT(t, 60*time.Second), nil); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	// The backend's own live sandboxes are not leftovers.
	if got := x.run(t, "print('alive', end='')"); got != "alive" {
		t.Errorf("after cleanup: %q", got)
	}
}

// A detached sandbox runs on with its kernel's state; Attach reaches it again, and Cleanup
// spares it when told to keep it.
func testReattach(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	x.run(t, "x = 41")
	id := x.sb.ID()
	if _, err := b.Attach(ctxT(t, 30*time.Second), id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("attach to a sandbox attached already: %v, want failed precondition", err)
	}
	x.c.Close()
	if err := x.sb.Detach(); err != nil {
		t.Fatalf("detach: %v", err)
	}
	if err := b.Cleanup(ctxT(t, 60*time.Second), func(got string) bool { return got == id }); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	ctx := ctxT(t, 60*time.Second)
	sb, err := b.Attach(ctx, id)
	if err != nil {
		t.Fatalf("attach after detach: %v", err)
	}
	t.Cleanup(func() { sb.Stop(context.Background()) })
	c, err := guestproto.Dial(ctx, sb.Conn())
	if err != nil {
		t.Fatalf("dial the re-attached guest: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	y := &box{sb: sb, c: c, workspace: x.workspace}
	if got := y.run(t, "print(x + 1, end='')"); got != "42" {
		t.Errorf("after re-attach, x + 1 = %q, want 42", got)
	}
	select {
	case <-sb.Done():
		t.Error("Done is closed while the re-attached sandbox runs")
	default:
	}
	if err := sb.Stop(ctxT(t, 30*time.Second)); err != nil {
		t.Errorf("stop: %v", err)
	}
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Error("Done is not closed after Stop of a re-attached sandbox")
	}
	if _, err := b.Attach(ctxT(t, 30*time.Second), id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("attach to a stopped sandbox: %v, want not found", err)
	}
	if _, err := b.Attach(ctxT(t, 30*time.Second), ID()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("attach to a sandbox that never was: %v, want not found", err)
	}
}

// A backend that cannot re-attach says so.
func testNoReattach(t *testing.T, b sandbox.Backend) {
	if _, err := b.Attach(ctxT(t, 10*time.Second), ID()); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("attach: %v, want unsupported", err)
	}
}

func testIsolation(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	r := x.command(t, "id", "-u")
	if r.Status != api.StatusOK || strings.TrimSpace(r.Stdout) == "0" {
		t.Errorf("id -u: %+v; want a user other than root", r)
	}
	checks := []struct{ name, code, want string }{
		{"shadow unreadable", "try:\n  open('/etc/shadow').read(); print('read', end='')\nexcept OSError: print('refused', end='')", "refused"},
		{"root read-only", "try:\n  open('/cellbox-test', 'w'); print('wrote', end='')\nexcept OSError: print('refused', end='')", "refused"},
		{"usr read-only", "try:\n  open('/usr/cellbox-test', 'w'); print('wrote', end='')\nexcept OSError: print('refused', end='')", "refused"},
		// The bounding set may keep the guest's few (it only limits what could be gained,
		// and no_new_privs forbids gaining anything); the sets that grant are empty.
		{"capabilities", "import re\ns = open('/proc/self/status').read()\nprint(sorted(set(re.findall(r'Cap(?:Inh|Prm|Eff|Amb):\\s*(\\w+)', s))), end='')", "['0000000000000000']"},
		// PR_GET_NO_NEW_PRIVS (39): gVisor's /proc/self/status has no NoNewPrivs line.
		{"no_new_privs", "import ctypes\nprint(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0), end='')", "1"},
		{"tmp writable", "open('/tmp/x', 'w').write('x'); print('ok', end='')", "ok"},
		{"seccomp", seccompCheck, seccompWant},
	}
	for _, c := range checks {
		if got := x.run(t, c.code); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	// Commands are the guest's children, where a kernel may be a template's fork: both are
	// filtered, whoever installed the filter (the runtime, the engine or the guest itself).
	if r := x.command(t, Python, "-c", seccompCheck); r.Status != api.StatusOK || r.Stdout != seccompWant {
		t.Errorf("seccomp of a command: %+v, want %q", r, seccompWant)
	}
	for _, p := range []string{"/cellbox-test", "/usr/cellbox-test"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("sandbox wrote %s on the host", p)
			os.Remove(p)
		}
	}
}

// seccompCheck prints the seccomp mode of its process and what an unshare of a user
// namespace answers: refused by the filter, though allowed to an unprivileged user without
// it (a filter in a parent's process counts: it is inherited).
const seccompCheck = `import ctypes, os
mode = open('/proc/self/status').read().split('Seccomp:')[1].split()[0]
libc = ctypes.CDLL(None, use_errno=True)
print(mode, libc.unshare(0x10000000), os.strerror(ctypes.get_errno()), end='')`

const seccompWant = "2 -1 Operation not permitted"

func testNoNetwork(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	// The kernel's list of interfaces (gVisor's sysfs has no /sys/class/net).
	if got := x.run(t, "import socket\nprint(sorted(n for _, n in socket.if_nameindex()), end='')"); got != "['lo']" {
		t.Errorf("network interfaces %s, want only lo", got)
	}
	if got := x.run(t, "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]), end='')"); got != "['lo']" {
		t.Errorf("/proc/net/dev lists %s, want only lo", got)
	}
	addrs := []string{"127.0.0.1"}
	if ip := hostIP(); ip != "" {
		addrs = append(addrs, ip)
	} else {
		t.Log("no non-loopback host address to test against")
	}
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan struct{}, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
				accepted <- struct{}{}
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		code := fmt.Sprintf("import socket\ntry:\n  socket.create_connection((%q, %d), timeout=3); print('connected', end='')\nexcept OSError: print('refused', end='')", addr, port)
		if got := x.run(t, code); got != "refused" {
			t.Errorf("connect to the host's %s:%d: %s", addr, port, got)
		}
		select {
		case <-accepted:
			t.Errorf("the host's listener on %s accepted a connection from the sandbox", addr)
		default:
		}
	}
}

// testEgressProxy: the guest's proxy on the sandbox's loopback hands connections to the
// server's gateway over the guest channel, the environment of kernels and commands names
// it, and the trust bundle takes the session's authority. What the gateway then decides is
// package egress's; here it lets the host's loopback through.
func testEgressProxy(t *testing.T, b sandbox.Backend) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go http.Serve(up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s %s", r.Method, r.URL.Path)
	}))
	g := egress.New(egress.Config{Ranges: egress.Ranges{PrivateAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	p, err := egress.Compile(api.Network{Egress: api.EgressPublic}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := egress.NewCA("conformance")
	if err != nil {
		t.Fatal(err)
	}
	g.Set("s", "", p, egress.Limits{}, ca)
	x := start(t, b, limits)
	x.c.ServeEgress(func(c net.Conn) { g.Serve("s", c) }, 64)

	env := x.run(t, "import os\nprint(os.environ.get('HTTP_PROXY'), os.environ.get('https_proxy'), os.environ.get('NO_PROXY'), end='')")
	if want := "http://" + guestproto.EgressListen + " http://" + guestproto.EgressListen + " localhost,127.0.0.1,::1"; env != want {
		t.Errorf("the kernel's proxy variables: %q, want %q", env, want)
	}
	// A plain request, by hand: no client's NO_PROXY rules in the way.
	port := up.Addr().(*net.TCPAddr).Port
	code := fmt.Sprintf(`import os, socket
host, port = os.environ['HTTP_PROXY'].rsplit('/', 1)[1].split(':')
s = socket.create_connection((host, int(port)), timeout=10)
s.sendall(b'GET http://127.0.0.1:%d/through HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n')
data = b''
while True:
    b = s.recv(65536)
    if not b: break
    data += b
print(data.decode().split('\r\n\r\n', 1)[1], end='')`, port, port)
	if got := x.run(t, code); got != "upstream saw GET /through" {
		t.Errorf("through the proxy: %q", got)
	}
	l, _ := g.Log("s")
	if len(l.Connections) != 1 || l.Connections[0].Decision != "allowed" || l.Connections[0].Status != 200 {
		t.Errorf("the gateway's record: %+v", l.Connections)
	}
	// The same from a command.
	r := x.command(t, "sh", "-c", `printf 'CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n' | python3 -c "
import os, socket, sys
s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
s.sendall(sys.stdin.buffer.read()); print(s.recv(200).split(b'\r\n')[0].decode())"; echo "$HTTPS_PROXY"`)
	if r.ExitCode != 0 || !strings.HasPrefix(r.Stdout, "HTTP/1.1 502") || !strings.Contains(r.Stdout, "http://"+guestproto.EgressListen) {
		t.Errorf("a command's CONNECT to a closed port: %+v", r)
	}

	if err := x.c.Trust(ctxT(t, 10*time.Second), ca.CertPEM()); err != nil {
		t.Fatal(err)
	}
	line := strings.Split(strings.TrimSpace(ca.CertPEM()), "\n")[1]
	code = fmt.Sprintf("import os\nb = open(os.environ['SSL_CERT_FILE']).read()\nprint(%q in b, os.environ['REQUESTS_CA_BUNDLE'] == os.environ['SSL_CERT_FILE'], end='')", line)
	if got := x.run(t, code); got != "True True" {
		t.Errorf("the trust bundle after Trust: %s", got)
	}
	// Nothing else leaves: no name resolves inside.
	if got := x.run(t, "import socket\ntry:\n  socket.getaddrinfo('example.com', 80); print('resolved', end='')\nexcept OSError: print('no', end='')"); got != "no" {
		t.Errorf("a name resolved inside the sandbox: %s", got)
	}
}

// hostIP returns a non-loopback IPv4 address of the host, or "".
func hostIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

func testMemory(t *testing.T, b sandbox.Backend) {
	l := limits
	l.MemoryMB = 256
	x := start(t, b, l)
	bomb := "a = []\nwhile True:\n    a.append(b'\\x01' * (16 << 20))"
	if !b.Capabilities().OOMReported {
		// The bomb may end the whole sandbox: either its kernel crashed, or the guest is
		// gone with the sandbox; never does it run on past the limit.
		r, err := x.c.Execute(ctxT(t, 90*time.Second), api.ExecuteRequest{Code: bomb, TimeoutS: 60}, nil)
		switch {
		case err == nil && r.Status == api.StatusCrashed:
			if got := x.run(t, "print(1 + 1, end='')"); got != "2" {
				t.Errorf("the cell after the crash printed %q", got)
			}
		case errors.Is(err, errdefs.ErrUnavailable):
			select {
			case <-x.sb.Done():
			case <-time.After(30 * time.Second):
				t.Errorf("the guest is gone (%v) but the sandbox runs on", err)
			}
		case err != nil:
			t.Errorf("memory bomb: %v, want the guest gone or status crashed", err)
		default:
			t.Errorf("memory bomb: status %s (%s), want crashed; outputs %+v", r.Status, r.Message, r.Outputs)
		}
		return
	}
	r := x.exec(t, bomb, 60)
	if r.Status != api.StatusOOM {
		t.Errorf("memory bomb: status %s (%s), want oom; outputs %+v", r.Status, r.Message, r.Outputs)
	}
	if got := x.run(t, "print(1 + 1, end='')"); got != "2" {
		t.Errorf("the cell after the OOM printed %q", got)
	}
	// A bomb that first lowers its own oom_score_adj (gVisor lets it) is found all the same.
	r = x.exec(t, "try:\n    open('/proc/self/oom_score_adj', 'w').write('-1000')\nexcept OSError:\n    pass\n"+bomb, 60)
	if r.Status != api.StatusOOM {
		t.Errorf("memory bomb at oom_score_adj -1000: status %s (%s), want oom", r.Status, r.Message)
	}
	// A bomb in a subprocess is what goes, not the kernel that started it: its variables stay.
	r = x.exec(t, "import subprocess, sys\nkept = 41\np = subprocess.run([sys.executable, '-c', "+fmt.Sprintf("%q", bomb)+"])\nprint(p.returncode, end='')", 60)
	if got := stdout(r); r.Status != api.StatusOK || got != "-9" {
		t.Errorf("a subprocess's memory bomb: status %s (%s), printed %q; want ok, -9", r.Status, r.Message, got)
	}
	if got := x.run(t, "print(kept + 1, end='')"); got != "42" {
		t.Errorf("after a subprocess's memory bomb the kernel printed %q; want its variables kept", got)
	}
}

func testPids(t *testing.T, b sandbox.Backend) {
	l := limits
	l.Pids = 64
	x := start(t, b, l)
	// User code cannot lift its limit: raise a pids.max, leave for a cgroup without one
	// (moving the kernel), or make a cgroup of its own.
	attack := `import glob, os
done = []
for f in glob.glob('/sys/fs/cgroup/**/pids.max', recursive=True):
    try:
        open(f, 'w').write('max')
        done.append(f)
    except OSError:
        pass
for f in glob.glob('/sys/fs/cgroup/**/cgroup.procs', recursive=True) + glob.glob('/sys/fs/cgroup/**/tasks', recursive=True):
    try:
        open(f, 'w').write(str(os.getpid()))
        done.append(f)
    except OSError:
        pass
for d in glob.glob('/sys/fs/cgroup/**/', recursive=True):
    try:
        os.mkdir(d + 'mine')
    except OSError:
        continue
    if os.path.exists(d + 'mine/cgroup.procs'):  # a cgroup, not a folder of a tmpfs (crun's)
        done.append(d + 'mine')
    os.rmdir(d + 'mine')
print(done, end='')`
	if got := x.run(t, attack); got != "[]" {
		t.Errorf("user code changed the cgroups: %s", got)
	}
	// Processes past the limit are refused.
	if n := x.popen(t, 200); n >= 64 || n == 0 {
		t.Errorf("started %d processes under a limit of 64", n)
	}
	// A fork bomb that runs for a while does not take the sandbox down.
	r, err := x.c.Command(ctxT(t, 60*time.Second), api.CommandRequest{
		Cmd: []string{"bash", "-c", ":(){ :|:& };:; sleep 3"}, TimeoutS: 10,
	})
	if err != nil {
		t.Fatalf("fork bomb: %v", err)
	}
	t.Logf("fork bomb: status %s, exit %d", r.Status, r.ExitCode)
	if got := x.run(t, "print(1 + 1, end='')"); got != "2" {
		t.Errorf("after the fork bomb the kernel printed %q", got)
	}
	ok := testbin.Eventually(30*time.Second, func() bool {
		r, err := x.c.Command(ctxT(t, 30*time.Second), api.CommandRequest{Cmd: []string{"echo", "ok"}, TimeoutS: 5})
		return err == nil && r.Status == api.StatusOK && r.Stdout == "ok\n"
	})
	if !ok {
		t.Error("commands do not run again after the fork bomb")
	}
}

// testPidsRestart: a kernel's children take every pid; a command cannot start beside them;
// a restart still can (the old kernel and its children go first), and leaves neither
// processes nor zombies behind (the guest, process 1, reaps them: they would hold the
// limit). gVisor left zombies here once.
func testPidsRestart(t *testing.T, b sandbox.Backend) {
	l := limits
	l.Pids = 64
	x := start(t, b, l)
	// Each child becomes a sleep at once: under gVisor a forked copy of the kernel costs
	// some 40 MB (7 MB under runc), and 64 of them would meet the memory limit first. A
	// fork of the kernel takes some 0.3 s there (0.03 s under runc): hence 60 s.
	r := x.exec(t, `import os
n = 0
try:
    while True:
        if os.fork() == 0:
            os.execv('/bin/sleep', ['sleep', '60'])
        n += 1
except OSError as e:
    print("stopped", n, type(e).__name__)
`, 60)
	var n int
	var ename string
	if _, err := fmt.Sscanf(stdout(r), "stopped %d %s", &n, &ename); r.Status != api.StatusOK || err != nil || n >= l.Pids {
		t.Fatalf("fork loop: status %s (%s), stdout %q", r.Status, r.Message, stdout(r))
	}
	cr, err := x.c.Command(ctxT(t, 60*time.Second), api.CommandRequest{Cmd: []string{"bash", "-c", ":(){ :|:& };:"}, TimeoutS: 3})
	if err != nil || cr.Status == api.StatusOK {
		t.Errorf("bash fork bomb with every pid taken: %+v, %v", cr, err)
	}
	if err := x.c.Restart(ctxT(t, 60*time.Second)); err != nil {
		t.Fatalf("restart with the pids all taken: %v", err)
	}
	if got := x.run(t, "print(6 * 7, end='')"); got != "42" {
		t.Fatalf("after the restart the kernel printed %q", got)
	}
	// The old kernel's children are still ending as the restart returns, and the guest reaps
	// each on SIGCHLD: a process or a zombie may show for a moment (under gVisor longer);
	// none may stay.
	begin := time.Now()
	err = testbin.Poll(10*time.Second, func() error {
		left := x.run(t, `import os
procs = []
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            procs.append(open(f'/proc/{p}/stat').read().split(') ')[-1][0])
        except OSError:
            pass  # it ended meanwhile
print(len(procs), procs.count('Z'))`)
		var procs, zombies int
		if _, err := fmt.Sscanf(left, "%d %d", &procs, &zombies); err != nil || procs >= 10 || zombies > 0 {
			return fmt.Errorf("processes, zombies: %q", left)
		}
		return nil
	})
	if err != nil {
		t.Errorf("the old kernel's children outlived the restart: %v", err)
	} else if d := time.Since(begin); d > time.Second {
		t.Logf("the old kernel's children were gone %v after the restart", d.Round(time.Millisecond))
	}
}

// HoldPids is a cell that takes every pid the sandbox's limit leaves, with processes that
// left the kernel's tree (a double fork) and then the kernel's own children, and prints
// "held N": what a command or a restart meets at the pids limit.
const HoldPids = `import os
n = 0
try:
    while True:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                if os.fork() == 0:
                    os.execv('/bin/sleep', ['sleep', '600'])
                code = 0
            finally:
                os._exit(code)
        if os.waitpid(pid, 0)[1] != 0:
            break
        n += 1
except OSError:
    pass
try:  # and the last pids, as the kernel's own children
    while True:
        if os.fork() == 0:
            os.execv('/bin/sleep', ['sleep', '600'])
except OSError:
    pass
print("held", n)
`

// testPidsHeld: with every pid held by processes that left the kernel's tree (a double
// fork), a command cannot start and says why; a restart still can.
func testPidsHeld(t *testing.T, b sandbox.Backend) {
	l := limits
	l.Pids = 40
	x := start(t, b, l)
	r := x.exec(t, HoldPids, 60)
	if !strings.HasPrefix(stdout(r), "held ") {
		t.Fatalf("the double-fork loop: status %s (%s), outputs %+v", r.Status, r.Message, r.Outputs)
	}
	if cr := x.command(t, "true"); cr.Status == api.StatusOK || !strings.Contains(cr.Message, "limit of processes") {
		t.Errorf("a command with every pid held: %+v", cr)
	}
	if err := x.c.Restart(ctxT(t, 60*time.Second)); err != nil {
		t.Errorf("restart with every pid held: %v", err)
	}
	if got := x.run(t, "print(6 * 7, end='')"); got != "42" {
		t.Errorf("after the restart the kernel printed %q", got)
	}
}

// ForkBomb forks children that sleep, in a loop, until a fork fails, and prints how many
// it started and how the fork failed.
const ForkBomb = `import os, time
n = 0
try:
    for i in range(100000):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print('fork failed after', n, 'children:', type(e).__name__, e.errno)
`

// testForkBomb: a fork bomb in a sandbox of the default limits (1 GiB, 256 processes) ends
// at a fork that fails (EAGAIN), as at the process limit, on every backend: not in an OOM
// kill that restarts the kernel. Under gVisor a forked kernel takes some 28 MiB at once
// (the sentry copies on write 2 MiB at a time), so memory would run out at a few dozen
// children: there the guest refuses new processes while memory is short.
func testForkBomb(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	x.run(t, "kept = 41")
	r := x.exec(t, ForkBomb, 120)
	var n, errno int
	var ename string
	_, err := fmt.Sscanf(stdout(r), "fork failed after %d children: %s %d", &n, &ename, &errno)
	if r.Status != api.StatusOK || err != nil || ename != "BlockingIOError" || n >= limits.Pids {
		t.Fatalf("fork bomb: status %s (%s), outputs %+v; want a fork that fails with EAGAIN under %d processes", r.Status, r.Message, r.Outputs, limits.Pids)
	}
	t.Logf("fork bomb: %d children, then EAGAIN", n)
	if got := x.run(t, "print(kept + 1, end='')"); got != "42" {
		t.Errorf("after the fork bomb the kernel printed %q; want its variables kept", got)
	}
	// A restart still can (its children go with the old kernel, and their memory).
	if err := x.c.Restart(ctxT(t, 60*time.Second)); err != nil {
		t.Fatalf("restart after the fork bomb: %v", err)
	}
	if got := x.run(t, "print(6 * 7, end='')"); got != "42" {
		t.Errorf("after the restart the kernel printed %q", got)
	}
}

// cpuShareCode is busy for 1.5 s of wall time and prints the share of a core it got.
const cpuShareCode = "import time\nw, c = time.monotonic(), time.process_time()\nwhile time.monotonic() - w < 1.5: pass\nprint(round((time.process_time() - c) / (time.monotonic() - w), 2), end='')"

func testCPU(t *testing.T, b sandbox.Backend) {
	l := limits
	l.CPUs = 0.25
	if !b.Capabilities().CPUClock {
		testCPUWork(t, b, l)
		return
	}
	x := start(t, b, l)
	// Busy for 1.5 s of wall time; at a quarter core that is about 0.4 s of CPU.
	got := x.run(t, cpuShareCode)
	var share float64
	fmt.Sscan(got, &share)
	t.Logf("CPU share at a 0.25 limit: %s", got)
	if share > 0.6 {
		t.Errorf("a busy loop got %.2f of a core under a 0.25 CPU limit", share)
	}
}

// testCPUWork checks a CPU limit where the sandbox's CPU clocks count throttled time: a
// busy loop gets much less done in the same wall time under l than without a CPU limit.
// The two sandboxes run one after the other, so they do not compete.
func testCPUWork(t *testing.T, b sandbox.Backend, l sandbox.Limits) {
	code := "import time\nn, w = 0, time.monotonic()\nwhile time.monotonic() - w < 1.5: n += 1\nprint(n, end='')"
	loops := func(l sandbox.Limits) float64 {
		var n float64
		fmt.Sscan(start(t, b, l).run(t, code), &n)
		return n
	}
	cpus := l.CPUs
	limited := loops(l)
	l.CPUs = 0
	free := loops(l)
	t.Logf("busy loop: %.0f iterations under a %.2f CPU limit, %.0f without", limited, cpus, free)
	if free == 0 || limited/free > 0.6 {
		t.Errorf("a busy loop did %.0f iterations under a %.2f CPU limit and %.0f without", limited, cpus, free)
	}
}

// testLimitsChange gives a running sandbox lower limits, then higher ones (sandbox.Updater),
// and checks each from inside; a backend without Capabilities.LimitsChange must refuse.
func testLimitsChange(t *testing.T, b sandbox.Backend) {
	x := start(t, b, limits)
	up, ok := x.sb.(sandbox.Updater)
	if !b.Capabilities().LimitsChange {
		if ok {
			if err := up.Update(ctxT(t, 30*time.Second), limits); !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("Update of a backend without LimitsChange: %v, want ErrUnsupported", err)
			}
		}
		if got := x.run(t, "print(1 + 1, end='')"); got != "2" {
			t.Errorf("after the refused update the kernel printed %q", got)
		}
		return
	}
	if !ok {
		t.Fatalf("a backend with LimitsChange has sandboxes (%T) that are not Updaters", x.sb)
	}
	update := func(l sandbox.Limits) {
		t.Helper()
		if err := up.Update(ctxT(t, 30*time.Second), l); err != nil {
			t.Fatalf("Update(%+v): %v", l, err)
		}
	}
	// 300 MiB in 16 MiB steps, then let go.
	alloc := "a = []\nfor i in range(19):\n    a.append(b'\\x01' * (16 << 20))\ndel a\nprint('ok', end='')"

	low := limits
	low.MemoryMB, low.Pids, low.CPUs = 160, 48, 0.25
	update(low)
	if n := x.popen(t, 100); n == 0 || n >= low.Pids {
		t.Errorf("started %d processes after the pids limit was lowered to %d", n, low.Pids)
	}
	if r := x.exec(t, alloc, 60); r.Status != api.StatusOOM {
		t.Errorf("300 MiB after the memory limit was lowered to %d MiB: status %s (%s), want oom", low.MemoryMB, r.Status, r.Message)
	}
	if b.Capabilities().CPUClock {
		var share float64
		fmt.Sscan(x.run(t, cpuShareCode), &share)
		if share > 0.6 {
			t.Errorf("a busy loop got %.2f of a core after the CPU limit was lowered to %.2f", share, low.CPUs)
		}
	}

	// Raised again: the memory limit grows past what the lower one allowed (on cgroup v1
	// with swap limited, memsw must be raised first).
	high := limits
	high.Pids = 128
	update(high)
	if n := x.popen(t, 80); n != 80 {
		t.Errorf("started %d of 80 processes after the pids limit was raised to %d", n, high.Pids)
	}
	if r := x.exec(t, alloc, 60); r.Status != api.StatusOK || stdout(r) != "ok" {
		t.Errorf("300 MiB after the memory limit was raised to %d MiB: status %s (%s) %q", high.MemoryMB, r.Status, r.Message, stdout(r))
	}
}

// testGuestOutOfReach attacks the guest from user code, as a hostile cell would: its
// memory, descriptors, environment, signals, its uid and its control channel.
func testGuestOutOfReach(t *testing.T, b sandbox.Backend) {
	// The server's environment must not reach the sandbox: where user code can read the
	// guest's environment (without GuestProcPrivate), that keeps the server's secrets.
	secret := "cellbox-suite-" + ID()
	t.Setenv("CELLBOX_SUITE_SECRET", secret)
	x := start(t, b, limits)
	g := x.c.Hello().PID
	t.Run("attack/server_environment", func(t *testing.T) {
		code := fmt.Sprintf("import os\nenv = repr(os.environ)\ntry:\n    env += open('/proc/%d/environ', 'rb').read().decode()\nexcept OSError:\n    pass\nprint(%q in env, end='')", g, secret)
		if got := x.run(t, code); got != "False" {
			t.Errorf("user code finds the server's environment in its own or the guest's: %s", got)
		}
	})
	attempt := func(code string) string {
		return fmt.Sprintf("try:\n%s\n    print('done', end='')\nexcept OSError as e:\n    print('refused', end='')", indent(code))
	}
	checks := []struct{ name, code, want string }{
		{"attack/proc_mem_write", fmt.Sprintf("open('/proc/%d/mem', 'r+b')", g), "refused"},
		{"attack/proc_mem_read", fmt.Sprintf("open('/proc/%d/mem', 'rb').read(1)", g), "refused"},
		{"attack/proc_root", fmt.Sprintf("import os\nos.listdir('/proc/%d/root/')", g), "refused"},
		{"attack/proc_cwd", fmt.Sprintf("import os\nos.readlink('/proc/%d/cwd')", g), "refused"},
		{"attack/setuid_guest", fmt.Sprintf("import os\nos.setuid(%d)", x.c.Hello().UID), "refused"},
		{"attack/setuid_root", "import os\nos.setuid(0)", "refused"},
	}
	if b.Capabilities().GuestProcPrivate {
		checks = append(checks, []struct{ name, code, want string }{
			{"attack/proc_fd_list", fmt.Sprintf("import os\nos.listdir('/proc/%d/fd')", g), "refused"},
			{"attack/proc_environ", fmt.Sprintf("open('/proc/%d/environ', 'rb').read()", g), "refused"},
			{"attack/proc_maps", fmt.Sprintf("open('/proc/%d/maps').read()", g), "refused"},
		}...)
	}
	for _, sig := range []string{"SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGSTOP", "SIGUSR1", "SIGQUIT", "SIGSEGV"} {
		checks = append(checks, struct{ name, code, want string }{"attack/signal_" + sig,
			fmt.Sprintf("import os, signal\nos.kill(%d, signal.%s)", g, sig), "refused"})
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if got := x.run(t, attempt(c.code)); got != c.want {
				t.Errorf("%s from user code: %q, want %q", c.code, got, c.want)
			}
		})
	}
	t.Run("attack/proc_fd_open", func(t *testing.T) {
		// Reopening any of the guest's descriptors, to read or to write: nothing but what
		// user code may open anyway (the workspace; /dev/null, the guest's stdin where the
		// runtime hands it over as a host file, as gVisor does).
		code := fmt.Sprintf(`import os, stat
ws = os.stat('/mnt/data')
bad = []
for fd in range(64):
    for mode in (os.O_RDONLY, os.O_WRONLY):
        try:
            f = os.open('/proc/%d/fd/%%d' %% fd, mode)
        except OSError:
            continue
        st = os.fstat(f)
        os.close(f)
        if stat.S_ISDIR(st.st_mode) and os.path.samestat(st, ws):
            continue
        if stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3):
            continue
        bad.append((fd, mode))
print(bad, end='')`, g)
		if got := x.run(t, code); got != "[]" {
			t.Errorf("user code reopened the guest's descriptors (fd, mode) %s", got)
		}
	})
	t.Run("attack/uid", func(t *testing.T) {
		got := x.run(t, "import os\nprint(os.getuid(), os.geteuid(), end='')")
		if want := fmt.Sprintf("%d %d", x.c.Hello().UID, x.c.Hello().UID); got == want || strings.HasPrefix(got, "0 ") {
			t.Errorf("user code runs as uid %s; the guest is uid %d", got, x.c.Hello().UID)
		}
	})
	t.Run("attack/unix_sockets", func(t *testing.T) {
		// Every Unix socket the sandbox can name: none of the guest's may take a connection.
		code := `import socket
names = set()
for line in open('/proc/net/unix').readlines()[1:]:
    f = line.split()
    if len(f) >= 8:
        names.add(f[7])
ok = []
for n in sorted(names):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect('\0' + n[1:] if n.startswith('@') else n)
        ok.append(n)
    except OSError:
        pass
    finally:
        s.close()
print(ok, end='')`
		if got := x.run(t, code); got != "[]" {
			t.Errorf("user code connected to Unix sockets %s", got)
		}
	})
	t.Run("attack/kill_all", func(t *testing.T) {
		// kill(-1) signals every process the caller may signal: the kernel dies, the guest
		// does not, and the session goes on.
		r := x.command(t, "sh", "-c", "kill -9 -1; sleep 1")
		t.Logf("kill -9 -1: %s exit %d", r.Status, r.ExitCode)
		r2 := x.exec(t, "print('after', end='')", 30)
		if r2.Status != api.StatusOK && r2.Status != api.StatusCrashed {
			t.Fatalf("after kill -9 -1: status %s (%s)", r2.Status, r2.Message)
		}
		if got := x.run(t, "print('alive', end='')"); got != "alive" {
			t.Errorf("after kill -9 -1: %q", got)
		}
	})
	// The guest still serves after every attack above.
	if got := x.run(t, "print('still here', end='')"); got != "still here" {
		t.Errorf("after the attacks: %q", got)
	}
	if h := x.c.Hello(); h.PID != g {
		t.Errorf("the guest changed: pid %d, was %d", h.PID, g)
	}
}

func indent(code string) string {
	lines := strings.Split(code, "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

// WithImage is b with every sandbox on image: Run(t, WithImage(b, "default")) runs the
// suite on an image's root filesystem.
func WithImage(b sandbox.Backend, image string) sandbox.Backend {
	return imageBackend{Backend: b, image: image}
}

type imageBackend struct {
	sandbox.Backend
	image string
}

func (b imageBackend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	spec.Image = b.image
	return b.Backend.Create(ctx, spec)
}

package runc

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/internal/guest/pyrunner"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/runc/template"
	"github.com/cellbox/cellbox/internal/sandbox/sandboxtest"
	"github.com/cellbox/cellbox/internal/testbin"
)

// kernelPid is the host pid of the sandbox's kernel: the guest's one child.
func kernelPid(t *testing.T, sb *Sandbox) int {
	t.Helper()
	guest, err := sb.readPid()
	if err != nil {
		t.Fatal(err)
	}
	// A forked kernel becomes the guest's child when the process that forked it has exited,
	// which may be a moment after the guest has the kernel's pid (and the kernel answers).
	var f []string
	testbin.Eventually(5*time.Second, func() bool {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", guest, guest))
		f = strings.Fields(string(data))
		return err == nil && len(f) == 1
	})
	if len(f) != 1 {
		t.Fatalf("the guest's children: %q, want the kernel alone", f)
	}
	pid, _ := strconv.Atoi(f[0])
	return pid
}

// A kernel forked from the template is in the sandbox as a kernel started by the guest is:
// its uid, no capability in any set, no_new_privs, the seccomp filter, the sandbox's
// cgroups and namespaces, its own session, the guest as its parent, and no descriptor but
// its five and /dev/null.
func TestForkedKernel(t *testing.T) {
	needRuntime(t, "runc")
	b := newBackend(t, "runc", testbin.Cellbox(t))
	sb, c := realGuest(t, b)
	k := kernelPid(t, sb)
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", k))
	if !strings.Contains(string(cmdline), pyrunner.TemplateScriptEnv) {
		t.Fatalf("the kernel was not forked from the template: %q", cmdline)
	}
	// From the host: its namespaces are the guest's, and so are its cgroups.
	guest, _ := sb.readPid()
	for _, ns := range []string{"mnt", "pid", "net", "ipc", "uts", "cgroup", "user"} {
		a, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", guest, ns))
		b, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", k, ns))
		if a == "" || a != b {
			t.Errorf("namespace %s: guest %s, kernel %s", ns, a, b)
		}
	}
	gc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", guest))
	kc, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", k))
	if string(gc) != string(kc) || len(gc) == 0 {
		t.Errorf("cgroups: guest\n%s\nkernel\n%s", gc, kc)
	}
	// From inside.
	out := runCode(t, c, `import os
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
fds = {}
for n in os.listdir("/proc/self/fd"):
    try:
        fds[int(n)] = os.readlink("/proc/self/fd/" + n)
    except OSError:
        pass
print({k: status[k].split() for k in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")},
      os.getppid(), os.getsid(0) == os.getpid(), os.getpgrp() == os.getpid(), sorted(fds.items()), sep="\n")`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %q", out)
	}
	uid := strconv.Itoa(int(b.uid))
	for _, want := range []string{"'Uid': ['" + uid + "', '" + uid + "', '" + uid + "', '" + uid + "']", "'Groups': []",
		"'CapInh': ['0000000000000000']", "'CapPrm': ['0000000000000000']", "'CapEff': ['0000000000000000']",
		"'CapBnd': ['0000000000000000']", "'CapAmb': ['0000000000000000']", "'NoNewPrivs': ['1']", "'Seccomp': ['2']"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("status lacks %s: %s", want, lines[0])
		}
	}
	if lines[1] != "1" || lines[2] != "True" || lines[3] != "True" {
		t.Errorf("parent %s (want the guest, 1), own session %s, own group %s", lines[1], lines[2], lines[3])
	}
	// Descriptors: 0 /dev/null, 1-4 pipes, and above them /dev/null only (IPython's).
	var fds [][2]any
	if err := json.Unmarshal([]byte(strings.NewReplacer("(", "[", ")", "]", "'", `"`).Replace(lines[4])), &fds); err != nil {
		t.Fatalf("descriptors %s: %v", lines[4], err)
	}
	for _, fd := range fds {
		n, target := int(fd[0].(float64)), fd[1].(string)
		switch {
		case n == 0 && target == "/dev/null", n >= 1 && n <= 4 && strings.HasPrefix(target, "pipe:"):
		case n > 4 && target == "/dev/null":
		case strings.HasPrefix(target, "/proc/"): // the listing's own
		default:
			t.Errorf("descriptor %d → %s in a forked kernel", n, target)
		}
	}
	// Signals to everything it may signal reach neither the guest nor the template.
	runCode(t, c, "import os, signal\ntry:\n    os.kill(-1, signal.SIGTERM)\nexcept OSError:\n    pass")
	if out := runCode(t, c, "print(1 + 1)"); strings.TrimSpace(out) != "2" {
		t.Errorf("after kill(-1): %q", out)
	}
	if !templateAlive(t, b) {
		t.Error("the template died of the kernel's kill(-1)")
	}
}

// TestTemplateConfined: the template keeps only the capabilities that putting a kernel
// into a sandbox takes, in every set, and no_new_privs.
func TestTemplateConfined(t *testing.T) {
	needRuntime(t, "runc")
	b := newBackend(t, "runc", testbin.Cellbox(t))
	realGuest(t, b) // its template is up
	st, _ := os.ReadFile(templateProc(t) + "/status")
	status := string(st)
	// SETGID, SETUID, SETPCAP, SYS_CHROOT, SYS_PTRACE, SYS_ADMIN, SYS_RESOURCE; less what this test's
	// own root lacks (a container's root may have no SYS_RESOURCE).
	self, _ := os.ReadFile("/proc/self/status")
	var mine uint64
	for _, l := range strings.Split(string(self), "\n") {
		if v, ok := strings.CutPrefix(l, "CapPrm:\t"); ok {
			mine, _ = strconv.ParseUint(v, 16, 64)
		}
	}
	keep := fmt.Sprintf("%016x", uint64(1<<6|1<<7|1<<8|1<<18|1<<19|1<<21|1<<24)&mine)
	for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t" + keep, "CapEff:\t" + keep,
		"CapBnd:\t" + keep, "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(status, want+"\n") {
			t.Errorf("the template's status lacks %q:\n%s", want, status)
		}
	}
}

// TestForkedKernelsOwnState: kernels are forked without os.fork's after-fork hooks, so each
// must get its own random state (random's and numpy's global generators would otherwise
// be the template's, the same in every session) and its own thread's native id.
func TestForkedKernelsOwnState(t *testing.T) {
	needRuntime(t, "runc")
	b := newBackend(t, "runc", testbin.Cellbox(t))
	const code = `import os, random, threading, numpy
print(random.random(), numpy.random.random(), threading.main_thread().native_id == threading.get_native_id() == os.getpid())`
	var seen []string
	for range 2 {
		sb, c := realGuest(t, b)
		for i := range 2 {
			if i > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				err := c.Restart(ctx)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			// After a restart the old kernel may be ending still (a zombie has no command
			// line) beside the new one: wait for the guest's one child, with its command line.
			guest, _ := sb.readPid()
			var cmdline []byte
			testbin.Eventually(10*time.Second, func() bool {
				c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", guest, guest))
				f := strings.Fields(string(c))
				if len(f) != 1 {
					return false
				}
				cmdline, _ = os.ReadFile(fmt.Sprintf("/proc/%s/cmdline", f[0]))
				return len(cmdline) > 0
			})
			if !strings.Contains(string(cmdline), pyrunner.TemplateScriptEnv) {
				t.Fatalf("the kernel was not forked from the template: %q", cmdline)
			}
			out := strings.Fields(runCode(t, c, code))
			if len(out) != 3 || out[2] != "True" {
				t.Fatalf("got %q, want two numbers and True (the thread's native id is the kernel's)", out)
			}
			for _, v := range out[:2] {
				if slices.Contains(seen, v) {
					t.Errorf("two kernels drew the same first random number %s: their generators are seeded alike", v)
				}
				seen = append(seen, v)
			}
		}
	}
}

// templateAlive reports whether the host root's template answers: a connection from the
// test (root, on the host) is refused with an error, as its pidfd is not its own.
func templateAlive(t *testing.T, b *Backend) bool {
	t.Helper()
	ans, err := askTemplate(filepath.Join(b.templates.dir, "host", template.Socket), `{"python":"x","cwd":"/","env":[]}`+"\n", 6, true)
	return err == nil && strings.HasPrefix(ans, "error ")
}

// askTemplate sends the template a request with n descriptors (the first a pidfd of this
// process when ownPidfd, else of process 1) and returns its answer.
func askTemplate(path, req string, n int, ownPidfd bool) (string, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("unix", path)
	if err != nil {
		return "", err
	}
	defer c.Close()
	conn := c.(*net.UnixConn)
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	target := os.Getpid()
	if !ownPidfd {
		target = 1
	}
	pidfd, err := unix.PidfdOpen(target, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(pidfd)
	fds := []int{pidfd}
	for len(fds) < n {
		fds = append(fds, pidfd)
	}
	if _, _, err := conn.WriteMsgUnix([]byte(req), unix.UnixRights(fds...), nil); err != nil {
		return "", err
	}
	conn.CloseWrite()
	var ans strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		ans.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return ans.String(), nil
}

// Attacks on the template's socket (what a compromised guest could send): a pidfd of
// another process, too few descriptors, garbage, another interpreter, an environment that
// differs where Python reads it at start. Each is refused with an error and no kernel; the
// template goes on serving sandboxes.
func TestAttackTemplateRequests(t *testing.T) {
	needRuntime(t, "runc")
	b := newBackend(t, "runc", testbin.Cellbox(t))
	sock := filepath.Join(b.templates.dir, "host", template.Socket)
	// The template's own environment, as a guest's kernel has it.
	base := sandbox.GuestEnv(nil)
	for k, v := range pyrunner.KernelEnv(pyrunner.KernelTmp) {
		base = append(base, k+"="+v)
	}
	valid := func(python string, env ...string) string {
		r, _ := json.Marshal(map[string]any{"python": python, "cwd": "/", "env": append(slices.Clone(base), env...)})
		return string(r) + "\n"
	}
	for _, c := range []struct {
		name, req string
		fds       int
		own       bool
		says      string
	}{
		{"a pidfd of another process", valid(sandboxtest.Python), 6, false, "pidfd of the guest that asks"},
		{"five descriptors", valid(sandboxtest.Python), 5, true, "want 6 descriptors"},
		{"no newline, then EOF", `{"python":`, 6, true, "cut short"},
		{"not JSON", "hello\n", 6, true, "error"},
		{"no env", `{"python":"` + sandboxtest.Python + `","cwd":"/"}` + "\n", 6, true, "malformed"},
		{"another interpreter", valid("/usr/bin/python2"), 6, true, "not /usr/bin/python2"},
		{"LD_PRELOAD", valid(sandboxtest.Python, "LD_PRELOAD=/tmp/x.so"), 6, true, "error env environment: LD_PRELOAD"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ans, err := askTemplate(sock, c.req, c.fds, c.own)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(ans, "error ") || !strings.Contains(ans, c.says) || strings.Contains(ans, "pid ") {
				t.Errorf("answer %q, want an error saying %q", ans, c.says)
			}
		})
	}
	// A process that is not root (user code's uid) is refused whatever it sends.
	t.Run("not root", func(t *testing.T) {
		cmd := exec.Command(sandboxtest.Python, "-c", `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{}\n')
s.shutdown(socket.SHUT_WR)
print(s.recv(4096).decode())`, sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: b.uid, Gid: b.gid}}
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), "Permission denied") && !strings.Contains(string(out), "only the guest") {
			t.Errorf("a process of uid %d got %q", b.uid, out)
		}
	})
	// Connections that send nothing: each ties up one fork for 5 s, and at most 16 exist.
	var idle []net.Conn
	for range 40 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	b.templates.mu.Lock()
	tpid := b.templates.byDir[filepath.Join(b.templates.dir, "host")].t.Pid()
	b.templates.mu.Unlock()
	// Sampled over a window, not waited for: the count must stay within 16 all along.
	most := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", tpid, tpid))
		most = max(most, len(strings.Fields(string(kids))))
	}
	if most > 16 || most == 0 {
		t.Errorf("the template had up to %d children with 40 idle connections, want 1 to 16", most)
	}
	for _, c := range idle {
		c.Close()
	}
	// Still serving.
	_, c := realGuest(t, b)
	if out := runCode(t, c, "print(40 + 2)"); strings.TrimSpace(out) != "42" {
		t.Errorf("a sandbox after the attacks: %q", out)
	}
}

// A template past its age is replaced: the next sandbox makes a new one, which takes over
// the socket once ready; the old one ends, and kernels forked from either work.
func TestTemplateRenewed(t *testing.T) {
	needRuntime(t, "runc")
	b := newBackend(t, "runc", testbin.Cellbox(t))
	_, c1 := realGuest(t, b)
	dir := filepath.Join(b.templates.dir, "host")
	b.templates.mu.Lock()
	old := b.templates.byDir[dir].t
	b.templates.mu.Unlock()
	setRenew := func(d time.Duration) { // read under the lock
		b.templates.mu.Lock()
		renewAfter = d
		b.templates.mu.Unlock()
	}
	setRenew(0)
	t.Cleanup(func() { setRenew(time.Hour) })
	sb2, c2 := realGuest(t, b)
	setRenew(time.Hour)
	b.templates.mu.Lock()
	renewed := b.templates.byDir[dir].t
	b.templates.mu.Unlock()
	if renewed == old {
		t.Fatal("the template was not renewed")
	}
	select {
	case <-old.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the old template still runs")
	}
	for i, c := range []*guestproto.Client{c1, c2} {
		if out := runCode(t, c, "import pandas\nprint(6 * 7)"); strings.TrimSpace(out) != "42" {
			t.Errorf("sandbox %d: %q", i+1, out)
		}
	}
	// sb2's kernel came from one of them (the new one once it was ready, else the old one
	// still serving): forked either way, never started afresh.
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", kernelPid(t, sb2)))
	if !strings.Contains(string(cmdline), pyrunner.TemplateScriptEnv) {
		t.Errorf("the kernel during the renewal was not forked: %q", cmdline)
	}
	// And the next sandbox gets its kernel from the new one.
	<-renewed.Ready()
	sb3, _ := realGuest(t, b)
	k := kernelPid(t, sb3)
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", k))
	if !strings.Contains(string(status), "Seccomp:\t2") {
		t.Errorf("the kernel after the renewal: %s", status)
	}
}

// TestTemplateOfAnOlderBuildEnds: a template for a new build of an image ends the one of
// the image's older build (else each rebuild would leave a template of ~120 MiB running);
// another image's template runs on.
func TestTemplateOfAnOlderBuildEnds(t *testing.T) {
	needRuntime(t, "runc")
	testbin.NeedIPython(t)
	b := newBackend(t, "runc", testbin.Cellbox(t))
	start := func(key, img string) *template.Template {
		t.Helper()
		dir := b.templates.get(key, img, "", "") // the host's root stands for each build's
		b.templates.mu.Lock()
		r := b.templates.byDir[dir]
		b.templates.mu.Unlock()
		if r == nil || r.t == nil {
			t.Fatalf("no template for %s", key)
		}
		select {
		case <-r.t.Ready():
		case <-r.t.Done():
			t.Fatalf("template %s ended", key)
		case <-time.After(time.Minute):
			t.Fatalf("template %s not ready", key)
		}
		return r.t
	}
	old := start("pictures-1111", "pictures")
	other := start("maps-3333", "maps")
	start("pictures-2222", "pictures")
	select {
	case <-old.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the older build's template still runs")
	}
	b.templates.mu.Lock()
	_, kept := b.templates.byDir[filepath.Join(b.templates.dir, "pictures-1111")]
	b.templates.mu.Unlock()
	if kept {
		t.Error("the older build's template is still listed")
	}
	if done(other) {
		t.Error("another image's template ended")
	}
}

// TestTemplateDropsWorkspaceMounts: a mount under Kernels.Detach (a workspace) made before
// the template starts is not in the template's mount namespace, where it would stay
// mounted after the server unmounts it (its file system unsynced to its image).
func TestTemplateDropsWorkspaceMounts(t *testing.T) {
	needRuntime(t, "runc")
	ws := t.TempDir()
	mp := filepath.Join(ws, "w1")
	os.Mkdir(mp, 0o700)
	if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mp, unix.MNT_DETACH) })
	// Another server's workspace on the same host (its store's layout), not in Detach.
	other := filepath.Join(t.TempDir(), "workspaces", "0123abcd")
	os.MkdirAll(other, 0o700)
	if err := unix.Mount("tmpfs", other, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(other, unix.MNT_DETACH) })
	b := newBackendKernels(t, "runc", testbin.Cellbox(t), nil, &Kernels{Python: sandboxtest.Python, Detach: []string{ws}})
	realGuest(t, b) // its template is up
	mountinfo, _ := os.ReadFile(templateProc(t) + "/mountinfo")
	if len(mountinfo) == 0 {
		t.Fatal("the template's mountinfo is empty")
	}
	for _, p := range []string{mp, other} {
		if strings.Contains(string(mountinfo), p) {
			t.Errorf("the template's mount namespace keeps %s", p)
		}
	}
}

// templateProc is the /proc folder of the kernel template among this test's children.
func templateProc(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, _ := os.ReadFile(d + "/cmdline")
		st, _ := os.ReadFile(d + "/status")
		if strings.Contains(string(cmdline), pyrunner.TemplateScriptEnv) && strings.Contains(string(st), fmt.Sprintf("\nPPid:\t%d\n", os.Getpid())) {
			return d
		}
	}
	t.Fatal("no template process among this test's children")
	return ""
}

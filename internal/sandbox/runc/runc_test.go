package runc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/sandboxtest"
	"github.com/cellbox/cellbox/internal/testbin"
)

func TestConformance(t *testing.T) {
	needRuntime(t, "runc")
	sandboxtest.Run(t, newBackend(t, "runc", testbin.Cellbox(t)))
}

// TestConformanceFreshKernels: every kernel started afresh by the guest, as when no
// template can help (--no-kernel-templates).
func TestConformanceFreshKernels(t *testing.T) {
	needRuntime(t, "runc")
	sandboxtest.Run(t, newBackendKernels(t, "runc", testbin.Cellbox(t), nil, nil))
}

func TestConformanceCrun(t *testing.T) {
	sandboxtest.Run(t, newBackend(t, crun(t), testbin.Cellbox(t)))
}

func TestConformanceRunsc(t *testing.T) {
	sandboxtest.Run(t, newBackend(t, "runsc", testbin.Cellbox(t)))
}

func TestConformanceImage(t *testing.T) {
	needRuntime(t, "runc")
	store := image.NewStore(testbin.Images(t), "")
	sandboxtest.Run(t, sandboxtest.WithImage(newBackendImages(t, "runc", testbin.Cellbox(t), store), image.DefaultName))
}

func TestConformanceImageRunsc(t *testing.T) {
	needRuntime(t, "runsc")
	store := image.NewStore(testbin.Images(t), "")
	sandboxtest.Run(t, sandboxtest.WithImage(newBackendImages(t, "runsc", testbin.Cellbox(t), store), image.DefaultName))
}

// The kernels of the other languages, on the host's root and on the default image (runc and
// gVisor: what differs below them is the root they find and how signals and /proc behave).
// TestLanguages: the host's root has every language's runtime and what it reads (/etc/R);
// the kernel contract itself is the same guest's on every root, run by TestLanguagesImage.
func TestLanguages(t *testing.T) {
	needRuntime(t, "runc")
	sandboxtest.RunLanguages(t, newBackend(t, "runc", testbin.Cellbox(t)), false)
}

func TestLanguagesImage(t *testing.T) {
	needRuntime(t, "runc")
	store := image.NewStore(testbin.Images(t), "")
	sandboxtest.RunLanguages(t, sandboxtest.WithImage(newBackendImages(t, "runc", testbin.Cellbox(t), store), image.DefaultName), true)
}

func TestLanguagesImageRunsc(t *testing.T) {
	needRuntime(t, "runsc")
	store := image.NewStore(testbin.Images(t), "")
	sandboxtest.RunLanguages(t, sandboxtest.WithImage(newBackendImages(t, "runsc", testbin.Cellbox(t), store), image.DefaultName), true)
}

// needRuntime skips a test that needs root and the OCI runtime name.
func needRuntime(t testing.TB, name string) {
	t.Helper()
	testbin.NeedRoot(t, "runs "+name+" containers")
	testbin.NeedProgram(t, name, name)
}

// crun returns the runtime to run crun with. crun refuses a hybrid cgroup host whose v2
// hierarchy holds controllers (this machine has hugetlb there); on such a host the test
// runs crun in a mount namespace without /sys/fs/cgroup/unified, through a wrapper.
func crun(t *testing.T) string {
	needRuntime(t, "crun")
	data, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers")
	if err != nil || strings.TrimSpace(string(data)) == "" || cgroupV2() {
		return "crun"
	}
	t.Logf("hybrid cgroups with v2 controllers (%s): running crun without the unified hierarchy", strings.TrimSpace(string(data)))
	p := filepath.Join(t.TempDir(), "crun-hybrid")
	script := "#!/bin/sh\nexec unshare -m --propagation slave sh -c 'umount /sys/fs/cgroup/unified 2>/dev/null; exec crun \"$@\"' crun \"$@\"\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newBackend(t *testing.T, runtime, guest string) *Backend {
	t.Helper()
	return newBackendImages(t, runtime, guest, nil)
}

// newBackendImages is newBackend with images (nil: host mode only).
func newBackendImages(t *testing.T, runtime, guest string, images Images) *Backend {
	t.Helper()
	return newBackendKernels(t, runtime, guest, images, &Kernels{Python: sandboxtest.Python})
}

// newBackendKernels is newBackendImages with kernel templates as kernels says (nil: none).
func newBackendKernels(t *testing.T, runtime, guest string, images Images, kernels *Kernels) *Backend {
	t.Helper()
	if !strings.Contains(runtime, "/") {
		needRuntime(t, runtime)
	}
	level := slog.LevelInfo
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	b, err := New(Config{Runtime: runtime, StateDir: t.TempDir(), GuestBinary: guest, Images: images, Kernels: kernels,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// shellGuestPy listens where the guest does, passes the attach handshake, and hands each
// connection to a shell that reads commands from it. Given --seccomp, it installs that
// program first, as the guest does.
const shellGuestPy = `#!/usr/bin/python3
import ctypes, json, os, socket, subprocess, sys
a = sys.argv
if "--seccomp" in a:
    prog = open(a[a.index("--seccomp") + 1], "rb").read()
    buf = ctypes.create_string_buffer(prog, len(prog))
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Fprog(len(prog) // 8, ctypes.addressof(buf))
    if ctypes.CDLL(None, use_errno=True).prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        sys.exit("seccomp: " + os.strerror(ctypes.get_errno()))
path, token_file = a[a.index("--listen") + 1], a[a.index("--token-file") + 1]
token = open(token_file).read().strip()
os.remove(token_file)
ln = socket.socket(socket.AF_UNIX)
ln.bind(path)
ln.listen(4)
while True:
    c, _ = ln.accept()
    line = b""
    while not line.endswith(b"\n"):
        b = c.recv(1)
        if not b:
            break
        line += b
    try:
        ok = json.loads(line)["token"] == token
    except Exception:
        ok = False
    if ok:
        c.sendall(b'{"ok":true}\n')
        subprocess.Popen(["/bin/sh", "-s"], stdin=c, stdout=c, stderr=subprocess.STDOUT)
    c.close()
`

// shellGuest is a stand-in for the guest: a shell reading commands from its connection.
// It tests the container itself, apart from the guest.
func shellGuest(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "guest.py")
	if err := os.WriteFile(p, []byte(shellGuestPy), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

type shell struct {
	t  *testing.T
	sb *Sandbox
	ws string
	br *bufio.Reader
	n  int
}

func startShell(t *testing.T, b *Backend, l sandbox.Limits) *shell {
	t.Helper()
	return startShellOn(t, b, "", l)
}

// startShellOn is startShell on an image ("": the host's root).
func startShellOn(t *testing.T, b *Backend, imageName string, l sandbox.Limits) *shell {
	t.Helper()
	ws := sandboxtest.Workspace(t)
	sb, err := b.Create(context.Background(), sandbox.Spec{ID: sandboxtest.ID(), Workspace: ws, Image: imageName, Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Stop(context.Background()) })
	return &shell{t: t, sb: sb.(*Sandbox), ws: ws, br: bufio.NewReader(sb.Conn())}
}

// run runs a shell command in the sandbox and returns its output (stdout and stderr).
func (s *shell) run(cmd string) string {
	s.t.Helper()
	s.n++
	end := fmt.Sprintf("__end%d__", s.n)
	fmt.Fprintf(s.sb.Conn(), "%s\necho; echo %s\n", cmd, end)
	var out strings.Builder
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			s.t.Fatalf("%q: read: %v (got %q)", cmd, err, out.String())
		}
		if strings.TrimSpace(line) == end {
			return strings.TrimSpace(out.String())
		}
		out.WriteString(line)
	}
}

// hostPidsMax reads pids.max of the sandbox's cgroup on the host, or "" if there is none.
func hostPidsMax(id string) string {
	for _, dir := range hostCgroups(id) {
		if b, err := os.ReadFile(filepath.Join(dir, "pids.max")); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

func hostCgroups(id string) []string {
	out, _ := exec.Command("find", "/sys/fs/cgroup", "-type", "d", "-name", id).Output()
	return strings.Fields(string(out))
}

func TestContainer(t *testing.T) {
	for _, rt := range []string{"runc", "crun", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			if rt == "crun" {
				rt = crun(t)
			}
			b := newBackend(t, rt, shellGuest(t))
			sh := startShell(t, b, sandbox.Limits{MemoryMB: 200, Pids: 50, CPUs: 0.5, TmpMB: 10})
			checks := []struct{ cmd, want string }{
				// The guest's place: root in the sandbox with sandbox.GuestCapabilities (0xe3) and nothing else.
				{"id -u; id -g", "0\n0"},
				{"grep -E '^Cap(Eff|Prm|Bnd|Inh):' /proc/self/status | tr -s '\t ' ' '", "CapInh: 0000000000000000\nCapPrm: 00000000000000e3\nCapEff: 00000000000000e3\nCapBnd: 00000000000000e3"},
				{"grep -E '^Seccomp:' /proc/self/status | tr -s '\\t ' ' '", "Seccomp: 2"},
				{"python3 -c 'import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'", "1"}, // PR_GET_NO_NEW_PRIVS
				{"unshare -U true 2>/dev/null || echo refused", "refused"},
				{"python3 -c 'import socket; print(*sorted(n for _, n in socket.if_nameindex()))'", "lo"},
				{"hostname", "cellbox"},
				{"echo $HOME $LANG; pwd", "/tmp C.UTF-8\n/mnt/data"},
				{"touch /tmp/x /dev/shm/x /mnt/data/x && echo ok", "ok"},
				{"touch /x /usr/x /etc/x 2>/dev/null || echo refused", "refused"},
				{"(cd /etc && echo *)", etcListing()},
				{"df -m /tmp | awk 'NR==2 {print $2}'", "10"},
				{"ulimit -c", "0"},
				{"python3 -c 'import numpy, pandas, matplotlib.pyplot; print(numpy.ones(3).sum())' 2>&1 | tail -1", "3.0"},
			}
			if b.gvisor {
				checks = append(checks, []struct{ cmd, want string }{
					// gVisor's own /dev/fuse and /dev/net/tun (mount and CAP_NET_ADMIN are
					// out of reach) and /dev/char; no mqueue.
					{"(cd /dev && echo *)", "char fd full fuse net null ptmx pts random shm stderr stdin stdout tty urandom zero"},
					// The process limit is the guest's, in the sentry's cgroup2 hierarchy,
					// where the sandbox's cgroup is its own (no cgroup namespace), with files
					// only root may write; no RLIMIT_NPROC.
					{"bash -c 'ulimit -u'", "unlimited"},
					{"grep -c ' /sys/fs/cgroup rw,.* cgroup2 ' /proc/self/mountinfo", "1"},
					{"cat /proc/self/cgroup", "0::/" + sh.sb.id},
					{"stat -c '%U %a' /sys/fs/cgroup/" + sh.sb.id + "/pids.max /sys/fs/cgroup/cgroup.procs", "root 644\nroot 644"},
					// Debian 12's runsc (2022) refused statx with AT_NO_AUTOMOUNT, which
					// coreutils' ls and stat set.
					{"ls / >/dev/null && stat -c %F /mnt/data", "directory"},
				}...)
			} else {
				checks = append(checks, []struct{ cmd, want string }{
					{"grep -E '^(CapAmb|NoNewPrivs):' /proc/self/status | tr -s '\\t ' ' '", "CapAmb: 0000000000000000\nNoNewPrivs: 1"},
					{"ls /sys/class/net", "lo"},
					// crun adds /dev/core, a symlink to /proc/kcore (masked).
					{"ls /dev | grep -v '^core$' | tr '\\n' ' '", "fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero "},
					{"cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max", "50"},
				}...)
			}
			for _, c := range checks {
				if got := sh.run(c.cmd); got != strings.TrimSpace(c.want) {
					t.Errorf("%s:\n got %q\nwant %q", c.cmd, got, strings.TrimSpace(c.want))
				}
			}
			wantPids := "50"
			if b.gvisor {
				wantPids = fmt.Sprint(50*64 + 256)
			}
			if got := hostPidsMax(sh.sb.id); got != wantPids {
				t.Errorf("the host's pids.max of the sandbox is %q, want %s", got, wantPids)
			}

			// What must end with the sandbox: under runc a process in it, seen from the host;
			// under gVisor, whose processes are not the host's, its sentry and gofer.
			sh.run("setsid sleep 1000.4242 </dev/null >/dev/null 2>&1 &")
			marker := "sleep 1000.4242"
			if b.gvisor {
				if got := sh.run("ps -eo args | grep -c '^sleep 1000.4242'"); got != "1" {
					t.Fatalf("the background sleep does not show in the sandbox: %q", got)
				}
				marker = sh.sb.id
			}
			if !testbin.Eventually(5*time.Second, func() bool { return len(pgrep(marker)) > 0 }) {
				t.Fatalf("%q does not show on the host", marker)
			}
			if err := sh.sb.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			select {
			case <-sh.sb.Done():
			default:
				t.Error("Done is open after Stop")
			}
			if p := pgrep(marker); len(p) > 0 {
				t.Errorf("processes left after Stop: %v", p)
			}
			if _, err := os.Stat(sh.sb.bundle); !os.IsNotExist(err) {
				t.Errorf("bundle left after Stop: %v", err)
			}
			if cg := hostCgroups(sh.sb.id); len(cg) > 0 {
				t.Errorf("cgroups left after Stop: %v", cg)
			}
			if out, _ := b.command(context.Background(), "list", "--format", "json"); strings.Contains(string(out), sh.sb.id) {
				t.Errorf("the runtime still lists the sandbox: %s", out)
			}
		})
	}
}

// TestImageHidesHost: on an image, the host's system files are out of sight, and /etc has
// the backend's own users and hosts, not the build machine's resolver.
func TestImageHidesHost(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			needRuntime(t, rt)
			store := image.NewStore(testbin.Images(t), "")
			im, err := store.Get(image.DefaultName)
			if err != nil {
				t.Fatal(err)
			}
			// No image installs an OCI runtime; the host has this one.
			hostOnly, err := exec.LookPath(rt)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(im.Root, hostOnly)); err == nil {
				t.Fatalf("the image has %s: pick another file of the host's", hostOnly)
			}
			version, err := os.ReadFile(filepath.Join(im.Root, "etc/debian_version"))
			if err != nil {
				t.Fatal(err)
			}
			// The server's own font cache, which an image's sandbox does not get.
			hostCache := t.TempDir()
			if err := os.WriteFile(filepath.Join(hostCache, "host-cache"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			b, err := New(Config{Runtime: rt, StateDir: t.TempDir(), GuestBinary: shellGuest(t), MPLCache: hostCache, Images: store})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			sh := startShellOn(t, b, image.DefaultName, sandbox.Limits{Pids: 50})
			for _, c := range []struct{ cmd, want string }{
				{"test -e " + hostOnly + " || echo absent", "absent"},
				{"cat /etc/debian_version", string(version)},
				{"grep -c '' /etc/passwd; grep '^user:' /etc/passwd", "3\nuser:x:1000:1000:user:/tmp:/bin/sh"},
				{"grep '^user:' /etc/group", "user:x:1000:"},
				{"grep -c cellbox /etc/hosts", "1"},
				{"test -e /etc/resolv.conf || echo absent", "absent"},
				{"touch /x /usr/x /etc/x /etc/passwd 2>/dev/null || echo refused", "refused"},
				{"touch /tmp/x /mnt/data/x && echo ok", "ok"},
				{"tr '\\0' '\\n' </proc/1/cmdline | grep -x -A1 -- --mpl-cache", "--mpl-cache\n" + mplCachePath},
				{"set -- " + mplCachePath + "/fontlist-*.json; test -f \"$1\" && echo image-cache", "image-cache"},
				{"test -e " + mplCachePath + "/host-cache || echo absent", "absent"},
			} {
				if got := sh.run(c.cmd); got != strings.TrimSpace(c.want) {
					t.Errorf("%s:\n got %q\nwant %q", c.cmd, got, strings.TrimSpace(c.want))
				}
			}
		})
	}
}

// etcListing is what /etc holds inside: the synthetic files and what the host has of the
// list the backend takes.
func etcListing() string {
	names := []string{"group", "hosts", "passwd"}
	for _, p := range hostEtc {
		m, _ := filepath.Glob(filepath.Join("/etc", p))
		for _, f := range m {
			names = append(names, filepath.Base(f))
		}
	}
	if _, err := os.Lstat("/etc/localtime"); err == nil {
		names = append(names, "localtime")
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

func pgrep(marker string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), marker) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func TestCleanupAfterCrash(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			guest := shellGuest(t)
			a := newBackend(t, rt, guest)
			sh := startShell(t, a, sandbox.Limits{Pids: 20})
			sh.run("sleep 1000.4343 </dev/null >/dev/null 2>&1 &")
			// The server dies and forgets a; the sandbox runs on, detached. Under gVisor the
			// sleep is not a host process: the sandbox's sentry and gofer are.
			marker := "sleep 1000.4343"
			if a.gvisor {
				marker = sh.sb.id
			}
			if !testbin.Eventually(5*time.Second, func() bool { return len(pgrep(marker)) > 0 }) {
				t.Fatalf("%q does not show on the host", marker)
			}

			b, err := New(Config{Runtime: rt, StateDir: filepath.Dir(a.root), GuestBinary: guest})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Cleanup(context.Background(), nil); err != nil {
				t.Fatalf("cleanup: %v", err)
			}
			if p := pgrep(marker); len(p) > 0 {
				t.Errorf("processes left after cleanup: %v", p)
			}
			select {
			case <-sh.sb.Done():
			case <-time.After(5 * time.Second):
				t.Error("the guest is still running after cleanup")
			}
			if out, _ := b.command(context.Background(), "list", "--format", "json"); strings.Contains(string(out), sh.sb.id) {
				t.Errorf("the runtime still lists the sandbox: %s", out)
			}
			if entries, _ := os.ReadDir(b.bundles); len(entries) > 0 {
				t.Errorf("bundles left: %v", entries)
			}
			if cg := hostCgroups(sh.sb.id); len(cg) > 0 {
				t.Errorf("cgroups left: %v", cg)
			}
		})
	}
}

func TestCreateErrors(t *testing.T) {
	guest := shellGuest(t)
	a := newBackend(t, "runc", guest)
	ws := sandboxtest.Workspace(t)
	ctx := context.Background()
	for _, spec := range []sandbox.Spec{
		{ID: "Bad/ID", Workspace: ws},
		{ID: "", Workspace: ws},
		{ID: "ok", Workspace: "relative"},
		{ID: "ok", Workspace: filepath.Join(ws, "missing")},
	} {
		if _, err := a.Create(ctx, spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("create %+v: %v, want invalid argument", spec, err)
		}
	}
	// The runtime's own refusal reaches the caller: another backend on the same state
	// folder does not know the sandbox, the runtime does.
	sb, err := a.Create(ctx, sandbox.Spec{ID: "twice", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Stop(ctx)
	b, err := New(Config{StateDir: filepath.Dir(a.root), GuestBinary: guest})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Create(ctx, sandbox.Spec{ID: "twice", Workspace: ws})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "exists") {
		t.Errorf("create a sandbox the runtime has: %v, want unavailable and the runtime's reason", err)
	}
	if _, err := a.Create(ctx, sandbox.Spec{ID: "twice", Workspace: ws}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("create a live sandbox again: %v, want failed precondition", err)
	}

	if _, err := New(Config{Runtime: "no-such-runtime", StateDir: t.TempDir(), GuestBinary: guest}); !errors.Is(err, errdefs.ErrUnavailable) ||
		!strings.Contains(err.Error(), "not found") || !strings.Contains(err.Error(), "local-unsafe") {
		t.Errorf("New with a missing runtime: %v", err)
	}
}

// TestCreateImageErrors: an image that cannot be used is refused before anything starts,
// in words the person who asked can act on.
func TestCreateImageErrors(t *testing.T) {
	guest := shellGuest(t)
	ws := sandboxtest.Workspace(t)
	host := newBackend(t, "runc", guest)
	images := newBackendImages(t, "runc", guest, image.NewStore(t.TempDir(), ""))
	for _, c := range []struct {
		name  string
		b     *Backend
		image string
		want  error
		says  string
	}{
		{"host mode", host, image.DefaultName, errdefs.ErrInvalidArgument, "--rootfs image"},
		{"not built", images, "nothing", errdefs.ErrNotFound, "cellbox image build nothing"},
		{"bad name", images, "Bad/Name", errdefs.ErrInvalidArgument, "image name"},
		{"bad name in host mode", host, "../x", errdefs.ErrInvalidArgument, "image name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.b.Create(context.Background(), sandbox.Spec{ID: "img", Workspace: ws, Image: c.image})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("create on image %q: %v, want %v saying %q", c.image, err, c.want, c.says)
			}
			if c.b.live.Has("img") {
				t.Error("the refused sandbox is live")
			}
			if entries, _ := os.ReadDir(c.b.bundles); len(entries) > 0 {
				t.Errorf("bundles left: %v", entries)
			}
		})
	}
}

// realGuest starts a sandbox with the real guest on b and dials it.
func realGuest(t *testing.T, b *Backend) (*Sandbox, *guestproto.Client) {
	t.Helper()
	testbin.NeedIPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := b.Create(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: sandboxtest.Workspace(t), Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Stop(context.Background()) })
	c, err := guestproto.Dial(ctx, sb.Conn())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Configure(ctx, guestproto.Config{Python: sandboxtest.Python, DefaultTimeoutS: 30}); err != nil {
		t.Fatal(err)
	}
	return sb.(*Sandbox), c
}

func runCode(t *testing.T, c *guestproto.Client, code string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.Execute(ctx, api.ExecuteRequest{Code: code, TimeoutS: 30}, nil)
	if err != nil {
		t.Fatalf("execute %q: %v", code, err)
	}
	var out strings.Builder
	for _, o := range r.Outputs {
		out.WriteString(o.Text)
	}
	return out.String()
}

// The channel a new server process attaches through, attacked: from user code (the run
// folder, its socket and token) and from the host (a connection without the token).
func TestAttackAttachChannel(t *testing.T) {
	b := newBackend(t, "runc", testbin.Cellbox(t))
	sb, c := realGuest(t, b)
	// Refused for want of permission (EACCES, EPERM), not because a name is missing: the
	// folder is root's and 0700, whatever is or is not in it.
	refused := func(code string) string {
		return "try:\n    " + code + "\n    print('done', end='')\nexcept PermissionError:\n    print('refused', end='')\nexcept OSError as e:\n    print(repr(e), end='')"
	}
	for name, code := range map[string]string{
		"list_run_folder": "import os; os.listdir('" + sandbox.GuestRunDir + "')",
		"read_token":      "open('" + sandbox.GuestRunDir + "/" + sandbox.GuestToken + "').read()",
		"connect_socket":  "import socket; socket.socket(socket.AF_UNIX).connect('" + sandbox.GuestRunDir + "/" + sandbox.GuestSocket + "')",
		"plant_socket":    "import os; os.symlink('/tmp/evil.sock', '" + sandbox.GuestRunDir + "/" + sandbox.GuestSocket + "2')",
	} {
		t.Run("attack/"+name, func(t *testing.T) {
			if got := runCode(t, c, refused(code)); got != "refused" {
				t.Errorf("%s from user code: %q, want refused", code, got)
			}
		})
	}
	t.Run("socket_is_visible", func(t *testing.T) {
		// So the suite's attack on every socket in /proc/net/unix attacks this one too.
		if got := runCode(t, c, "print('"+sandbox.GuestRunDir+"/"+sandbox.GuestSocket+"' in open('/proc/net/unix').read(), end='')"); got != "True" {
			t.Errorf("the guest's socket is not in the sandbox's /proc/net/unix: %q", got)
		}
	})
	t.Run("attack/token_file_gone", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(sb.bundle, runDir, sandbox.GuestToken)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the guest's copy of the token is still there: %v", err)
		}
	})
	for name, token := range map[string]string{"wrong_token": strings.Repeat("0", 64), "empty_token": "", "token_prefix": "x"} {
		t.Run("attack/"+name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := dialUnixIn(ctx, filepath.Join(sb.bundle, runDir), sandbox.GuestSocket)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			if token == "x" {
				real, _ := os.ReadFile(filepath.Join(sb.bundle, sandbox.GuestToken))
				token = string(real[:len(real)-1])
			}
			if err := guestproto.ClientAttach(conn, token); err == nil {
				t.Fatal("the guest accepted a connection without the token")
			}
		})
	}
	// The refused connections did not replace the server's.
	if got := runCode(t, c, "print('still here', end='')"); got != "still here" {
		t.Fatalf("after the attacks: %q", got)
	}
}

// A sandbox that cannot be attached to (its guest is gone) is removed, not left behind.
func TestAttachDeadSandbox(t *testing.T) {
	guest := testbin.Cellbox(t)
	a := newBackend(t, "runc", guest)
	sb, c := realGuest(t, a)
	c.Close()
	sb.Detach()
	if _, err := a.command(context.Background(), "kill", sb.id, "KILL"); err != nil {
		t.Fatal(err)
	}
	// Detached, sb no longer watches its guest: ask the runtime.
	if !testbin.Eventually(5*time.Second, func() bool { _, err := a.runningPid(context.Background(), sb.id); return errors.Is(err, errLost) }) {
		t.Fatal("the guest did not exit after kill")
	}
	b, err := New(Config{StateDir: filepath.Dir(a.root), GuestBinary: guest})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Attach(context.Background(), sb.id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("attach to a dead sandbox: %v, want not found", err)
	}
	if out, _ := b.command(context.Background(), "list", "--format", "json"); strings.Contains(string(out), sb.id) {
		t.Errorf("the runtime still lists the sandbox: %s", out)
	}
	if _, err := os.Stat(sb.bundle); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bundle left: %v", err)
	}
}

// A container the runtime does not know is told apart by the runtime's list, not by its
// words: runningPid says lost and delete succeeds, on each runtime. When the runtime cannot
// list either, nothing is taken for gone.
func TestUnknownContainer(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"runc", "crun", "runsc"} {
		t.Run(name, func(t *testing.T) {
			needRuntime(t, name)
			path, err := exec.LookPath(name)
			if err != nil {
				t.Fatal(err)
			}
			b := &Backend{runtime: path, root: t.TempDir(), gvisor: name == "runsc"}
			if _, err := b.runningPid(ctx, "nope"); !errors.Is(err, errLost) {
				t.Errorf("state of an unknown container: %v, want lost", err)
			}
			if err := b.delete(ctx, "nope"); err != nil {
				t.Errorf("delete of an unknown container: %v", err)
			}
			if !b.gone(ctx, "nope") {
				t.Error("an unknown container is not gone")
			}
		})
	}
	t.Run("a runtime that fails", func(t *testing.T) {
		b := &Backend{runtime: "/bin/false", root: t.TempDir()}
		if _, err := b.runningPid(ctx, "nope"); err == nil || errors.Is(err, errLost) {
			t.Errorf("state: %v, want an error that is not lost", err)
		}
		if err := b.delete(ctx, "nope"); err == nil {
			t.Error("delete through a failing runtime succeeded")
		}
	})
}

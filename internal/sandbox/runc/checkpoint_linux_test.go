package runc

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestbin"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/sandboxtest"
	"github.com/cellbox/cellbox/internal/testbin"
)

// checkpointBackend is a backend of runtime that checkpoints, without kernel templates (a
// checkpointable sandbox does without them; TestCheckpointNotCheckpointable has them).
func checkpointBackend(t *testing.T, runtime string) *Backend {
	t.Helper()
	return checkpointBackendKernels(t, runtime, nil)
}

func checkpointBackendKernels(t *testing.T, runtime string, kernels *Kernels) *Backend {
	t.Helper()
	return checkpointBackendOf(t, Config{Runtime: runtime, GuestBinary: testbin.Cellbox(t), Kernels: kernels})
}

// checkpointBackendOf is a backend of cfg (in a state dir of the test's, on systrap, logging
// to the test) that checkpoints.
func checkpointBackendOf(t *testing.T, cfg Config) *Backend {
	t.Helper()
	needRuntime(t, cfg.Runtime)
	// systrap: no 5 s probe of kvm per backend (the platform does not matter here).
	cfg.StateDir, cfg.GVisorPlatform, cfg.Logger = t.TempDir(), PlatformSystrap, testLog(t)
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if kind, missing := b.checkpointKind(); kind == "" {
		testbin.Missing(t, "needs a runtime that checkpoints: %s", missing)
	}
	return b
}

// checkpointableGuest is realGuest for a checkpointable sandbox.
func checkpointableGuest(t *testing.T, b *Backend, ws string) (*Sandbox, *guestproto.Client) {
	t.Helper()
	testbin.NeedIPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := b.Create(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: ws, Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}, Checkpointable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Stop(context.Background()) })
	return sb.(*Sandbox), dialGuest(t, sb, true)
}

// dialGuest dials sb's guest, and configures it when configure is set.
func dialGuest(t *testing.T, sb sandbox.Sandbox, configure bool) *guestproto.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := guestproto.Dial(ctx, sb.Conn())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if configure {
		if err := c.Configure(ctx, guestproto.Config{Python: sandboxtest.Python, DefaultTimeoutS: 30}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// checkpoint readies c's guest and checkpoints sb into a new folder, which it returns;
// keep: the sandbox is kept, frozen.
func checkpoint(t *testing.T, sb *Sandbox, c *guestproto.Client, keep bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cp")
	if err := sb.Checkpoint(ctx, dir, keep); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheckpointRestoreRunc(t *testing.T)  { testCheckpointRestore(t, "runc") }
func TestCheckpointRestoreRunsc(t *testing.T) { testCheckpointRestore(t, "runsc") }

// A sandbox checkpointed and stopped comes back from its checkpoint with its kernel's
// variables, a thread, an open file and a process it started; and again, as a fork, on a
// copy of its workspace, while the first restored one runs.
func testCheckpointRestore(t *testing.T, runtime string) {
	b := checkpointBackend(t, runtime)
	ws := sandboxtest.Workspace(t)
	sb, c := checkpointableGuest(t, b, ws)
	runCode(t, c, `
import threading, subprocess, time
x = 41
ticks = [0]
def tick():
    while True:
        ticks[0] += 1
        time.sleep(0.01)
threading.Thread(target=tick, daemon=True).start()
f = open('/mnt/data/log.txt', 'w')
f.write('before\n'); f.flush()
p = subprocess.Popen(['sleep', '1000'])
`)
	dir := checkpoint(t, sb, c, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	select {
	case <-sb.Done():
	default:
		t.Fatal("the sandbox runs on after a checkpoint that stops it")
	}
	if _, err := os.Stat(sb.bundle); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bundle left after the checkpoint: %v", err)
	}

	id := sandboxtest.ID()
	rs, err := b.Restore(ctx, sandbox.Spec{ID: id, Workspace: ws, Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Stop(context.Background()) })
	rc := dialGuest(t, rs, false)
	got := runCode(t, rc, `
n = ticks[0]; time.sleep(0.2)
f.write('after\n'); f.flush()
print(x + 1, ticks[0] > n, p.poll() is None, open('/mnt/data/log.txt').read().split(), open('/proc/self/status').read().split('Seccomp:')[1].split()[0])
`)
	if want := "42 True True ['before', 'after'] 2"; strings.TrimSpace(got) != want {
		t.Fatalf("after restore: %q, want %q", got, want)
	}
	if runtime == "runc" { // the filter the guest installed, restored by CRIU
		checkGuestFiltered(t, rs.(*Sandbox))
	}

	// A fork: the same checkpoint again, on a copy of the workspace, beside the first.
	ws2 := sandboxtest.Workspace(t)
	os.WriteFile(filepath.Join(ws2, "log.txt"), []byte("before\n"), 0o644)
	fs, err := b.Restore(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: ws2, Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Stop(context.Background()) })
	fc := dialGuest(t, fs, false)
	runCode(t, fc, "x = 7\nf.write('fork\\n'); f.flush()")
	if got := runCode(t, rc, "print(x, open('/mnt/data/log.txt').read().split())"); strings.TrimSpace(got) != "41 ['before', 'after']" {
		t.Errorf("the first restored sandbox after the fork wrote: %q", got)
	}
	if data, _ := os.ReadFile(filepath.Join(ws2, "log.txt")); string(data) != "before\nfork\n" {
		t.Errorf("the fork's workspace holds %q", data)
	}

	// A restored sandbox is checkpointed and restored again.
	dir2 := checkpoint(t, rs.(*Sandbox), rc, false)
	again, err := b.Restore(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: ws, Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}}, dir2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Stop(context.Background()) })
	if got := runCode(t, dialGuest(t, again, false), "print(x, p.poll() is None)"); strings.TrimSpace(got) != "41 True" {
		t.Errorf("restored twice: %q", got)
	}
}

func TestRestoreSideBySideRunc(t *testing.T)  { testRestoreSideBySide(t, "runc") }
func TestRestoreSideBySideRunsc(t *testing.T) { testRestoreSideBySide(t, "runsc") }

// One checkpoint restored four times at once (a fork): each sandbox works, on its own
// workspace, and can start programs from its root; under runc each restore's own root is
// gone from the host once the restores are done, and nothing is left mounted on the shared
// root (runc mounts on a restore's root for CRIU).
func testRestoreSideBySide(t *testing.T, runtime string) {
	b := checkpointBackend(t, runtime)
	sb, c := checkpointableGuest(t, b, sandboxtest.Workspace(t))
	runCode(t, c, "import subprocess\nx = 41")
	dir := checkpoint(t, sb, c, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 4
	wss := make([]string, n)
	sbs := make([]sandbox.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wss[i] = sandboxtest.Workspace(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sbs[i], errs[i] = b.Restore(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: wss[i], Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}}, dir)
		}()
	}
	wg.Wait()
	for i := range n {
		if sbs[i] != nil {
			t.Cleanup(func() { sbs[i].Stop(context.Background()) })
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		code := fmt.Sprintf("x += %d\nopen('/mnt/data/mine', 'w').write(str(x))\n"+
			"print(x, subprocess.run(['ls', '/mnt/data'], capture_output=True, text=True).stdout.split())", i)
		want := fmt.Sprintf("%d ['mine']", 41+i)
		if got := runCode(t, dialGuest(t, sbs[i], false), code); strings.TrimSpace(got) != want {
			t.Errorf("restore %d: %q, want %q", i, got, want)
		}
	}
	for i := range n {
		if data, err := os.ReadFile(filepath.Join(wss[i], "mine")); err != nil || string(data) != strconv.Itoa(41+i) {
			t.Errorf("restore %d's workspace holds %q, %v", i, data, err)
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{b.bundles, b.rootfs} {
		if strings.Contains(string(mounts), dir+"/") {
			t.Errorf("mounts left under %s:\n%s", dir, mounts)
		}
	}
}

func TestCheckpointKeepRunc(t *testing.T)  { testCheckpointKeep(t, "runc") }
func TestCheckpointKeepRunsc(t *testing.T) { testCheckpointKeep(t, "runsc") }

// A checkpoint that keeps the sandbox: it stays frozen until Thaw, and then goes on, its
// kernel and threads as they were; the checkpoint restores beside it.
func testCheckpointKeep(t *testing.T, runtime string) {
	b := checkpointBackend(t, runtime)
	sb, c := checkpointableGuest(t, b, sandboxtest.Workspace(t))
	runCode(t, c, `
import threading, time
x = 1
ticks = [0]
def tick():
    while True:
        ticks[0] += 1
        time.sleep(0.01)
threading.Thread(target=tick, daemon=True).start()
`)
	dir := checkpoint(t, sb, c, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if st := state(t, b, sb.id); st != "paused" {
		t.Errorf("a kept sandbox after its checkpoint is %s, want paused (frozen)", st)
	}
	if err := sb.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := dialGuest(t, sb, false)
	if got := runCode(t, c2, "n = ticks[0]; time.sleep(0.2); print(x + 1, ticks[0] > n)"); strings.TrimSpace(got) != "2 True" {
		t.Fatalf("after a checkpoint that kept it, thawed: %q", got)
	}
	rs, err := b.Restore(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: sandboxtest.Workspace(t), Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Stop(context.Background()) })
	if got := runCode(t, dialGuest(t, rs, false), "print(x)"); strings.TrimSpace(got) != "1" {
		t.Errorf("the kept sandbox's checkpoint restored: %q", got)
	}
}

// state is the runtime's status of container id.
func state(t *testing.T, b *Backend, id string) string {
	t.Helper()
	out, err := b.command(context.Background(), "state", id)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	return st.Status
}

func TestRestoreDamagedRunc(t *testing.T)  { testRestoreDamaged(t, "runc") }
func TestRestoreDamagedRunsc(t *testing.T) { testRestoreDamaged(t, "runsc") }

// A missing, damaged or foreign checkpoint fails to restore with failed_precondition, and
// leaves nothing behind.
func testRestoreDamaged(t *testing.T, runtime string) {
	b := checkpointBackend(t, runtime)
	sb, c := checkpointableGuest(t, b, sandboxtest.Workspace(t))
	dir := checkpoint(t, sb, c, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	restore := func(dir string) error {
		id := sandboxtest.ID()
		s, err := b.Restore(ctx, sandbox.Spec{ID: id, Workspace: sandboxtest.Workspace(t), Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}}, dir)
		if err == nil {
			s.Stop(ctx)
			return nil
		}
		if _, serr := os.Stat(filepath.Join(b.bundles, id)); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("a failed restore left its bundle: %v", serr)
		}
		if strings.Contains(string(mustList(t, b)), id) {
			t.Errorf("a failed restore left its container")
		}
		return err
	}
	if err := restore(filepath.Join(t.TempDir(), "none")); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("restore of a missing checkpoint: %v", err)
	}
	// The images cut short.
	images := filepath.Join(dir, checkpointImages)
	entries, _ := os.ReadDir(images)
	for _, e := range entries {
		p := filepath.Join(images, e.Name())
		if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
			os.Truncate(p, fi.Size()/2)
		}
	}
	if err := restore(dir); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("restore of damaged images: %v", err)
	}
	other := map[string]string{"runc": "gvisor", "runsc": "criu"}[runtime]
	os.WriteFile(filepath.Join(dir, checkpointMeta), []byte(`{"kind":"`+other+`","token":"x"}`), 0o600)
	if err := restore(dir); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), other) {
		t.Errorf("restore of another runtime's checkpoint: %v", err)
	}
}

// A checkpoint names what its sandbox ran (an image build, a guest binary by its sum), and
// the restoring backend resolves the names to its own files: one that names anything else
// (a host path, as checkpoints once did, an image it was not asked for, a build or a guest
// it does not have) is refused before the runtime runs anything, whoever wrote it (a move
// brings checkpoints from other nodes).
func TestRestoreNamesOnlyItsOwn(t *testing.T) {
	b := checkpointBackend(t, "runc")
	sb, c := checkpointableGuest(t, b, sandboxtest.Workspace(t))
	runCode(t, c, "x = 7")
	dir := checkpoint(t, sb, c, false)
	data, err := os.ReadFile(filepath.Join(dir, checkpointMeta))
	if err != nil {
		t.Fatal(err)
	}
	var good meta
	if err := json.Unmarshal(data, &good); err != nil {
		t.Fatal(err)
	}
	own, _ := b.guestSum()
	if good.Image != "" || good.Build != "" || good.LegacyRootfs != "" || good.LegacyGuest != "" || good.GuestSum != fmt.Sprintf("%x", own) {
		t.Fatalf("the checkpoint's %s is %s; want the host's root by no name and the guest by its sum, no path", checkpointMeta, data)
	}
	if strings.Contains(string(data), "/") {
		t.Errorf("the checkpoint's %s names a path: %s", checkpointMeta, data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zero := strings.Repeat("0", 64)
	for _, tc := range []struct {
		name string
		mod  func(m *meta)
		want string
	}{
		{"the host's root, by path", func(m *meta) { m.LegacyRootfs = "/" }, "none of this server's"},
		{"a folder of the host, by path", func(m *meta) { m.LegacyRootfs = t.TempDir() }, "none of this server's"},
		{"an image it was not asked for", func(m *meta) { m.Image, m.Build = "default", "0123456789abcdef" }, "not \"\""},
		{"a build of no image", func(m *meta) { m.Build = "../../../../.." }, "no image"},
		{"a guest it does not have", func(m *meta) { m.GuestSum = zero }, "no guest binary"},
		{"a guest sum that is none", func(m *meta) { m.GuestSum = "../../bin/sh" }, "not a SHA-256"},
		{"a guest, by path", func(m *meta) { m.GuestSum, m.LegacyGuest = "", "/bin/sh" }, "none of this server's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := good
			tc.mod(&m)
			data, _ := json.Marshal(m)
			if err := os.WriteFile(filepath.Join(dir, checkpointMeta), data, 0o600); err != nil {
				t.Fatal(err)
			}
			id := sandboxtest.ID()
			s, err := b.Restore(ctx, sandbox.Spec{ID: id, Workspace: sandboxtest.Workspace(t), Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}}, dir)
			if err == nil {
				s.Stop(ctx)
				t.Fatalf("restored from a checkpoint whose %s is %s", checkpointMeta, data)
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v; want failed_precondition, saying %q", err, tc.want)
			}
			if _, serr := os.Stat(filepath.Join(b.bundles, id)); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("a refused restore left its bundle: %v", serr)
			}
		})
	}
	// The checkpoint as it was still restores.
	os.WriteFile(filepath.Join(dir, checkpointMeta), data, 0o600)
	rs, err := b.Restore(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: sandboxtest.Workspace(t), Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Stop(context.Background()) })
	if got := runCode(t, dialGuest(t, rs, false), "print(x)"); strings.TrimSpace(got) != "7" {
		t.Errorf("restored: %q", got)
	}
}

func mustList(t *testing.T, b *Backend) []byte {
	t.Helper()
	out, err := b.command(context.Background(), "list", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A runc sandbox not made checkpointable (its kernel forked from a template) is refused
// before anything is written, and runs on.
func TestCheckpointNotCheckpointable(t *testing.T) {
	b := checkpointBackendKernels(t, "runc", &Kernels{Python: sandboxtest.Python})
	sb, c := realGuest(t, b)
	runCode(t, c, "x = 1")
	if err := sb.Checkpoint(context.Background(), filepath.Join(t.TempDir(), "cp"), false); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("checkpoint of a sandbox not made checkpointable: %v", err)
	}
	if got := runCode(t, c, "print(x)"); strings.TrimSpace(got) != "1" {
		t.Fatalf("after the refused checkpoint: %q", got)
	}
}

// testLog logs at info, at debug with -v.
func testLog(t *testing.T) *slog.Logger {
	level := slog.LevelInfo
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// A restore cut short (the server killed) leaves its own root mounted in its bundle: the
// next server's Cleanup unmounts it, removes the bundle and nothing of the shared root.
func TestCleanupRestoreRoot(t *testing.T) {
	b := checkpointBackend(t, "runc")
	shared := t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(b.bundles, sandboxtest.ID())
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := bindRoot(shared, filepath.Join(bundle, restoreRoot)); err != nil {
		t.Fatal(err)
	}
	if err := b.Cleanup(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bundle); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the bundle is left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(shared, "keep")); err != nil {
		t.Errorf("the shared root lost a file: %v", err)
	}
}

// A checkpoint restores on a server whose guest binary changed since (an upgrade): with
// the guest binary it was taken with, which the checkpoint names, not the server's.
func TestRestoreAfterUpgradeRunc(t *testing.T)  { testRestoreAfterUpgrade(t, "runc") }
func TestRestoreAfterUpgradeRunsc(t *testing.T) { testRestoreAfterUpgrade(t, "runsc") }

func testRestoreAfterUpgrade(t *testing.T, runtime string) {
	needRuntime(t, runtime)
	// The server's folder of guest binaries (guestbin.Extract's), each by its sum: the
	// guest before the upgrade, and the upgraded one (another file, of another size).
	guests := t.TempDir()
	os.Chmod(guests, 0o755)
	data, err := os.ReadFile(testbin.Cellbox(t))
	if err != nil {
		t.Fatal(err)
	}
	put := func(data []byte) string {
		p := filepath.Join(guests, guestbin.Name(sha256.Sum256(data)))
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	before, upgraded := put(data), put(append(data, make([]byte, 4096)...))
	backend := func(guest, guests string) *Backend {
		return checkpointBackendOf(t, Config{Runtime: runtime, GuestBinary: guest, Guests: guests})
	}
	testbin.NeedIPython(t)
	b := backend(before, guests)
	ws := sandboxtest.Workspace(t)
	sb, err := b.Create(context.Background(), sandbox.Spec{ID: sandboxtest.ID(), Workspace: ws, Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}, Checkpointable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Stop(context.Background()) })
	c := dialGuest(t, sb, true)
	runCode(t, c, "x = 5")
	dir := checkpoint(t, sb.(*Sandbox), c, false)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A server with no folder of earlier guests has none to restore with.
	if rs, err := backend(upgraded, "").Restore(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: ws, Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}}, dir); err == nil {
		rs.Stop(ctx)
		t.Error("restored with a guest binary other than the checkpoint's")
	} else if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "no guest binary") {
		t.Errorf("restore without the checkpoint's guest: %v", err)
	}
	rs, err := backend(upgraded, guests).Restore(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: ws, Limits: sandbox.Limits{MemoryMB: 512, Pids: 128}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Stop(context.Background()) })
	if got := runCode(t, dialGuest(t, rs, false), "print(x + 1)"); strings.TrimSpace(got) != "6" {
		t.Errorf("restored by the upgraded server: %q", got)
	}
}

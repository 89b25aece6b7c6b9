package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

const ownerUID, ownerGID = 1000, 1000

// loopStore returns a Store with quotas (loop-mounted images), or skips the test when this
// machine cannot have them. CI runs as root with loop devices, so nothing skips there.
func loopStore(t *testing.T, dir string) *Store {
	t.Helper()
	needLoop(t)
	s, err := NewStore(StoreConfig{Dir: dir, Quota: "loop", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Quotas() {
		t.Fatal("Quotas() = false with quota loop")
	}
	t.Cleanup(func() { unmountUnder(t, s.dir) })
	return s
}

func needLoop(t testing.TB) {
	t.Helper()
	testbin.NeedRoot(t, "workspace quotas are loop mounts")
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		testbin.Missing(t, "workspace quotas need loop devices, and /dev/loop-control is missing")
	}
}

// unmountUnder unmounts what a failed test left mounted under dir, so TempDir can go.
func unmountUnder(t *testing.T, dir string) {
	mps, _ := mountPoints()
	for _, mp := range mps {
		if strings.HasPrefix(mp, dir+"/") {
			t.Errorf("left mounted: %s", mp)
			syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
}

// loopDevices counts the loop devices whose backing file is under dir.
func loopDevices(t *testing.T, dir string) int {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(string(b), dir+"/") {
			n++
		}
	}
	return n
}

// noLoopDevices waits briefly for autoclear, then fails if a loop device of dir is left.
func noLoopDevices(t *testing.T, dir string) {
	t.Helper()
	if !testbin.Eventually(time.Second, func() bool { return loopDevices(t, dir) == 0 }) {
		t.Errorf("%d loop devices leaked", loopDevices(t, dir))
	}
}

// asOwner runs a shell script in dir as the workspace's owner, as a sandbox would.
func asOwner(dir, script string) ([]byte, error) {
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: ownerUID, Gid: ownerGID}}
	}
	return cmd.CombinedOutput()
}

// writeAsOwner writes a file into a workspace as its owner.
func writeAsOwner(t *testing.T, dir, name, data string) {
	t.Helper()
	if out, err := asOwner(dir, fmt.Sprintf("printf '%%s' '%s' > '%s'", data, name)); err != nil {
		t.Fatalf("write %s as uid %d: %v: %s", name, ownerUID, err, out)
	}
}

func TestStoreLoop(t *testing.T) {
	s := loopStore(t, testDir(t))
	testLifecycle(t, s)
	noLoopDevices(t, s.dir)
}

func TestStoreLoopWorkspace(t *testing.T) {
	s := loopStore(t, testDir(t))
	ctx := context.Background()
	dir, err := s.Create(ctx, "ws1", 16)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove(ctx, "ws1")
	if m, _ := isMountPoint(dir); !m {
		t.Fatal("workspace not mounted")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != ownerUID || st.Gid != ownerGID || fi.Mode().Perm() != 0o755 {
		t.Fatalf("workspace root: uid %d gid %d mode %v; want %d:%d 0755", st.Uid, st.Gid, fi.Mode(), ownerUID, ownerGID)
	}
	var sfs syscall.Statfs_t
	must(t, syscall.Statfs(dir, &sfs))
	if sfs.Flags&(syscall.MS_NOSUID|syscall.MS_NODEV) != syscall.MS_NOSUID|syscall.MS_NODEV {
		t.Errorf("workspace mounted without nosuid,nodev (flags %#x)", sfs.Flags)
	}
	if out, err := asOwner(dir, "mkdir -p a/b && echo x > a/b/c && cat a/b/c"); err != nil || string(out) != "x\n" {
		t.Fatalf("owner cannot write: %v: %s", err, out)
	}
	// The image is sparse: a new workspace costs the host little.
	img, err := os.Stat(dir + imgSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if used := img.Sys().(*syscall.Stat_t).Blocks * 512; used > 4<<20 {
		t.Errorf("a new 16 MiB workspace uses %d bytes of the host's disk", used)
	}
}

// Workspaces are copies of one empty file system, which share its UUID: both mount, each
// with its own files, and a workspace of another size is formatted apart.
func TestStoreLoopSameUUID(t *testing.T) {
	s := loopStore(t, testDir(t))
	ctx := context.Background()
	uuid := func(img string) string {
		f, err := os.Open(img)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 16)
		if _, err := f.ReadAt(b, 1024+0x68); err != nil { // the superblock's s_uuid
			t.Fatal(err)
		}
		return fmt.Sprintf("%x", b)
	}
	var dirs []string
	for _, id := range []string{"a", "b", "c"} {
		size := 16
		if id == "c" {
			size = 24
		}
		dir, err := s.Create(ctx, id, size)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Remove(ctx, id)
		writeAsOwner(t, dir, "name", id)
		dirs = append(dirs, dir)
	}
	if a, b, c := uuid(dirs[0]+imgSuffix), uuid(dirs[1]+imgSuffix), uuid(dirs[2]+imgSuffix); a != b || a == c {
		t.Errorf("UUIDs %s %s %s: want the first two the same (one format), the third another", a, b, c)
	}
	for i, dir := range dirs {
		if m, _ := isMountPoint(dir); !m {
			t.Errorf("%s is not mounted", dir)
		}
		if data, err := os.ReadFile(filepath.Join(dir, "name")); err != nil || string(data) != []string{"a", "b", "c"}[i] {
			t.Errorf("%s holds %q %v", dir, data, err)
		}
	}
}

// Writing past the quota fails inside with ENOSPC, and the host's disk holds at most the
// quota.
func TestStoreLoopQuota(t *testing.T) {
	s := loopStore(t, testDir(t))
	ctx := context.Background()
	const diskMB = 16
	dir, err := s.Create(ctx, "full", diskMB)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove(ctx, "full")

	out, err := asOwner(dir, fmt.Sprintf("head -c %d /dev/zero > big", 2*diskMB<<20))
	if err == nil || !strings.Contains(string(out), "No space left on device") {
		t.Fatalf("writing %d MiB into a %d MiB workspace as uid %d: err %v, output %q; want ENOSPC", 2*diskMB, diskMB, ownerUID, err, out)
	}
	// root has no reserve either, and sees the errno itself.
	f, err := os.Create(filepath.Join(dir, "big2"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := 0; i < 2*diskMB && err == nil; i++ {
		_, err = f.Write(buf)
	}
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("root writing past the quota: %v; want ENOSPC", err)
	}
	img, err := os.Stat(dir + imgSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if used := img.Sys().(*syscall.Stat_t).Blocks * 512; used > diskMB<<20 {
		t.Fatalf("the image uses %d bytes of the host's disk, more than the quota", used)
	}
	// Deleting makes room again.
	if out, err := asOwner(dir, "rm big && echo ok > small"); err != nil {
		t.Fatalf("after rm: %v %s", err, out)
	}
}

// A crash leaves workspaces mounted; Recover unmounts them, keeps their data and starts
// their retention, except for the workspaces it is told to keep, which stay as they are.
func TestStoreLoopRecovery(t *testing.T) {
	base := testDir(t)
	s1 := loopStore(t, base)
	ctx := context.Background()
	dir, err := s1.Create(ctx, "crashed", 16)
	if err != nil {
		t.Fatal(err)
	}
	writeAsOwner(t, dir, "result.csv", "a,b\n")
	kept, err := s1.Create(ctx, "kept", 16)
	if err != nil {
		t.Fatal(err)
	}
	// s1 is dropped without a release: the process "crashed".
	s2 := loopStore(t, base)
	if err := s2.Ready("crashed"); err != nil {
		t.Fatalf("before Recover, Ready = %v", err)
	}
	if err := s2.Recover(func(id string) bool { return id == "kept" }); err != nil {
		t.Fatal(err)
	}
	if m, _ := isMountPoint(kept); !m {
		t.Error("the kept workspace was unmounted")
	}
	if err := s2.Ready("kept"); err != nil {
		t.Errorf("Ready(kept) = %v", err)
	}
	if err := s2.Ready("crashed"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Ready(crashed) after Recover = %v, want failed precondition", err)
	}
	must(t, s2.Remove(ctx, "kept"))
	if m, _ := isMountPoint(dir); m {
		t.Fatal("workspace of the crashed run still mounted")
	}
	if _, err := os.Stat(dir + markerSuffix); err != nil {
		t.Fatalf("crashed workspace not marked released: %v", err)
	}
	noLoopDevices(t, s2.dir)
	// The data is in the image.
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "loop,ro", dir+imgSuffix, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount image: %v %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(mnt, "result.csv"))
	must(t, syscall.Unmount(mnt, 0))
	if err != nil || string(b) != "a,b\n" {
		t.Fatalf("data lost: %q %v", b, err)
	}
	if n, err := s2.Sweep(ctx, 0); n != 1 || err != nil {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	assertEmpty(t, s2.dir)
}

func TestStoreLoopConcurrent(t *testing.T) {
	s := loopStore(t, testDir(t))
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { _, errs[i] = s.Create(ctx, fmt.Sprintf("c%d", i), 16) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("create c%d: %v", i, err)
		}
		if m, _ := isMountPoint(filepath.Join(s.dir, fmt.Sprintf("c%d", i))); !m {
			t.Errorf("c%d not mounted", i)
		}
	}
	// The same id at once: one wins, the others are told it exists.
	for i := range n {
		wg.Go(func() { _, errs[i] = s.Create(ctx, "same", 16) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, errdefs.ErrFailedPrecondition):
			t.Errorf("create same: %v", err)
		}
	}
	if won != 1 {
		t.Errorf("%d creates of one id succeeded, want 1", won)
	}
	for i := range n {
		wg.Go(func() {
			if i%2 == 0 {
				errs[i] = s.Remove(ctx, fmt.Sprintf("c%d", i))
			} else {
				errs[i] = s.Release(ctx, fmt.Sprintf("c%d", i))
			}
		})
	}
	wg.Go(func() { s.Sweep(ctx, 0) })
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("remove/release c%d: %v", i, err)
		}
	}
	must(t, s.Remove(ctx, "same"))
	if _, err := s.Sweep(ctx, 0); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, s.dir)
	noLoopDevices(t, s.dir)
}

// A Create that fails half-way leaves nothing behind.
func TestStoreLoopCreateFails(t *testing.T) {
	s := loopStore(t, testDir(t))
	saved := s.mkfs
	s.mkfs = "/bin/false"
	if _, err := s.Create(context.Background(), "broken", 16); err == nil {
		t.Fatal("Create with a failing mkfs succeeded")
	}
	s.mkfs = saved
	assertEmpty(t, s.dir)
	// An image the kernel will not mount (all zeros): the loop device goes too.
	s.formats.get(17, func() (*format, error) { return &format{size: 17 << 20}, nil })
	if _, err := s.Create(context.Background(), "broken", 17); err == nil {
		t.Fatal("Create of an image that does not mount succeeded")
	}
	assertEmpty(t, s.dir)
	noLoopDevices(t, s.dir)
	// A canceled context stops it too, and cleans up.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Create(ctx, "canceled", 16); err == nil {
		t.Fatal("Create with a canceled context succeeded")
	}
	assertEmpty(t, s.dir)
}

// Remove and Sweep of a mounted or released workspace never follow its symlinks.
func TestStoreLoopNoFollow(t *testing.T) {
	testNoFollow(t, loopStore(t, testDir(t)))
}

// A workspace still in use (a process has its cwd there) is detached on release.
func TestStoreLoopReleaseBusy(t *testing.T) {
	s := loopStore(t, testDir(t))
	ctx := context.Background()
	dir, err := s.Create(ctx, "busy", 16)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	must(t, s.Release(ctx, "busy"))
	if m, _ := isMountPoint(dir); m {
		t.Fatal("busy workspace still mounted after release")
	}
	if _, err := f.WriteString("still works\n"); err != nil {
		t.Fatalf("open file broken by release: %v", err)
	}
	must(t, s.Remove(ctx, "busy"))
	f.Close()
	noLoopDevices(t, s.dir)
}

// After a reboot of the host (here: unmounted and its loop device gone) Remount checks a
// workspace's image and mounts it again, its files and owner as they were; a damaged image
// is refused and stays unmounted.
func TestStoreLoopRemount(t *testing.T) {
	needLoop(t)
	if !inOwnMountNamespace(t) {
		return
	}
	s := loopStore(t, testDir(t))
	ctx := context.Background()
	dir, err := s.Create(ctx, "paused", 16)
	if err != nil {
		t.Fatal(err)
	}
	writeAsOwner(t, dir, "kept.txt", "kept")
	must(t, s.Remount(ctx, "paused")) // mounted: nothing to do
	reboot := func() {
		t.Helper()
		must(t, unmount(dir))
		noLoopDevices(t, s.dir)
	}
	reboot()
	if err := s.Ready("paused"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Ready after the reboot = %v, want failed precondition", err)
	}
	must(t, s.Remount(ctx, "paused"))
	if out, err := asOwner(dir, "cat kept.txt && ls -A && echo more >> kept.txt"); err != nil || string(out) != "keptkept.txt\n" {
		t.Fatalf("the remounted workspace as its owner: %v: %q", err, out)
	}
	var sfs syscall.Statfs_t
	must(t, syscall.Statfs(dir, &sfs))
	if sfs.Flags&(syscall.MS_NOSUID|syscall.MS_NODEV) != syscall.MS_NOSUID|syscall.MS_NODEV {
		t.Errorf("remounted without nosuid,nodev (flags %#x)", sfs.Flags)
	}
	must(t, s.Ready("paused"))

	// A damaged superblock: refused, not mounted, the image kept as it is.
	reboot()
	img := dir + imgSuffix
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(make([]byte, 1024), 1024) // the primary superblock
	must(t, errors.Join(err, f.Close()))
	if err := s.Remount(ctx, "paused"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Remount of a damaged image = %v, want failed precondition", err)
	}
	if m, _ := isMountPoint(dir); m {
		t.Fatal("a damaged image was mounted")
	}
	noLoopDevices(t, s.dir)
	if _, err := os.Stat(img); err != nil {
		t.Fatalf("the damaged image: %v", err)
	}
	must(t, s.Release(ctx, "paused"))
	if err := s.Remount(ctx, "paused"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Remount of a released workspace = %v, want failed precondition", err)
	}
	must(t, s.Remove(ctx, "paused"))
	assertEmpty(t, s.dir)
}

// inOwnMountNamespace runs the test again in a process of its own, in a mount namespace of
// its own, and reports false when that is done; in that process it reports true. So a copy
// of its mounts in the namespace of another test's process (a server's kernel template
// copies the host's) never keeps an unmounted image attached to its loop device.
func inOwnMountNamespace(t *testing.T) bool {
	t.Helper()
	const env = "CELLBOX_TEST_OWN_MOUNTS"
	if os.Getenv(env) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // and / made private
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in a mount namespace of its own: %v\n%s", t.Name(), err, out)
	}
	return false
}

// With quota auto, a root machine with loop devices gets quotas.
func TestStoreAuto(t *testing.T) {
	needLoop(t)
	s, err := NewStore(StoreConfig{Dir: testDir(t), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Quotas() {
		t.Fatal("quota auto as root with loop devices: Quotas() = false")
	}
	assertEmpty(t, s.dir) // the probe cleaned up
}

func BenchmarkStoreCreate(b *testing.B) {
	needLoop(b)
	s, err := NewStore(StoreConfig{Dir: b.TempDir(), Quota: "loop"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("b%d", i)
		if _, err := s.Create(ctx, id, DefaultDiskMB); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Remove(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

package guest

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeCgroups is a cgroup2 hierarchy's files as plain files below a temporary folder: the
// root's cgroup.procs, and the sandbox's cgroup sbt-1 holding pids tasks.
func fakeCgroups(t *testing.T, pids int) (mount, self string) {
	t.Helper()
	mount = t.TempDir()
	os.Mkdir(filepath.Join(mount, "sbt-1"), 0o755)
	for name, v := range map[string]string{"cgroup.procs": "", "sbt-1/pids.max": "max\n", "sbt-1/pids.current": strconv.Itoa(pids) + "\n"} {
		if err := os.WriteFile(filepath.Join(mount, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	self = filepath.Join(t.TempDir(), "cgroup")
	os.WriteFile(self, []byte("0::/sbt-1\n"), 0o644)
	return mount, self
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestUserPids: the guest limits its own cgroup, leaves it for the root, and keeps it open
// for its children; while memory is short the limit is the count of that moment, once.
func TestUserPids(t *testing.T) {
	mount, self := fakeCgroups(t, 12)
	p, err := newUserPids(mount, self, 256, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p.fd) })
	max := filepath.Join(mount, "sbt-1", "pids.max")
	if got := readTrim(t, max); got != "256" {
		t.Errorf("pids.max %q, want 256", got)
	}
	if got := readTrim(t, filepath.Join(mount, "cgroup.procs")); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("the root's cgroup.procs got %q, want the guest's pid", got)
	}
	var st unix.Stat_t
	if err := unix.Fstat(p.fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("the cgroup's descriptor: %v, mode %o", err, st.Mode)
	}

	p.hold()
	if got := readTrim(t, max); got != "12" {
		t.Errorf("held: pids.max %q, want the count then, 12", got)
	}
	os.WriteFile(filepath.Join(mount, "sbt-1", "pids.current"), []byte("13\n"), 0o644)
	p.hold()
	if got := readTrim(t, max); got != "12" {
		t.Errorf("held again: pids.max %q, want it to stay at 12", got)
	}
	p.release()
	if got := readTrim(t, max); got != "256" {
		t.Errorf("released: pids.max %q, want 256", got)
	}
	os.WriteFile(filepath.Join(mount, "sbt-1", "pids.current"), []byte("300\n"), 0o644)
	p.hold()
	if got := readTrim(t, max); got != "256" {
		t.Errorf("held past the limit: pids.max %q, want 256", got)
	}
}

// TestUserPidsRefused: without a cgroup of its own to limit, the guest does not start.
func TestUserPidsRefused(t *testing.T) {
	for name, self := range map[string]string{
		"root":      "0::/\n",
		"cgroup v1": "7:pids:/sbt-1\n1:cpu:/sbt-1\n",
		"none":      "",
	} {
		t.Run(name, func(t *testing.T) {
			mount, path := fakeCgroups(t, 1)
			os.WriteFile(path, []byte(self), 0o644)
			if _, err := newUserPids(mount, path, 256, slog.New(slog.DiscardHandler)); err == nil {
				t.Errorf("%q: no error", self)
			}
			if got := readTrim(t, filepath.Join(mount, "cgroup.procs")); got != "" {
				t.Errorf("%q: the guest moved to the root (%q)", self, got)
			}
		})
	}
	mount, self := fakeCgroups(t, 1)
	os.Remove(filepath.Join(mount, "sbt-1", "pids.max"))
	if _, err := newUserPids(mount, self, 256, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("no pids controller: no error")
	}
}

// TestMemWatchAdmit: new processes are held while less than an eighth of the memory limit
// is free, and let go once a quarter is free again.
func TestMemWatchAdmit(t *testing.T) {
	mount, self := fakeCgroups(t, 40)
	p, err := newUserPids(mount, self, 256, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p.fd) })
	w := newMemWatch(1024, slog.New(slog.DiscardHandler))
	w.pids = p
	max := filepath.Join(mount, "sbt-1", "pids.max")
	for _, step := range []struct {
		usedMB int
		want   string
	}{
		{500, "256"},
		{896, "256"}, // an eighth free: not yet
		{897, "40"},
		{1100, "40"},
		{800, "40"}, // less than a quarter free: still held
		{767, "256"},
		{897, "40"},
	} {
		w.admit(uint64(step.usedMB) << 20)
		if got := readTrim(t, max); got != step.want {
			t.Errorf("%d MiB in use of 1024: pids.max %s, want %s", step.usedMB, got, step.want)
		}
	}
	newMemWatch(1024, slog.New(slog.DiscardHandler)).admit(1000 << 20) // no pids: nothing to hold
}

package runc

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/testbin"
)

// A sandbox's limits are written only into the cgroup runc made for it: the parent's names,
// then its id, at the end of the host folder.
func TestOwnCgroup(t *testing.T) {
	for _, tt := range []struct {
		dir, parent string
		want        bool
	}{
		{"/sys/fs/cgroup/memory/user.slice/cellbox/abc", "cellbox", true},
		{"/sys/fs/cgroup/memory/cellbox/abc", "/cellbox", true},
		{"/sys/fs/cgroup/kubepods/cellbox/abc", "/kubepods/cellbox", true},
		{"/sys/fs/cgroup/other/cellbox/abc", "/kubepods/cellbox", false},
		{"/sys/fs/cgroup/memory/cellbox/abcd", "cellbox", false},
		{"/sys/fs/cgroup/memory/xcellbox/abc", "cellbox", false},
		{"/sys/fs/cgroup/memory/cellbox/abc/sub", "cellbox", false},
	} {
		if got := ownCgroup(tt.dir, tt.parent, "abc"); got != tt.want {
			t.Errorf("ownCgroup(%q, %q, abc) = %v, want %v", tt.dir, tt.parent, got, tt.want)
		}
	}
}

// TestRemoveCgroupsRetries: a folder still in use (here: not empty; a cgroup with a
// zombie not yet reaped is busy the same way) is removed once it is free; gone ones are no
// error.
func TestRemoveCgroupsRetries(t *testing.T) {
	dir := t.TempDir()
	free, busy, gone := filepath.Join(dir, "free"), filepath.Join(dir, "busy"), filepath.Join(dir, "gone")
	for _, d := range []string{free, busy} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	held := filepath.Join(busy, "task")
	if err := os.WriteFile(held, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	removeCgroups([]string{free, busy, gone}, slog.New(slog.DiscardHandler))
	if _, err := os.Stat(free); !os.IsNotExist(err) {
		t.Errorf("a free folder was not removed at once: %v", err)
	}
	if _, err := os.Stat(busy); err != nil {
		t.Fatalf("the busy folder: %v", err)
	}
	os.Remove(held)
	if !testbin.Eventually(10*time.Second, func() bool { _, err := os.Stat(busy); return os.IsNotExist(err) }) {
		t.Fatal("the folder, free again, was not removed")
	}
}

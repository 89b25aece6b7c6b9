package runc

import "testing"

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

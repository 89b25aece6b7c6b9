package mountinfo

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	in := "22 27 0:21 / /proc rw,relatime - proc proc rw\n" +
		"99 27 7:0 / /srv/cell\\040box/ab-1 rw,nosuid,nodev - ext4 /dev/loop0 rw\n" +
		"100 27 7:1 / /a\\134b\\011c rw - ext4 /dev/loop1 rw\n"
	got := Parse([]byte(in))
	want := []string{"/proc", "/srv/cell box/ab-1", "/a\\b\tc"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse = %q, want %q", got, want)
	}
}

func TestParseMounts(t *testing.T) {
	data := []byte("34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"40 30 0:37 /sub /sys/fs/cgroup/uni\\040fied rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n" +
		"short line\n")
	got := ParseMounts(data)
	if len(got) != 2 {
		t.Fatalf("%d mounts: %+v", len(got), got)
	}
	if m := got[0]; m.Root != "/" || m.Point != "/sys/fs/cgroup/memory" || m.FSType != "cgroup" || len(m.Super) != 2 || m.Super[1] != "memory" {
		t.Errorf("first: %+v", m)
	}
	if m := got[1]; m.Root != "/sub" || m.Point != "/sys/fs/cgroup/uni fied" || m.FSType != "cgroup2" {
		t.Errorf("second: %+v", m)
	}
}

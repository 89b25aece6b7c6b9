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

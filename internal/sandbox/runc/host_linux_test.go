package runc

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The host dials only a socket that is itself in the run folder, which the guest can
// write: not a link the guest planted toward another socket of the host, nor a file.
func TestDialUnixInRefusesLinks(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", host)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A long folder: the socket's own address would not fit in 108 bytes.
	run := filepath.Join(t.TempDir(), strings.Repeat("x", 100), strings.Repeat("y", 100))
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := os.Symlink(host, filepath.Join(run, "link.sock")); err != nil {
		t.Fatal(err)
	}
	if c, err := dialUnixIn(ctx, run, "link.sock"); err == nil {
		c.Close()
		t.Error("dialed through a symlink to another socket")
	}
	os.WriteFile(filepath.Join(run, "file.sock"), nil, 0o600)
	if _, err := dialUnixIn(ctx, run, "file.sock"); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("dial a regular file: %v", err)
	}
	if err := os.Symlink(filepath.Dir(host), filepath.Join(run, "dir")); err != nil {
		t.Fatal(err)
	}
	if c, err := dialUnixIn(ctx, filepath.Join(run, "dir"), "host.sock"); err == nil {
		c.Close()
		t.Error("dialed through a symlinked folder")
	}
	real, err := net.Listen("unix", filepath.Join(t.TempDir(), "g.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	if err := os.Rename(real.Addr().String(), filepath.Join(run, "guest.sock")); err != nil {
		t.Fatal(err)
	}
	c, err := dialUnixIn(ctx, run, "guest.sock")
	if err != nil {
		t.Fatalf("dial the real socket in a long folder: %v", err)
	}
	c.Close()
}

// childrenWith finds a child by its command line, through the threads' children lists and
// through the scan of /proc alike.
func TestChildrenWith(t *testing.T) {
	marker := "cellbox-children-test-" + strconv.Itoa(os.Getpid())
	cmd := exec.Command("sh", "-c", "read x", marker)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	pid := cmd.Process.Pid
	if got := childrenWith(marker, 0); !slices.Equal(got, []int{pid}) {
		t.Errorf("childrenWith = %v, want [%d]", got, pid)
	}
	if got := childrenWith(marker, pid); len(got) != 0 {
		t.Errorf("childrenWith skipping %d = %v", pid, got)
	}
	if got := childrenByScan(); !slices.Contains(got, pid) {
		t.Errorf("childrenByScan = %v, lacks %d", got, pid)
	}
	if a, b := children(), childrenByScan(); !slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))) {
		t.Errorf("children %v, by scan %v", a, b)
	}
}

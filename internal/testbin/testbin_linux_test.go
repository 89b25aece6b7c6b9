package testbin

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A state folder with something still mounted under it is kept whole, files beyond the
// mount included; once nothing is mounted there it goes.
func TestRemoveStateDirKeepsMounts(t *testing.T) {
	NeedRoot(t, "mounts a tmpfs")
	dir, err := os.MkdirTemp("", "cellbox-statedir-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(filepath.Join(dir, "sandbox", "root"), syscall.MNT_DETACH); os.RemoveAll(dir) })
	root := filepath.Join(dir, "sandbox", "root")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	beyond := filepath.Join(root, "host-file")
	if err := os.WriteFile(beyond, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	RemoveStateDir(dir)
	if _, err := os.Stat(beyond); err != nil {
		t.Fatalf("a file beyond a mount under the state folder: %v", err)
	}
	if err := syscall.Unmount(root, 0); err != nil {
		t.Fatal(err)
	}
	RemoveStateDir(dir)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("state folder with nothing mounted is still there: %v", err)
	}
}

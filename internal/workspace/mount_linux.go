package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cellbox/cellbox/internal/mountinfo"
)

const noFollow = syscall.O_NOFOLLOW

// unmount unmounts dir once; when it is busy (a process still has a file open there), it
// detaches it: gone from the host's view now, freed by the kernel when the last user closes.
func unmount(dir string) error {
	err := syscall.Unmount(dir, 0)
	if errors.Is(err, syscall.EBUSY) {
		err = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	if err != nil {
		return &os.PathError{Op: "unmount", Path: dir, Err: err}
	}
	return nil
}

// isMountPoint reports whether something is mounted on path, as /proc/self/mountinfo says
// (a bind mount from the same file system included).
func isMountPoint(path string) (bool, error) {
	mounts, err := mountPoints()
	if err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m == path {
			return true, nil
		}
	}
	return false, nil
}

// mountPoints lists the mount points of this process's mount namespace.
func mountPoints() ([]string, error) { return mountinfo.Points() }

// loopAttached reports whether a loop device has the file img as its backing file.
func loopAttached(img string) (bool, error) {
	fi, err := os.Stat(img)
	if err != nil {
		return false, err
	}
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return false, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		// A path as it was when attached; " (deleted)" when it is gone.
		if bi, err := os.Stat(strings.TrimSuffix(string(b), "\n")); err == nil && os.SameFile(fi, bi) {
			return true, nil
		}
	}
	return false, nil
}

// removeRootDir removes path if it is an empty folder that root owns, not following a link.
func removeRootDir(path string) {
	var st syscall.Stat_t
	if syscall.Lstat(path, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR && st.Uid == 0 {
		syscall.Rmdir(path) // fails when not empty
	}
}

package workspace

import (
	"errors"
	"os"
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

//go:build !linux

package workspace

import (
	"errors"
	"os"
)

// noFollow: Dir is the host's own, so O_NOFOLLOW is only a second guard, kept on Linux.
const noFollow = 0

// Loop mounts are Linux only: elsewhere NewStore's probe fails (not root, or no loop
// device) and workspaces are plain folders, which are never mounted.

func unmount(dir string) error { return errors.New("unmount needs Linux") }

func isMountPoint(path string) (bool, error) { return false, nil }

func mountPoints() ([]string, error) { return nil, nil }

func loopAttached(img string) (bool, error) { return false, nil }

func removeRootDir(path string) {}

func mountImage(img, dir string) error { return errors.New("loop mounts need Linux") }

func nextData(f *os.File, off int64) (start, end int64, err error) {
	return 0, 0, errors.New("sparse files are read on Linux")
}

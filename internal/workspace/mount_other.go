//go:build !linux

package workspace

import "errors"

// noFollow: Dir is the host's own, so O_NOFOLLOW is only a second guard, kept on Linux.
const noFollow = 0

// Loop mounts are Linux only: elsewhere NewStore's probe fails (not root, or no mount that
// takes -o loop) and workspaces are plain folders, which are never mounted.

func unmount(dir string) error { return errors.New("unmount needs Linux") }

func isMountPoint(path string) (bool, error) { return false, nil }

func mountPoints() ([]string, error) { return nil, nil }

func loopAttached(img string) (bool, error) { return false, nil }

func removeRootDir(path string) {}

package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

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

// mountImage mounts the ext4 image img on dir (nosuid, nodev) through a free loop device
// set up with autoclear, so unmounting frees it, as mount(8)'s -o loop does, without the
// process: /dev/loop-control's LOOP_CTL_GET_FREE, LOOP_CONFIGURE, mount(2).
func mountImage(img, dir string) error {
	f, err := os.OpenFile(img, os.O_RDWR|noFollow, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	dev, err := attachLoop(f)
	if err != nil {
		return fmt.Errorf("attach %s to a loop device: %w", filepath.Base(img), err)
	}
	// Closed on return: autoclear frees the device when the mount goes, or now if it failed.
	defer dev.Close()
	if err := unix.Mount(dev.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "noinit_itable"); err != nil {
		return &os.PathError{Op: "mount", Path: dir, Err: err}
	}
	return nil
}

// attachLoop attaches f to a free loop device, with autoclear, and returns the device open.
func attachLoop(f *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	cfg := unix.LoopConfig{Fd: uint32(f.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}}
	copy(cfg.Info.File_name[:unix.LO_NAME_SIZE-1], f.Name())
	for range 64 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, err
		}
		dev, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) { // before Linux 5.8: two steps
			if err = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(f.Fd())); err == nil {
				if err = unix.IoctlLoopSetStatus64(int(dev.Fd()), &cfg.Info); err != nil {
					unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
				}
			}
		}
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) { // EBUSY: another process took it meanwhile
			return nil, err
		}
	}
	return nil, errors.New("every free loop device was taken before it could be set up")
}

// nextData returns the first run of data in f at or after off, as [start, end): at or past
// the file's end when there is none.
func nextData(f *os.File, off int64) (start, end int64, err error) {
	start, err = f.Seek(off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		fi, err := f.Stat()
		if err != nil {
			return 0, 0, err
		}
		return fi.Size(), fi.Size(), nil
	}
	if err != nil {
		return 0, 0, err
	}
	end, err = f.Seek(start, unix.SEEK_HOLE)
	return start, end, err
}

package runc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const cgroup2SuperMagic = 0x63677270

// cgroupV2 reports whether the host runs the unified cgroup v2 hierarchy.
func cgroupV2() bool {
	var st syscall.Statfs_t
	return syscall.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == cgroup2SuperMagic
}

// swapLimitSupported reports whether a memory+swap limit can be set. On cgroup v1 that
// needs swap accounting (memory.memsw.* files; a runtime fails writing them otherwise). On
// v2 the runtime writes memory.swap.max 0 and skips it where swap accounting is off.
func swapLimitSupported() bool {
	if cgroupV2() {
		return true
	}
	_, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	return err == nil
}

const supported = true

// adoptOrphans makes this process a child subreaper: the processes a runtime leaves
// running when its `run --detach` returns (the guest; gVisor's sentry and gofer) become our
// children, and watchExit reaps them. As process 1 of a container the server would get
// them anyway; elsewhere they would go to the host's init, which may be slow to reap.
func adoptOrphans() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// watchExit watches the process pid: done is closed once it has exited (and it is reaped,
// if it is our child). stop ends the watch without closing done. kill sends it SIGKILL
// through the same pidfd (never to a process that took its pid since), until stop. It
// waits on a pidfd through Go's network poller: no thread is parked per sandbox. Linux 5.3
// or later.
func watchExit(pid int) (done <-chan struct{}, stop func(), kill func() error, _ error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.EINVAL) { // PIDFD_NONBLOCK came with Linux 5.10
		if fd, err = unix.PidfdOpen(pid, 0); err == nil {
			err = unix.SetNonblock(fd, true)
		}
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("watch process %d (pidfd_open needs Linux 5.3): %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	ch := make(chan struct{})
	go func() {
		exited := false
		// A pidfd is readable once its process has exited. Read returns early when stop
		// closes the descriptor.
		rc.Read(func(fd uintptr) bool {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			if err == unix.EINTR || err == nil && n == 0 {
				return false
			}
			if exited = n > 0; exited {
				// Not our child (a server before this one started it): ECHILD, and its
				// own parent reaps it.
				var info unix.Siginfo
				unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
			}
			return true
		})
		f.Close()
		if exited {
			close(ch)
		}
	}()
	kill = func() error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) }); cerr != nil {
			return cerr
		}
		return err
	}
	return ch, func() { f.Close() }, kill, nil
}

// childrenWith returns the pids of this process's children, but skip, whose command line
// contains marker: what a runtime left for us to reap besides the guest.
func childrenWith(marker string, skip int) []int {
	var pids []int
	for _, pid := range children() {
		if pid == skip {
			continue
		}
		if cmd, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); err == nil && bytes.Contains(cmd, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// children returns the pids of this process's children, from the children lists of its
// threads (a few files, however many processes the host runs); where the kernel has no
// such lists (CONFIG_PROC_CHILDREN), from every process's parent in /proc.
func children() []int {
	lists, _ := filepath.Glob("/proc/self/task/*/children")
	if len(lists) == 0 {
		return childrenByScan()
	}
	var pids []int
	for _, p := range lists {
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func childrenByScan() []int {
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command, which may hold spaces: state, ppid, ...
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) >= 2 && f[1] == self {
			pids = append(pids, pid)
		}
	}
	return pids
}

// dialUnixIn connects to the Unix socket name in folder dir, which the sandbox's guest can
// write to. It opens the name without following a symlink and checks that it is a
// socket, then connects through that descriptor (/proc/self/fd/N): the guest cannot point
// the host at any other socket, and dir's length does not count against the 108 bytes a
// socket address may have.
func dialUnixIn(ctx context.Context, dir, name string) (net.Conn, error) {
	d, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s is not a socket", name)
	}
	var dialer net.Dialer
	return dialer.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}

// unpinNullNetns unmounts what runsc bind-mounts at ROOT/null-netns: the empty network
// namespace its gofers share, pinned there for good (a folder with a mount in it cannot be
// removed). runsc pins it again at its next sandbox; the sandboxes running keep theirs.
func unpinNullNetns(root string) {
	for unix.Unmount(filepath.Join(root, "null-netns"), unix.MNT_DETACH) == nil {
	}
}

// readRunFile reads at most max bytes of the regular file name in dir, a folder the sandbox
// writes (the run folder): never through a link, never a FIFO or a device (opened
// non-blocking, then checked), and only a file with one link. errTooLarge: it holds more.
func readRunFile(dir, name string, max int64) ([]byte, error) {
	d, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return nil, fmt.Errorf("%s is not a plain file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return data[:max], errTooLarge
	}
	return data, nil
}

var errTooLarge = errors.New("larger than expected")

// bindRoot bind-mounts folder src, read-only and private, on dst, a new folder: a root of
// its own for one restore (checkpoint.go). Private: the mounts that runc makes under it
// for CRIU propagate nowhere, and none reach it from elsewhere. Read-only: nothing written
// through it reaches the shared root (a RemoveAll that came upon it would fail, not
// empty the image).
func bindRoot(src, dst string) (err error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			unbindRoot(dst)
		}
	}()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return &os.PathError{Op: "bind", Path: dst, Err: err}
	}
	if err := unix.Mount("", dst, "", unix.MS_PRIVATE, ""); err != nil {
		return &os.PathError{Op: "make private", Path: dst, Err: err}
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return &os.PathError{Op: "remount read-only", Path: dst, Err: err}
	}
	return nil
}

// unbindRoot undoes bindRoot (what of it was done): dst unmounted with whatever was
// mounted under it, and removed. Mounts that were never there are no error.
func unbindRoot(dst string) error {
	for {
		err := unix.Unmount(dst, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if err == unix.EINVAL || err == unix.ENOENT {
			break // not a mount point (any more), or no such folder
		}
		if err != nil {
			return &os.PathError{Op: "unmount", Path: dst, Err: err}
		}
	}
	if err := os.Remove(dst); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

package runc

import (
	"context"
	"fmt"
	"net"
	"os"
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

// adoptOrphans makes this process a child subreaper: a detached sandbox's guest, orphaned
// when its runtime command exits, becomes our child, which watchExit reaps. Without it
// the guest goes to the host's init, which may never reap it (a server that is process 1
// of a container).
func adoptOrphans() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// watchExit returns a channel closed when the process pid has exited, and reaps it if it
// is our child. It waits on a pidfd through Go's network poller: no thread is parked per
// sandbox.
func watchExit(pid int) (<-chan struct{}, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watch process %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer f.Close()
		// A pidfd is readable once its process has exited.
		rc.Read(func(fd uintptr) bool {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			if err != nil && err != unix.EINTR || n > 0 {
				// Not our child (a server before this one started it): ECHILD, and its
				// own parent reaps it.
				var info unix.Siginfo
				unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
				return true
			}
			return false
		})
	}()
	return done, nil
}

// dialUnixIn connects to the Unix socket name in folder dir. It goes through the folder's
// descriptor (/proc/self/fd/N/name), so dir's length does not count against the 108 bytes
// a socket address may have.
func dialUnixIn(ctx context.Context, dir, name string) (net.Conn, error) {
	d, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var dialer net.Dialer
	return dialer.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name))
}

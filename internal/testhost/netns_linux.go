package testhost

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on a thread that has entered the namespace fd, for fn to make sockets
// there: a socket keeps the namespace it was made in, whichever thread uses it later.
func inNetns(fd int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is locked to this goroutine and never unlocked: when a goroutine ends
		// locked, the Go runtime ends its thread instead of handing it, still in the test
		// host's namespace, to other goroutines.
		runtime.LockOSThread()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

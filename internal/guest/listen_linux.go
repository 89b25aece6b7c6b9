package guest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/internal/guestproto"
)

// attachTimeout bounds the attach handshake of one connection; replaceTimeout how long a
// new connection waits for the calls of the one it replaces.
const (
	attachTimeout  = 5 * time.Second
	replaceTimeout = 30 * time.Second
)

// Listen serves the guest protocol on the connections that the listener listen makes
// accepts, each opened by the attach handshake with token (see guestproto.ServerAttach),
// until ctx is done; then it kills everything it started. The kernel and its state outlive
// every connection, so a new server process can attach and find them as they were. A
// connection that passes the handshake replaces the one before it; one that does not is
// closed.
//
// A checkpoint (guestproto.OpCheckpoint) closes the listener; Listen then waits for
// SIGUSR1 and calls listen again. Nothing but the host can send the guest a signal: user
// code runs as another uid.
func Listen(ctx context.Context, listen func() (net.Listener, error), token string, opts Options) error {
	if token == "" {
		return errors.New("listen: no attach token")
	}
	ln, err := listen()
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s, err := newServer(opts)
	if err != nil {
		ln.Close()
		return err
	}
	defer s.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	relisten := make(chan os.Signal, 1)
	signal.Notify(relisten, unix.SIGUSR1)
	defer signal.Stop(relisten)
	var lnMu sync.Mutex
	paused := false // the listener was closed for a checkpoint
	s.checkpoint = func() {
		lnMu.Lock()
		defer lnMu.Unlock()
		if !paused {
			s.dumpableForCheckpoint()
			select { // a signal from before the checkpoint is not the restore's
			case <-relisten:
			default:
			}
			paused = true
			ln.Close()
		}
	}
	stop := context.AfterFunc(ctx, func() {
		lnMu.Lock()
		defer lnMu.Unlock()
		ln.Close()
	})
	defer stop()
	// Unattached for opts.OrphanExit: no server will come back for this sandbox.
	orphan := time.AfterFunc(time.Duration(1<<63-1), func() {
		s.log.Warn("no server attached for too long; exiting", "after", opts.OrphanExit.String())
		cancel()
	})
	defer orphan.Stop()
	unattached := func() {
		if opts.OrphanExit > 0 {
			orphan.Reset(opts.OrphanExit)
		}
	}
	unattached()

	var prev <-chan struct{} // closed when the previous connection's calls have returned
	var endPrev context.CancelFunc
	defer func() {
		if endPrev != nil {
			endPrev()
			<-prev
		}
	}()
	for {
		lnMu.Lock()
		cur := ln
		lnMu.Unlock()
		conn, err := cur.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, net.ErrClosed) {
				if !s.awaitRelisten(ctx, relisten, listen, &lnMu, &ln, &paused) {
					break
				}
				continue
			}
			s.log.Warn("accept a connection", "error", err)
			time.Sleep(100 * time.Millisecond) // e.g. out of descriptors: don't spin
			continue
		}
		// One handshake at a time: only the host's root can reach the socket at all.
		conn.SetDeadline(time.Now().Add(attachTimeout))
		if err := guestproto.ServerAttach(conn, token); err != nil {
			s.log.Warn("refused a connection", "error", err)
			conn.Close()
			continue
		}
		conn.SetDeadline(time.Time{})
		// The connection replaces the one before it, whose runs end first: a cell that ran
		// when the old server went away is interrupted before the new one may start another.
		if endPrev != nil {
			endPrev()
			select {
			case <-prev:
			case <-time.After(replaceTimeout):
				s.log.Warn("calls of the replaced connection still running")
			}
		}
		orphan.Stop()
		cctx, endConn := context.WithCancel(ctx)
		served := make(chan struct{})
		prev, endPrev = served, endConn
		go func() {
			defer close(served)
			<-s.serveConn(cctx, conn)
			if cctx.Err() == nil { // it ended by itself, not replaced
				unattached()
			}
		}()
	}
	return nil
}

// awaitRelisten waits, after the listener *ln closed, for SIGUSR1 when it closed for a
// checkpoint (*paused), and listens again. false: Listen ends (ctx is done, the listener
// closed for another reason, or listening again failed).
func (s *server) awaitRelisten(ctx context.Context, sig <-chan os.Signal, listen func() (net.Listener, error), mu *sync.Mutex, ln *net.Listener, paused *bool) bool {
	mu.Lock()
	p := *paused
	mu.Unlock()
	if !p {
		return false
	}
	select {
	case <-sig:
	case <-ctx.Done():
		return false
	}
	nl, err := listen()
	if err != nil {
		s.log.Error("listen again after a checkpoint", "error", err)
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	if ctx.Err() != nil {
		nl.Close()
		return false
	}
	*ln, *paused = nl, false
	s.undumpable()
	return true
}

// dumpableForCheckpoint makes the guest dumpable until undumpable, if protect made it not:
// CRIU checks that it may trace every process from inside the sandbox's user namespace,
// and a process it restored has its memory owned by the host's user namespace (the
// restore forked it there), so a guest not dumpable could not be checkpointed twice. User
// code cannot trace it meanwhile either way: it runs as another uid, with no capability.
func (s *server) dumpableForCheckpoint() {
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil || d != 0 {
		return
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err == nil {
		s.madeDumpable = true
	}
}

// undumpable undoes dumpableForCheckpoint.
func (s *server) undumpable() {
	if s.madeDumpable {
		unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
		s.madeDumpable = false
	}
}

// listenUnix listens on a Unix socket at path that only the guest's uid may connect to.
// The mode comes from the umask, not a chmod after the fact: gVisor refuses to chmod a
// socket that lives on the host (--host-uds=create).
func listenUnix(path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	old := unix.Umask(0o177) // nothing else runs yet that creates files
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	return ln, err
}

// nullStdin makes the guest's stdin this sandbox's own /dev/null. A runtime may hand the
// guest its stdin as a host file (gVisor does), which user code could reopen through
// /proc/1/fd/0; the sandbox's /dev/null it may open anyway.
func nullStdin() error {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Dup2(int(f.Fd()), 0)
}

// logTo makes path, opened for appending (made 0600 when missing), the guest's stdout and
// stderr, so that it holds no file of the host a runtime handed it (which a checkpoint
// could not take along).
func logTo(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Dup2(int(f.Fd()), 1); err != nil {
		return err
	}
	return unix.Dup2(int(f.Fd()), 2)
}

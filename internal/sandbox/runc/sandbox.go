package runc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/sandbox"
)

// Sandbox is one container. It runs detached from the server process: the guest listens
// on a Unix socket in the bundle's run folder (mounted at /.cellbox/run, which only the
// guest's uid may enter), and every connection opens with the attach handshake and the
// sandbox's token. So a server that restarts attaches again (Backend.Attach).
//
// The bundle folder (0700) holds:
//
//	config.json  the OCI spec
//	pid          the guest's pid on the host (written by the runtime)
//	token        the attach token
//	guest.log    the runtime's stderr
//	run/         mounted at /.cellbox/run: guest.sock, guest.log (the guest's own log,
//	             which it caps), the guest's copy of the token, which it removes
//	             once read, and seccomp.bpf, the filter the guest installs on itself
//	rootfs/      under runc, during a restore only: the restore's own root (checkpoint.go)
type Sandbox struct {
	id      string
	b       *Backend
	bundle  string
	token   string // the attach token, as in the bundle's token file
	conn    net.Conn
	done    <-chan struct{} // closed when the guest has exited; nil until known
	unwatch func()          // ends the watch of done
	kill    func() error    // SIGKILL to the watched guest; nil until known

	endOnce sync.Once // Stop or Detach, whichever comes first
	stopErr error
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Files of a bundle.
const (
	runDir  = "run"
	logName = "guest.log"
	// dialTimeout bounds one connection's dial and attach handshake.
	dialTimeout = 5 * time.Second
)

func (s *Sandbox) ID() string               { return s.id }
func (s *Sandbox) Conn() io.ReadWriteCloser { return s.conn }
func (s *Sandbox) GuestWorkspace() string   { return api.WorkspaceDir }
func (s *Sandbox) Done() <-chan struct{}    { return s.done }
func (s *Sandbox) logger() *slog.Logger     { return s.b.log.With("sandbox_id", s.id) }
func (s *Sandbox) pidFile() string          { return filepath.Join(s.bundle, "pid") }
func (s *Sandbox) runtimeName() string      { return filepath.Base(s.b.runtime) }

func (s *Sandbox) exited() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// start writes the bundle, starts the container detached and connects to its guest.
func (s *Sandbox) start(ctx context.Context, spec *specs.Spec) error {
	if err := s.writeBundle(spec, ""); err != nil {
		return fmt.Errorf("create sandbox %s: %w", s.id, err)
	}
	if err := s.launch(ctx, "start", "run", "--detach", "--bundle", s.bundle, "--pid-file", s.pidFile(), s.id); err != nil {
		return err
	}
	return s.connect(ctx, "start")
}

// launch runs the runtime's command args (run or restore, detached), which returns once the
// guest runs, and watches the guest. what names the step in errors.
func (s *Sandbox) launch(ctx context.Context, what string, args ...string) error {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devNull.Close()
	logFile, err := os.OpenFile(filepath.Join(s.bundle, logName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s sandbox %s: %w", what, s.id, err)
	}
	defer logFile.Close()
	// Detached, without a terminal: the runtime hands its stdio to the guest and returns
	// once the guest runs. The runtime's own errors go to the log; the guest's log is its
	// own file in the run folder (--log), its protocol the socket.
	cmd := exec.CommandContext(ctx, s.b.runtime, s.b.argv(args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devNull, logFile, logFile
	// Its own process group: a Ctrl-C meant for the server must not reach the sandbox.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s sandbox %s: %w", what, s.id, ctx.Err())
		}
		return fmt.Errorf("%s sandbox %s: %s %s: %s: %w", what, s.id, s.runtimeName(), err,
			runtimeMessage(s.logHead()), errdefs.ErrUnavailable)
	}
	pid, err := s.readPid()
	if err != nil {
		return fmt.Errorf("%s sandbox %s: %w: %w", what, s.id, err, errdefs.ErrUnavailable)
	}
	if err := s.watch(pid); err != nil {
		return fmt.Errorf("%s sandbox %s: %w: %w", what, s.id, err, errdefs.ErrUnavailable)
	}
	return nil
}

// connect dials the guest, which listens a moment after it starts (or is told to listen
// again), until ctx ends or the guest exits. what names the step in errors.
func (s *Sandbox) connect(ctx context.Context, what string) error {
	for delay := time.Millisecond; ; delay = min(2*delay, 10*time.Millisecond) {
		conn, err := s.dial(ctx)
		if err == nil {
			s.conn = conn
			return nil
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%s sandbox %s: connect to the guest: %w", what, s.id, err)
		}
		select {
		case <-s.done:
			return fmt.Errorf("%s sandbox %s: the guest exited: %s: %w", what, s.id, runtimeMessage(s.logHead()), errdefs.ErrUnavailable)
		case <-ctx.Done():
			return fmt.Errorf("%s sandbox %s: %w", what, s.id, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// writeBundle writes the spec, the token (a new one when token is "") and the run folder,
// which only root may enter. A new token goes to the guest too, as a file in the run
// folder; a restored guest has its own already.
func (s *Sandbox) writeBundle(spec *specs.Spec, token string) error {
	// run/template: the mount point of the kernel template's folder.
	if err := os.MkdirAll(filepath.Join(s.bundle, runDir, "template"), 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	files := map[string][]byte{"config.json": data}
	fresh := token == ""
	if fresh {
		token = sandbox.NewToken()
		files[filepath.Join(runDir, sandbox.GuestToken)] = []byte(token)
	}
	s.token = token
	files[sandbox.GuestToken] = []byte(token)
	// Only for a new guest (a restored one has its filter back from CRIU), and never through
	// a link: the run folder is the sandbox's to write.
	if s.b.seccomp != nil && fresh {
		path := filepath.Join(s.bundle, runDir, sandbox.GuestSeccomp)
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = f.Write(s.b.seccomp)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(s.bundle, name), data, 0o600); err != nil {
			return err
		}
	}
	if err := os.Remove(s.pidFile()); err != nil && !os.IsNotExist(err) { // a stale one
		return err
	}
	return nil
}

// watch watches the guest, pid, and reaps what else of the sandbox the runtime left to us
// (gVisor's sentry and gofer) when it exits.
func (s *Sandbox) watch(pid int) error {
	done, stop, kill, err := watchExit(pid)
	if err != nil {
		return err
	}
	s.done, s.unwatch, s.kill = done, stop, kill
	for _, p := range childrenWith(s.bundle, pid) {
		watchExit(p)
	}
	return nil
}

func (s *Sandbox) readPid() (int, error) {
	b, err := os.ReadFile(s.pidFile())
	if err != nil {
		return 0, fmt.Errorf("read the guest's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("the runtime's pid file holds %q", b)
	}
	return pid, nil
}

// dial connects to the guest's socket and passes the attach handshake with s.token.
func (s *Sandbox) dial(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, err := dialUnixIn(ctx, filepath.Join(s.bundle, runDir), sandbox.GuestSocket)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if err := guestproto.ClientAttach(conn, s.token); err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// logHead returns the beginning of the sandbox's logs, the runtime's and the guest's, to
// explain a failure. The guest's is in the run folder, which the sandbox writes: it is read
// as readRunFile reads (no link followed, no FIFO waited on).
func (s *Sandbox) logHead() []byte {
	var out []byte
	if f, err := os.Open(filepath.Join(s.bundle, logName)); err == nil {
		out, _ = io.ReadAll(io.LimitReader(f, logHead))
		f.Close()
	}
	b, _ := readRunFile(filepath.Join(s.bundle, runDir), sandbox.GuestLog, logHead)
	return append(out, b...)
}

// logHead caps what is read of a sandbox's log.
const logHead = 8 << 10

// Stop kills the container, waits for its guest to exit, deletes the container and its
// bundle. It is idempotent; concurrent calls wait for the first. After Detach it does
// nothing.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.endOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*commandTimeout+2*exitTimeout)
		defer cancel()
		s.stopErr = s.stop(ctx)
		if s.stopErr != nil {
			s.stopErr = fmt.Errorf("stop sandbox %s: %w", s.id, s.stopErr)
		}
	})
	return s.stopErr
}

func (s *Sandbox) stop(ctx context.Context) error {
	var errs []error
	cgroups := s.ownCgroups() // read from the guest while it runs
	if s.conn != nil {
		s.conn.Close()
	}
	if !s.exited() {
		// Killing process 1 of the pid namespace kills every process in it. Under runc and
		// crun the guest is that process, killed through the watch's pidfd: runc kill is a
		// process of ~10 ms of CPU for the same signal. runsc's is its sandbox's.
		if s.b.gvisor || s.kill == nil || s.kill() != nil {
			if _, err := s.b.command(ctx, "kill", s.id, "KILL"); err != nil {
				s.logger().Debug("kill sandbox", "err", err)
			}
		}
	}
	s.waitExit(exitTimeout)
	// delete --force kills what the kill did not reach.
	if err := s.b.delete(ctx, s.id); err != nil {
		errs = append(errs, err)
	}
	// The guest must be gone before Stop returns: its mount namespace holds the workspace,
	// which the caller may unmount and read next.
	if !s.waitExit(exitTimeout) {
		s.logger().Warn("sandbox guest did not exit after kill and delete", "runtime", s.runtimeName())
	}
	removeCgroups(cgroups, s.logger())
	if log := s.logHead(); len(log) > 0 {
		s.logger().Debug("sandbox log", "text", string(log))
	}
	// A restore's own root is undone once its sandbox runs, but a restore cut short may
	// have left it: never remove files through it.
	if err := unbindRoot(filepath.Join(s.bundle, restoreRoot)); err != nil {
		errs = append(errs, err)
	} else if err := os.RemoveAll(s.bundle); err != nil {
		errs = append(errs, err)
	}
	s.b.live.Forget(s.id, s)
	return errors.Join(errs...)
}

// waitExit waits up to d for the guest to exit and reports whether it has (or is not known).
func (s *Sandbox) waitExit(d time.Duration) bool {
	if s.done == nil {
		return true
	}
	select {
	case <-s.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Detach closes the connection and leaves the sandbox running, for Backend.Attach. After
// Stop it does nothing.
func (s *Sandbox) Detach() error {
	s.endOnce.Do(func() {
		if s.conn != nil {
			s.conn.Close()
		}
		if s.unwatch != nil {
			s.unwatch()
		}
		s.b.live.Forget(s.id, s)
	})
	return nil
}

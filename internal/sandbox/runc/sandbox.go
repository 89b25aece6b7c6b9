package runc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/sandbox"
)

// Sandbox is one container, its runtime process running in the foreground.
type Sandbox struct {
	id     string
	b      *Backend
	bundle string
	cmd    *exec.Cmd
	conn   io.ReadWriteCloser
	stderr *stderrLog
	done   chan struct{}

	stopOnce sync.Once
	stopErr  error
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

func (s *Sandbox) ID() string               { return s.id }
func (s *Sandbox) Conn() io.ReadWriteCloser { return s.conn }
func (s *Sandbox) GuestWorkspace() string   { return api.WorkspaceDir }
func (s *Sandbox) Done() <-chan struct{}    { return s.done }
func (s *Sandbox) logger() *slog.Logger     { return s.b.log.With("sandbox_id", s.id) }
func (s *Sandbox) pidFile() string          { return filepath.Join(s.bundle, "pid") }
func (s *Sandbox) runtimeName() string      { return filepath.Base(s.b.runtime) }

func (s *Sandbox) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// start writes the bundle, runs the runtime and waits until it has started the guest.
func (s *Sandbox) start(ctx context.Context, spec *specs.Spec) error {
	if err := os.MkdirAll(s.bundle, 0o700); err != nil {
		return fmt.Errorf("create sandbox %s: %w", s.id, err)
	}
	data, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.bundle, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("create sandbox %s: %w", s.id, err)
	}
	if err := os.Remove(s.pidFile()); err != nil && !os.IsNotExist(err) { // a stale one
		return fmt.Errorf("create sandbox %s: %w", s.id, err)
	}

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return err
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		stdoutR.Close()
		stdoutW.Close()
		return err
	}
	s.conn = sandbox.PipeConn(stdoutR, stdinW)
	// The runtime passes these descriptors on to the guest (no terminal): the guest's
	// stdin and stdout are our pipes, its stderr is shared with the runtime's.
	s.cmd = exec.Command(s.b.runtime, s.b.argv("run", "--bundle", s.bundle, "--pid-file", s.pidFile(), s.id)...)
	s.cmd.Stdin, s.cmd.Stdout, s.cmd.Stderr = stdinR, stdoutW, stderrW
	// Its own process group: a Ctrl-C meant for the server must not reach the sandbox.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = s.cmd.Start()
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stderrR.Close()
		close(s.done)
		return fmt.Errorf("start sandbox %s: run %s: %w: %w", s.id, s.runtimeName(), err, errdefs.ErrUnavailable)
	}
	s.stderr = newStderrLog(stderrR, s.logger())
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()

	// The runtime writes the pid file once the guest runs; it exits early if it failed.
	for delay := time.Millisecond; ; delay = min(2*delay, 5*time.Millisecond) {
		if _, err := os.Stat(s.pidFile()); err == nil {
			return nil
		}
		select {
		case <-s.done:
			select {
			case <-s.stderr.eof:
			case <-time.After(time.Second):
			}
			return fmt.Errorf("start sandbox %s: %s %s: %s: %w", s.id, s.runtimeName(), s.cmd.ProcessState,
				runtimeMessage(s.stderr.head()), errdefs.ErrUnavailable)
		case <-ctx.Done():
			return fmt.Errorf("start sandbox %s: %w", s.id, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// Stop kills the container, waits for its runtime process, deletes the container and its
// bundle. It is idempotent; concurrent calls wait for the first one.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*commandTimeout+exitTimeout)
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
	if s.cmd != nil && s.cmd.Process != nil {
		if !s.exited() {
			// Killing process 1 of the pid namespace kills every process in it.
			s.b.command(ctx, "kill", s.id, "KILL")
		}
		select {
		case <-s.done:
		case <-time.After(exitTimeout):
			s.logger().Warn("sandbox runtime did not exit after kill; killing it", "runtime", s.runtimeName())
			s.cmd.Process.Kill()
			<-s.done
		}
		// A foreground run deletes its container when the guest exits; this is for a
		// runtime that was killed or failed halfway.
		if err := s.b.delete(ctx, s.id); err != nil {
			errs = append(errs, err)
		}
	}
	if s.conn != nil {
		s.conn.Close()
	}
	if err := os.RemoveAll(s.bundle); err != nil {
		errs = append(errs, err)
	}
	s.b.mu.Lock()
	if s.b.live[s.id] == s {
		delete(s.b.live, s.id)
	}
	s.b.mu.Unlock()
	return errors.Join(errs...)
}

// stderrLog drains the runtime's and the guest's stderr into the debug log, capped, and
// keeps its beginning to explain a failed start.
type stderrLog struct {
	mu   sync.Mutex
	buf  []byte
	eof  chan struct{}
	log  *slog.Logger
	left int
}

const (
	stderrHead   = 8 << 10
	stderrLogCap = 64 << 10
)

func newStderrLog(r *os.File, log *slog.Logger) *stderrLog {
	l := &stderrLog{eof: make(chan struct{}), log: log, left: stderrLogCap}
	go l.run(r)
	return l
}

func (l *stderrLog) run(r *os.File) {
	defer close(l.eof)
	defer r.Close()
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			l.mu.Lock()
			if n := min(len(line), stderrHead-len(l.buf)); n > 0 {
				l.buf = append(l.buf, line[:n]...)
			}
			l.mu.Unlock()
			if l.left > 0 {
				l.left -= len(line)
				l.log.Debug("sandbox stderr", "line", string(line))
				if l.left <= 0 {
					l.log.Debug("sandbox stderr: further output is not logged")
				}
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

func (l *stderrLog) head() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.buf...)
}

package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	guestrelay "github.com/cellbox/cellbox/internal/guest/relay"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox"
)

// Sandbox is one container. Its folder in the backend's state (0700) holds the attach
// token, for a later server to attach with; the guest gets it in its environment and
// listens in a tmpfs only root may enter, inside the container.
type Sandbox struct {
	id   string
	b    *Backend
	dir  string
	name string // the container's name
	cid  string // the container's id, once it is known to be this sandbox's; "": none

	token string
	conn  io.ReadWriteCloser
	done  chan struct{} // closed when the container has stopped
	quit  context.CancelFunc

	endOnce sync.Once // Stop or Detach, whichever comes first
	stopErr error
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

const (
	// dialTimeout bounds one connection: the exec and the attach handshake.
	dialTimeout = 10 * time.Second
	// stopTimeout bounds Stop.
	stopTimeout = 30 * time.Second
)

func (b *Backend) newSandbox(id string) *Sandbox {
	return &Sandbox{id: id, b: b, dir: filepath.Join(b.state, id), name: b.containerName(id), done: make(chan struct{})}
}

func (s *Sandbox) ID() string               { return s.id }
func (s *Sandbox) Conn() io.ReadWriteCloser { return s.conn }
func (s *Sandbox) GuestWorkspace() string   { return api.WorkspaceDir }
func (s *Sandbox) Done() <-chan struct{}    { return s.done }
func (s *Sandbox) logger() *slog.Logger     { return s.b.log.With("sandbox_id", s.id) }

// start creates and starts the container and connects to its guest.
func (s *Sandbox) start(ctx context.Context, spec sandbox.Spec) error {
	img, err := s.b.image(ctx, spec.Image)
	if err != nil {
		return fmt.Errorf("create sandbox %s: %w", s.id, err)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create sandbox %s: %w", s.id, err)
	}
	s.token = sandbox.NewToken()
	if err := os.WriteFile(filepath.Join(s.dir, sandbox.GuestToken), []byte(s.token), 0o600); err != nil {
		return fmt.Errorf("create sandbox %s: write the token: %w", s.id, err)
	}
	cfg, host, err := containerSpec(specInput{
		spec: spec, name: s.name, image: img.id, mplCache: img.mplCache, server: s.b.server,
		guest: s.b.guest, token: s.token, etc: s.b.etc,
		runtime: s.b.runtime, gvisor: s.b.gvisor, goarch: s.b.arch, uid: s.b.uid, gid: s.b.gid,
	})
	if err != nil {
		return fmt.Errorf("create sandbox %s: %w", s.id, err)
	}
	cctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	created, err := s.b.cli.ContainerCreate(cctx, client.ContainerCreateOptions{Config: cfg, HostConfig: host, Name: s.name})
	if err != nil {
		return fmt.Errorf("create sandbox %s: %w", s.id, engineError(err))
	}
	s.cid = created.ID
	for _, w := range created.Warnings {
		s.logger().Warn("the engine warns about a sandbox", "warning", w)
	}
	if _, err := s.b.cli.ContainerStart(cctx, s.cid, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start sandbox %s: %w", s.id, engineError(err))
	}
	// Watched from its start: a wait for "not running" ends at once on a created container.
	s.watch()
	// The guest listens a moment after it starts.
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		conn, err := s.dial(ctx)
		if err == nil {
			s.conn = conn
			return nil
		}
		if !errors.Is(err, errNotListening) {
			return fmt.Errorf("start sandbox %s: connect to the guest: %w", s.id, err)
		}
		select {
		case <-s.done:
			return fmt.Errorf("start sandbox %s: the guest exited: %s: %w", s.id, s.logTail(), errdefs.ErrUnavailable)
		case <-ctx.Done():
			return fmt.Errorf("start sandbox %s: %w", s.id, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// attach checks that the container is this server's and runs, watches it and connects.
func (s *Sandbox) attach(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	info, err := s.b.cli.ContainerInspect(cctx, s.name, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: no container %s", errLost, s.name)
		}
		return err
	}
	if info.Container.Config == nil || info.Container.Config.Labels[labelServer] != s.b.server {
		// Not ours: never touched, whatever its name.
		return fmt.Errorf("container %s: %w", s.name, errForeign)
	}
	s.cid = info.Container.ID
	if info.Container.State == nil || !info.Container.State.Running {
		return fmt.Errorf("%w: the sandbox is not running", errLost)
	}
	token, err := os.ReadFile(filepath.Join(s.dir, sandbox.GuestToken))
	if err != nil {
		return fmt.Errorf("%w: read the sandbox's token: %w", errLost, err)
	}
	s.token = string(token)
	s.watch()
	if s.conn, err = s.dial(ctx); err != nil {
		if errors.Is(err, errNotListening) || errors.Is(err, errHandshake) {
			return fmt.Errorf("%w: connect to the guest: %w", errLost, err)
		}
		// The engine did not answer: the sandbox may be fine, for a later attach.
		return fmt.Errorf("connect to the guest: %w", err)
	}
	return nil
}

// watch closes s.done when the container stops, until Stop or Detach.
func (s *Sandbox) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	s.quit = cancel
	go func() {
		for ctx.Err() == nil {
			w := s.b.cli.ContainerWait(ctx, s.cid, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
			select {
			case <-w.Result:
				close(s.done)
				return
			case err := <-w.Error:
				if ctx.Err() != nil {
					return
				}
				if cerrdefs.IsNotFound(err) {
					close(s.done)
					return
				}
				// The engine went away for a moment: ask again.
				s.logger().Debug("wait for the sandbox", "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
}

// errNotListening: the guest does not listen (yet); errHandshake: it refused the attach
// handshake, or the connection ended in it.
var (
	errNotListening = errors.New("the guest does not listen yet")
	errHandshake    = errors.New("attach handshake failed")
)

// dial starts a relay to the guest's socket in the container (an exec of the guest binary
// with --connect) and passes the attach handshake with s.token over it.
func (s *Sandbox) dial(ctx context.Context) (io.ReadWriteCloser, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	ex, err := s.b.cli.ExecCreate(ctx, s.cid, client.ExecCreateOptions{
		User: "0:0", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{image.GuestPath, "guest", "--connect", sandbox.GuestRunDir + "/" + sandbox.GuestSocket},
	})
	if err != nil {
		return nil, engineError(err)
	}
	hj, err := s.b.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, engineError(err)
	}
	c := newRelay(hj)
	done := make(chan error, 1)
	go func() { done <- guestproto.ClientAttach(c, s.token) }()
	select {
	case err = <-done:
		if err != nil {
			err = fmt.Errorf("%w: %w", errHandshake, err)
		}
	case <-ctx.Done():
		err = fmt.Errorf("no answer from the guest: %w: %w", ctx.Err(), errdefs.ErrUnavailable)
	}
	if err != nil {
		c.Close()
		if s.notListening(ex.ID) {
			return nil, errNotListening
		}
		if msg := c.stderr.String(); msg != "" {
			s.logger().Debug("the relay to the guest", "stderr", msg)
		}
		return nil, err
	}
	return c, nil
}

// notListening reports whether the relay exec ended saying that the guest does not listen.
func (s *Sandbox) notListening(execID string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	for {
		r, err := s.b.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil {
			return false
		}
		if !r.Running {
			return r.ExitCode == guestrelay.ExitNotListening
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// relay is a connection to the guest through an exec: writes go to the exec's stdin, reads
// come from its stdout, demultiplexed from the engine's stream; its stderr is kept (capped)
// to explain a failure.
type relay struct {
	hj     client.HijackedResponse
	r      *io.PipeReader
	stderr *capped
	once   sync.Once
}

func newRelay(hj client.ExecAttachResult) *relay {
	pr, pw := io.Pipe()
	c := &relay{hj: hj.HijackedResponse, r: pr, stderr: &capped{max: 4096}}
	go func() {
		_, err := stdcopy.StdCopy(pw, c.stderr, hj.Reader)
		pw.CloseWithError(err)
	}()
	return c
}

func (c *relay) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *relay) Write(p []byte) (int, error) { return c.hj.Conn.Write(p) }
func (c *relay) Close() error {
	c.once.Do(func() {
		c.hj.Close()
		c.r.Close()
	})
	return nil
}

// capped keeps the first max bytes written to it.
type capped struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.max - len(c.buf); n > 0 {
		c.buf = append(c.buf, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.buf)
}

// Stop removes the container (which kills everything in it) and the sandbox's folder. It
// is idempotent; concurrent calls wait for the first. After Detach it does nothing.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.endOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
		defer cancel()
		var errs []error
		if s.conn != nil {
			s.conn.Close()
		}
		// By id, and only a container this sandbox made or found labelled as this
		// server's: never another's that merely took the name.
		if s.cid == "" {
		} else if err := s.b.remove(ctx, s.cid); err != nil {
			errs = append(errs, err)
		} else if s.quit != nil {
			// Removed: the guest is gone, and with it its hold on the workspace.
			select {
			case <-s.done:
			case <-ctx.Done():
			}
		}
		if s.quit != nil {
			s.quit()
		}
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, err)
		}
		s.b.live.Forget(s.id, s)
		if err := errors.Join(errs...); err != nil {
			s.stopErr = fmt.Errorf("stop sandbox %s: %w", s.id, err)
		}
	})
	return s.stopErr
}

// Detach closes the connection and leaves the container running, for Backend.Attach.
// After Stop it does nothing.
func (s *Sandbox) Detach() error {
	s.endOnce.Do(func() {
		if s.conn != nil {
			s.conn.Close()
		}
		if s.quit != nil {
			s.quit()
		}
		s.b.live.Forget(s.id, s)
	})
	return nil
}

// logTail is the end of the container's log, to explain a failure.
func (s *Sandbox) logTail() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := s.b.cli.ContainerLogs(ctx, s.cid, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return "no log"
	}
	defer rc.Close()
	var out capped
	out.max = 4096
	stdcopy.StdCopy(&out, &out, rc)
	if text := out.String(); text != "" {
		return text
	}
	return "no log"
}

// engineError classifies an error of the engine's API.
func engineError(err error) error {
	switch {
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
	case cerrdefs.IsInvalidArgument(err):
		return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	case cerrdefs.IsConflict(err):
		return fmt.Errorf("%w: %w", err, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable)
}

// Update sets the container's memory, CPU and process limits through the engine. Under
// gVisor it is unsupported: the process limit is also an rlimit inside the sentry.
func (s *Sandbox) Update(ctx context.Context, l sandbox.Limits) error {
	if s.b.gvisor || s.cid == "" {
		return fmt.Errorf("sandbox %s: its limits cannot change: %w", s.id, errors.ErrUnsupported)
	}
	r := resources(l, false)
	r.Ulimits = nil // set at creation; the engine cannot change them
	if _, err := s.b.cli.ContainerUpdate(ctx, s.cid, client.ContainerUpdateOptions{Resources: &r}); err != nil {
		return fmt.Errorf("sandbox %s: update its limits: %w", s.id, engineError(err))
	}
	return nil
}

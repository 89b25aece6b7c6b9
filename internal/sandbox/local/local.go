// Package local is the local-unsafe sandbox backend: the guest runs as a plain child
// process of the server, as the server's user, with the workspace as a host folder.
//
// It isolates nothing and limits nothing: code it runs can read and change whatever the
// server's user can. It exists for development and tests on machines without runc.
// Not for: running code from anyone you do not trust.
package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/sandbox"
)

// Config configures the backend.
type Config struct {
	// GuestBinary is the cellbox binary run as the guest; default the running executable.
	GuestBinary string
	// MPLCache is an optional folder with a prebuilt matplotlib font cache (--mpl-cache).
	MPLCache string
	Logger   *slog.Logger
}

// Backend runs guests as child processes. Create it with New.
type Backend struct {
	guest    string
	mplCache string
	log      *slog.Logger

	live sandbox.Live[*Sandbox]
}

var _ sandbox.Backend = (*Backend)(nil)

// markerEnv is set in every guest's environment as "<server pid>/<sandbox id>". Processes
// inherit it, so Stop finds those that left the guest's process group (setsid), and
// Cleanup finds those of a server that is gone.
const markerEnv = "CELLBOX_LOCAL_SANDBOX"

const exitTimeout = 5 * time.Second

// New returns the backend. It logs a warning: nothing it runs is isolated.
func New(cfg Config) (*Backend, error) {
	guest := cfg.GuestBinary
	if guest == "" {
		var err error
		if guest, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the guest binary: %w", err)
		}
	}
	if fi, err := os.Stat(guest); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("guest binary %s is not a file: %w", guest, errdefs.ErrInvalidArgument)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("backend", "local-unsafe")
	log.Warn("the local-unsafe backend isolates nothing: code runs as this user, with this user's files and network, without limits; use it only for development")
	return &Backend{guest: guest, mplCache: cfg.MPLCache, log: log}, nil
}

// Name is "local-unsafe".
func (b *Backend) Name() string { return "local-unsafe" }

// Capabilities: nothing is enforced; user code runs as host processes.
func (b *Backend) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{HostProcesses: true}
}

// Create starts a guest process for spec.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := sandbox.CheckID(spec.ID); err != nil {
		return nil, err
	}
	if spec.Image != "" {
		return nil, fmt.Errorf("sandbox %s: image %q: the local-unsafe backend runs code on this machine's own files and has no images: %w",
			spec.ID, spec.Image, errdefs.ErrInvalidArgument)
	}
	ws, err := filepath.Abs(spec.Workspace)
	if fi, serr := os.Stat(ws); err != nil || serr != nil || !fi.IsDir() {
		return nil, fmt.Errorf("sandbox %s: workspace is not a folder: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	// The guest's temporary folder (its kernel's IPython and matplotlib folders, and user
	// code's temporary files) is the sandbox's own, removed when it stops: a guest is
	// killed, and cannot clean up after itself.
	tmp := tmpDir(os.Getpid(), spec.ID)
	if err := os.Mkdir(tmp, 0o700); errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("sandbox %s exists already: %w", spec.ID, errdefs.ErrFailedPrecondition)
	} else if err != nil {
		return nil, fmt.Errorf("sandbox %s: temporary folder: %w", spec.ID, err)
	}
	args := []string{"guest", "--workspace", ws}
	if b.mplCache != "" {
		args = append(args, "--mpl-cache", b.mplCache)
	}
	// A small environment: the server's own (API keys...) is none of the code's business.
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.TempDir(), "LANG": "C.UTF-8", "TMPDIR": tmp}
	if env["PATH"] == "" {
		env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	maps.Copy(env, spec.Env)
	env[markerEnv] = marker(os.Getpid(), spec.ID)
	cmd := exec.Command(b.guest, args...)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Dir = ws
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		os.RemoveAll(tmp)
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = stdinR, stdoutW
	s := &Sandbox{id: spec.ID, b: b, ws: ws, tmp: tmp, cmd: cmd, conn: sandbox.PipeConn(stdoutR, stdinW), done: make(chan struct{})}
	if !b.live.Add(spec.ID, s) {
		stdinR.Close()
		stdoutW.Close()
		s.conn.Close()
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("sandbox %s exists already: %w", spec.ID, errdefs.ErrFailedPrecondition)
	}
	stderr, err := cmd.StderrPipe()
	if err == nil {
		err = cmd.Start()
	}
	stdinR.Close()
	stdoutW.Close()
	if err != nil {
		s.conn.Close()
		b.live.Forget(s.id, s)
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("start sandbox %s: %w: %w", spec.ID, err, errdefs.ErrUnavailable)
	}
	go logStderr(stderr, b.log.With("sandbox_id", spec.ID))
	go func() {
		cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

func marker(serverPID int, id string) string { return strconv.Itoa(serverPID) + "/" + id }

// tmpPrefix starts the name of each sandbox's temporary folder, in the host's temporary
// folder: the server's pid and the sandbox's id follow.
const tmpPrefix = "cellbox-local-"

func tmpDir(serverPID int, id string) string {
	return filepath.Join(os.TempDir(), tmpPrefix+strconv.Itoa(serverPID)+"-"+id)
}

// Cleanup kills the processes of sandboxes whose server is no longer running.
// It cannot re-attach: keep is ignored.
func (b *Backend) Cleanup(ctx context.Context, keep func(id string) bool) error {
	killMarked(func(m string) bool {
		pid, _, ok := strings.Cut(m, "/")
		n, err := strconv.Atoi(pid)
		return ok && err == nil && n != os.Getpid() && syscall.Kill(n, 0) == syscall.ESRCH
	})
	// And their temporary folders.
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tmpPrefix+"*"))
	for _, d := range dirs {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), tmpPrefix), "-")
		if n, err := strconv.Atoi(pid); err == nil && n > 0 && n != os.Getpid() && syscall.Kill(n, 0) == syscall.ESRCH {
			os.RemoveAll(d)
		}
	}
	return nil
}

// Sandbox is one guest process.
type Sandbox struct {
	id   string
	b    *Backend
	ws   string
	tmp  string // the guest's TMPDIR
	cmd  *exec.Cmd
	conn io.ReadWriteCloser
	done chan struct{}

	stopOnce sync.Once
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

func (s *Sandbox) ID() string               { return s.id }
func (s *Sandbox) Conn() io.ReadWriteCloser { return s.conn }
func (s *Sandbox) GuestWorkspace() string   { return s.ws }
func (s *Sandbox) Done() <-chan struct{}    { return s.done }

// Attach is not supported: a local guest talks over its stdin and stdout, which end with
// the server process.
func (b *Backend) Attach(ctx context.Context, id string) (sandbox.Sandbox, error) {
	return nil, fmt.Errorf("the local-unsafe backend cannot re-attach to a sandbox: %w", errors.ErrUnsupported)
}

// Detach stops the sandbox: it cannot outlive its connection.
func (s *Sandbox) Detach() error { return s.Stop(context.Background()) }

// Stop kills the guest's process group and every process that carries the sandbox's
// marker, then waits for the guest. Idempotent; concurrent calls wait for the first.
func (s *Sandbox) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		me := marker(os.Getpid(), s.id)
		killMarked(func(m string) bool { return m == me })
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-s.done:
		case <-time.After(exitTimeout):
			s.b.log.Warn("guest did not exit after SIGKILL", "sandbox_id", s.id)
		}
		s.conn.Close()
		os.RemoveAll(s.tmp)
		s.b.live.Forget(s.id, s)
	})
	return nil
}

// logStderr logs the guest's stderr at debug, up to a cap, and drains the rest.
func logStderr(r io.Reader, log *slog.Logger) {
	br := bufio.NewReaderSize(r, 4096)
	left := 64 << 10
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && left > 0 {
			left -= len(line)
			log.Debug("sandbox stderr", "line", string(line))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

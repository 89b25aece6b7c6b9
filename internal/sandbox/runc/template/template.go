// Package template runs kernel templates: one prepared Python process per root filesystem
// (the host's, or an image's), whose forks become the kernels of sandboxes on that root.
// A template imports the pre-imports, builds the IPython shell, warms up pandas and
// matplotlib, freezes its objects out of the garbage collector and waits; each kernel is a
// copy-on-write fork that shares all of that, so an idle kernel costs a few MiB instead of
// its own ~80.
//
// The server starts a template (Start) as root on the host, through `cellbox
// template-init` (Main), which gives it mount, network, ipc and uts namespaces of its own
// and, for an image, chroots into the image's root with the host's /proc, /dev and /sys
// (for the cgroups) mounted in it. It listens on fork.sock in Config.Dir, which a backend
// binds into every sandbox on that root where only the sandbox's root (the guest) can reach
// it; the guest asks it for each kernel (guest.Options.Template). What the template checks
// and how a fork enters the sandbox is in pyrunner's template.py.
//
// Not for: the sandboxes themselves (package sandbox and its backends) or the kernel's
// protocol (package guest).
package template

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guest/pyrunner"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/seccomp"
)

// Socket is the template's socket's name in Config.Dir.
const Socket = "fork.sock"

// Config says what template to start.
type Config struct {
	// Python is the interpreter, inside Root: the guest's must be the same (Config.Python
	// of the guest protocol), else it starts its kernels afresh.
	Python string
	// Preimport is run in the template, as the guest runs it in a kernel.
	Preimport string
	// UID and GID are user code's: every kernel becomes this user. Never root.
	UID, GID int
	// Root is the root filesystem the sandboxes have: "" for the host's, else an image's
	// root folder.
	Root string
	// MPLCache is matplotlib's font cache, a folder inside Root (as it is for the image's
	// own cache) or, with Root "", the host's; "": none.
	MPLCache string
	// Dir is the host folder of the socket, created 0700. A backend binds it into its
	// sandboxes; a later template on the same root uses the same folder, so sandboxes that
	// outlive a server reach the next server's template.
	Dir string
	// Binary is the cellbox binary that runs `template-init`; default the running one.
	Binary string
	// Replace: a template serves on Dir, and this one takes over its socket once ready
	// (until then the running one answers); else at once.
	Replace bool
	// Detach are host folders whose mounts (the workspaces) the template's own mount
	// namespace must not keep: a copy there would keep a workspace's file system mounted
	// (unsynced to its image) after the server unmounted it.
	Detach []string
	Logger *slog.Logger
}

// Template is a running template process.
type Template struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan struct{} // closed when the template takes requests
	done  chan struct{} // closed when the process has exited
	start time.Time

	closeOnce sync.Once
}

// Start starts a template. It returns at once: the template takes requests a few seconds
// later (Ready), and a guest that asks before waits on the socket's queue.
func Start(cfg Config) (*Template, error) {
	if cfg.UID <= 0 || cfg.GID <= 0 {
		return nil, fmt.Errorf("kernel template: user code's uid and gid must not be root: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Python == "" || cfg.Dir == "" {
		return nil, fmt.Errorf("kernel template: no Python or folder given: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("kernel template: find the cellbox binary: %w", err)
		}
		cfg.Binary = exe
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	prog, err := seccomp.Program()
	if err != nil {
		return nil, fmt.Errorf("kernel template: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("kernel template: %w", err)
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("kernel template: %w", err)
	}
	sock := filepath.Join(cfg.Dir, Socket)
	lf, err := listen(sock)
	if err != nil {
		return nil, fmt.Errorf("kernel template: %w", err)
	}
	defer lf.Close()
	takeOver := func() error { return os.Rename(sock+".new", sock) }
	if !cfg.Replace {
		if err := takeOver(); err != nil {
			return nil, fmt.Errorf("kernel template: %w", err)
		}
	}

	conf, err := json.Marshal(map[string]any{
		"python": cfg.Python, "uid": cfg.UID, "gid": cfg.GID, "preimport": cfg.Preimport,
		"seccomp": base64.StdEncoding.EncodeToString(prog),
	})
	if err != nil {
		return nil, err
	}
	env := sandbox.GuestEnv(nil)
	for k, v := range pyrunner.KernelEnv(pyrunner.KernelTmp) {
		env = append(env, k+"="+v)
	}
	env = append(env,
		pyrunner.TemplateConfigEnv+"="+string(conf),
		pyrunner.TemplateScriptEnv+"="+pyrunner.Template,
		pyrunner.Env+"="+pyrunner.Script,
	)
	args := []string{"template-init", "--python", cfg.Python, "--hostname", sandbox.Hostname}
	if cfg.Root != "" {
		args = append(args, "--root", cfg.Root)
	}
	if cfg.MPLCache != "" {
		args = append(args, "--mpl-cache", cfg.MPLCache)
	}
	for _, d := range cfg.Detach {
		args = append(args, "--detach", d)
	}
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{lf} // descriptor 3
	if cmd.SysProcAttr, err = sysProcAttr(); err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	t := &Template{cmd: cmd, stdin: stdin, ready: make(chan struct{}), done: make(chan struct{}), start: time.Now()}
	log := cfg.Logger.With("template", cfg.Dir)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kernel template: start %s: %w", cfg.Binary, err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				if cfg.Replace {
					if err := takeOver(); err != nil {
						log.Warn("kernel template: take over the socket", "error", err)
					}
				}
				log.Info("kernel template ready", "after", time.Since(t.start).Round(time.Millisecond))
				close(t.ready)
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 4096), 64<<10)
		for sc.Scan() {
			log.Info("kernel template", "says", sc.Text())
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		wg.Wait()
		err := cmd.Wait()
		if err == nil {
			err = errors.New("exited")
		}
		log.Info("kernel template ended", "error", err)
		close(t.done)
	}()
	return t, nil
}

// listen makes the listening socket at path+".new" and returns it as a file: Start
// renames it over path, so that a template that replaces another (a stale socket, or a
// running template being renewed) leaves no moment without one.
func listen(path string) (*os.File, error) {
	tmp := path + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false) // the socket stays for the template
	defer l.Close()
	if err := os.Chmod(tmp, 0o600); err != nil {
		return nil, err
	}
	return l.File()
}

// Ready is closed when the template takes requests.
func (t *Template) Ready() <-chan struct{} { return t.ready }

// Done is closed when the template has exited.
func (t *Template) Done() <-chan struct{} { return t.done }

// Pid is the template process's pid.
func (t *Template) Pid() int { return t.cmd.Process.Pid }

// Close ends the template (kernels forked from it run on: they are the sandboxes' now) and
// waits for it to exit.
func (t *Template) Close() error {
	t.closeOnce.Do(func() {
		t.stdin.Close() // EOF: the template exits between requests
		select {
		case <-t.done:
		case <-time.After(5 * time.Second):
			t.cmd.Process.Kill()
			<-t.done
		}
	})
	return nil
}

// Package guest is the daemon that runs as process 1 inside every sandbox (or as a plain
// child process of the local-unsafe backend). It serves the cellbox server with the guest
// protocol (package guestproto): a Python kernel (IPython, driven by the runner in package
// pyrunner), programs run as commands, and the workspace's files.
//
// It serves over its stdin/stdout (Serve), and then kills everything it started when that
// connection ends; or on a Unix socket (Listen), where every connection opens with the
// attach handshake and the kernel outlives connections, so a restarted server finds it.
//
// Every path it is given is resolved beneath the workspace, never through a symbolic link
// that leads out.
//
// Not for: starting or isolating sandboxes (package sandbox and its backends), or anything
// on the server's side of the protocol.
package guest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guest/relay"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// CgroupMount is where a gVisor sandbox has the sentry's own cgroup2 hierarchy (runsc
// --in-sandbox-cgroup=v2, with a cgroup mount in the spec and no cgroup namespace), in which
// runsc makes the sandbox's cgroup and starts the guest.
const CgroupMount = "/sys/fs/cgroup"

// Options configure Serve.
type Options struct {
	// Workspace is the folder served as /mnt/data; "" means /mnt/data itself. The local
	// backend passes a host folder. Paths the guest reports are always under /mnt/data.
	Workspace string
	// Cgroup is the folder where the sandbox's own cgroup files are visible, e.g.
	// /sys/fs/cgroup; "" turns OOM accounting off (an OOM kill is then reported as a crash).
	Cgroup string
	// MemoryMB, when not 0, is user code's memory limit, kept by the guest itself (see
	// memWatch): for a sandbox whose kernel has no OOM killer that acts inside it (gVisor).
	MemoryMB int
	// Pids, when not 0, is user code's limit of processes and threads, kept by the guest in
	// its cgroup below CgroupMount (see userPids): for a sandbox whose kernel counts its
	// own tasks there (gVisor). With MemoryMB, new ones are also refused while memory is
	// short.
	Pids int
	// MplCache is an optional folder holding a prebuilt matplotlib font cache; the kernel's
	// private MPLCONFIGDIR is seeded from it.
	MplCache string
	// UserUID and UserGID, when UserUID is not 0, are the user that user code runs as: the
	// kernel, commands and everything they start. The guest itself keeps its own uid, so
	// user code can neither signal nor trace it; files the guest creates in the workspace
	// are given to this user. Switching needs CAP_SETUID, CAP_SETGID and CAP_KILL (and
	// CAP_DAC_OVERRIDE and CAP_CHOWN for the workspace) in a guest that is not root.
	UserUID, UserGID int
	// OrphanExit, with Listen: the guest exits once no connection has been attached for
	// this long (0: never), so a sandbox whose server never comes back ends by itself.
	OrphanExit time.Duration
	// Template is the Unix socket of a kernel template (package template) on the same root
	// filesystem, inside the sandbox: the guest asks it for each kernel, a fork of a
	// prepared Python process, and starts the kernel itself (cold) when it cannot. Only
	// with Init, as process 1 of a sandbox: the kernel becomes the guest's child by being
	// re-parented to it.
	Template string
	// Egress is where the guest serves the egress proxy (guestproto.EgressListen) on the
	// sandbox's own loopback; "": no proxy (a guest that shares the host's network).
	Egress string
	// Init makes the guest act as process 1: it becomes a child subreaper and reaps every
	// child of the process, its own or orphaned. Set it only in a process that runs nothing
	// but the guest: os/exec's Wait cannot work beside it.
	Init bool
	// Logger receives the guest's own diagnostics, never user output; nil discards them.
	Logger *slog.Logger
}

// Main is `cellbox guest`: it serves the guest protocol on stdin/stdout until the
// connection ends, or with --listen on a Unix socket for as long as the sandbox lives; then
// it kills everything it started and returns the process's exit code. It ignores every
// signal it can (see protect).
func Main(args []string) int {
	fs := flag.NewFlagSet("guest", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: cellbox guest [flags]\n\nThe in-sandbox daemon: serves the guest protocol on stdin/stdout. A backend starts it; it is not for use by hand.\n\nFlags:")
		fs.PrintDefaults()
	}
	workspace := fs.String("workspace", api.WorkspaceDir, "the workspace folder, seen by users as "+api.WorkspaceDir)
	cgroup := fs.String("cgroup", "", "folder with the sandbox's own cgroup files, e.g. /sys/fs/cgroup (empty: no OOM accounting)")
	memoryMB := fs.Int("memory-mb", 0, "keep user code's memory under this many MiB: past it, kill the process that holds the most (for gVisor, whose host OOM kill would end the whole sandbox; 0: the sandbox's kernel does)")
	pids := fs.Int("pids", 0, "keep user code's processes and threads under this many, in the guest's cgroup of the cgroup2 hierarchy at "+CgroupMount+", which the guest leaves (for gVisor, whose sentry counts its tasks there; 0: the sandbox's cgroup does)")
	mplCache := fs.String("mpl-cache", "", "optional read-only folder with a prebuilt matplotlib font cache")
	userUID := fs.Int("user-uid", 0, "run user code (kernel, commands) as this uid; 0: as the guest's own")
	userGID := fs.Int("user-gid", 0, "with --user-uid: the gid of user code")
	listen := fs.String("listen", "", "serve on a Unix socket at this path instead of stdin/stdout; every connection opens with the attach handshake, and the kernel outlives connections")
	tokenFile := fs.String("token-file", "", "with --listen: file holding the attach token; read once and removed")
	tokenEnv := fs.String("token-env", "", "with --listen, instead of --token-file: environment variable holding the attach token; read once and removed from what the guest starts")
	orphanExit := fs.Duration("orphan-exit", 0, "with --listen: exit once no server has been attached for this long (0: never)")
	template := fs.String("template", "", "Unix socket of the kernel template for this sandbox's root filesystem: kernels are forked from it (else, or when it fails, started afresh)")
	egress := fs.String("egress-listen", "", "serve the egress proxy on this TCP address of the sandbox's own loopback, e.g. "+guestproto.EgressListen+" (empty: none)")
	logFile := fs.String("log", "", "write the guest's log (its stdout and stderr) to this file, opened inside the sandbox, instead of the stdio the runtime gave it: a checkpoint cannot take a file of the host along")
	seccompFile := fs.String("seccomp", "", "install the seccomp program in this file (struct sock_filter entries in the machine's byte order, as the backend writes it) on every thread before anything else, and exit if it cannot (empty: the runtime installed the filter, or none)")
	connect := fs.String("connect", "", "instead of serving: join stdin/stdout to the Unix socket of a guest listening at this path (how the docker backend reaches its guest, started by the engine's exec)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	// First of all, before the guest listens or starts anything: nothing runs in the
	// sandbox unfiltered. Fails closed.
	if *seccompFile != "" {
		if err := installSeccomp(*seccompFile); err != nil {
			fmt.Fprintf(os.Stderr, "cellbox guest: --seccomp: %v\n", err)
			return 1
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cellbox guest: unexpected arguments: %q\n", fs.Args())
		return 2
	}
	if *connect != "" {
		if err := relay.Connect(*connect, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "cellbox guest --connect: %v\n", err)
			if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
				return relay.ExitNotListening
			}
			return 1
		}
		return 0
	}
	if *userUID < 0 || *userGID < 0 || (*userUID == 0) != (*userGID == 0) {
		fmt.Fprintln(os.Stderr, "cellbox guest: --user-uid and --user-gid go together and must be positive")
		return 2
	}
	if (*listen == "") != (*tokenFile == "" && *tokenEnv == "") || *tokenFile != "" && *tokenEnv != "" {
		fmt.Fprintln(os.Stderr, "cellbox guest: --listen goes with one of --token-file and --token-env")
		return 2
	}
	if *logFile != "" {
		if err := logTo(*logFile); err != nil {
			fmt.Fprintf(os.Stderr, "cellbox guest: --log: %v\n", err)
			return 1
		}
	}
	tuneMemory()
	reserveThreads(8)
	// The log may be a file the sandbox keeps for its whole life: cap it.
	log := slog.New(slog.NewTextHandler(&cappedWriter{w: os.Stderr, left: maxLog}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	protect(log)
	ctx := context.Background()
	opts := Options{Workspace: *workspace, Cgroup: *cgroup, MemoryMB: *memoryMB, Pids: *pids, MplCache: *mplCache,
		UserUID: *userUID, UserGID: *userGID, OrphanExit: *orphanExit, Template: *template, Egress: *egress, Init: true, Logger: log}
	var err error
	if *listen != "" {
		err = listenMain(ctx, *listen, *tokenFile, *tokenEnv, opts)
	} else {
		// stdout carries the protocol from here on: nothing else may write to it.
		conn := stdio{r: os.Stdin, w: os.Stdout}
		os.Stdout = os.Stderr
		err = Serve(ctx, conn, opts)
	}
	killAll()
	if err != nil {
		log.Error("guest stopped", "error", err)
		return 1
	}
	return 0
}

type stdio struct {
	r *os.File
	w *os.File
}

func (s stdio) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s stdio) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s stdio) Close() error {
	s.r.Close()
	return s.w.Close()
}

var _ io.ReadWriteCloser = stdio{}

// listenMain serves on a Unix socket at path, with the token read from tokenFile or the
// variable tokenEnv.
func listenMain(ctx context.Context, path, tokenFile, tokenEnv string, opts Options) error {
	token, err := readToken(tokenFile, tokenEnv)
	if err != nil {
		return err
	}
	if err := nullStdin(); err != nil {
		return err
	}
	return Listen(ctx, func() (net.Listener, error) {
		ln, err := listenUnix(path)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", path, err)
		}
		return ln, nil
	}, token, opts)
}

// readToken reads the attach token from path and removes the file, or from the variable
// env and unsets it (so that nothing the guest starts inherits it): it is read once.
func readToken(path, env string) (string, error) {
	var token string
	if env != "" {
		token = os.Getenv(env)
		if err := os.Unsetenv(env); err != nil {
			return "", fmt.Errorf("remove attach token: %w", err)
		}
	} else {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read attach token: %w", err)
		}
		if err := os.Remove(path); err != nil {
			return "", fmt.Errorf("remove attach token: %w", err)
		}
		token = string(b)
	}
	token = strings.TrimSpace(token)
	if len(token) < 32 {
		return "", errors.New("attach token: too short")
	}
	return token, nil
}

// maxLog caps what the guest logs in its life.
const maxLog = 1 << 20

// cappedWriter writes until left runs out, then drops everything.
type cappedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	left int
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left <= 0 {
		return len(p), nil
	}
	n := min(len(p), c.left)
	c.left -= n
	if _, err := c.w.Write(p[:n]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// tuneMemory keeps the guest small: one per sandbox, mostly idle, on a host that runs
// thousands. One P (the guest waits on I/O; a P caches memory of its own), and a heap goal
// a quarter above what is live (the binary's packages leave ~2 MiB of it from their init).
func tuneMemory() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
	}
	debug.FreeOSMemory()
}

// reserveThreads makes the Go runtime start n threads now, which it then keeps idle for
// when it needs one: each goroutine here holds a thread of its own until all have one. In
// a sandbox whose process limit user code has used up (threads count), the guest could not
// start a thread when a call blocks, and the runtime dies of that.
func reserveThreads(n int) {
	var locked, done sync.WaitGroup
	release := make(chan struct{})
	locked.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	close(release)
	done.Wait()
}

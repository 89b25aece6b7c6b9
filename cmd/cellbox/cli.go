package main

// What run and repl share: their flags, the server they talk to (embedded or --server),
// Ctrl-C handling, and exit codes.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/server"
)

// Exit codes of run and repl. A status of user code maps like coreutils' timeout and a
// shell's signals do: 124 timeout, 130 interrupted (SIGINT), 137 out of memory (SIGKILL).
const (
	exitOK          = 0
	exitError       = 1 // the code raised, or its sandbox crashed
	exitUsage       = 2
	exitService     = 3 // cellbox itself failed: server unreachable, request refused, ...
	exitTimeout     = 124
	exitInterrupted = 130
	exitOOM         = 137
)

func exitCode(status string) int {
	switch status {
	case api.StatusOK:
		return exitOK
	case api.StatusTimeout:
		return exitTimeout
	case api.StatusInterrupted:
		return exitInterrupted
	case api.StatusOOM:
		return exitOOM
	}
	return exitError
}

// cliFlags are the flags run and repl share. Every setting of `cellbox serve` is accepted
// too (for the embedded server), as are CELLBOX_* variables and --config, via config.Load.
type cliFlags struct {
	name    string
	cfg     config.Config
	server  string
	out     string
	timeout time.Duration
	files   []string
	network *api.Network // the session's network policy; nil: the server's default
	fs      *flag.FlagSet
	own     []string // names of the flags shown by -h
}

// newFlags returns the flag set of a client command; define its own flags with f.fs and
// list them in f.own before calling parse.
func newFlags(name, synopsis string) *cliFlags {
	f := &cliFlags{name: name, cfg: config.Default()}
	// The embedded server's defaults: quiet, no warm pool, imports only when the code asks,
	// and no keeping of workspaces (what the code made is saved under --out).
	f.cfg.LogLevel = "warn"
	f.cfg.PoolSize = 0
	f.cfg.Preimport = ""
	f.cfg.Retention = 0
	f.cfg.Image = "" // --image is the session's; none: the server's default
	f.fs = flag.NewFlagSet(name, flag.ContinueOnError)
	f.fs.StringVar(&f.server, "server", "", "URL of a running cellbox server (default: start one in this process)")
	f.fs.StringVar(&f.out, "out", "cellbox-out", "folder for images and files the code makes")
	f.fs.DurationVar(&f.timeout, "timeout", 0, "wall time of one execution (default: the server's, 60s)")
	f.fs.Func("file", "upload this local file to /mnt/data/<its base name> first (repeatable)", func(s string) error {
		f.files = append(f.files, s)
		return nil
	})
	f.own = []string{"server", "out", "timeout", "file", "image", "backend", "rootfs", "state-dir"}
	f.fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: %s\n\nFlags:\n", synopsis)
		show := flag.NewFlagSet(name, flag.ContinueOnError)
		show.SetOutput(os.Stderr)
		for _, n := range f.own {
			if fl := f.fs.Lookup(n); fl != nil {
				show.Var(fl.Value, fl.Name, fl.Usage)
			}
		}
		show.PrintDefaults()
		fmt.Fprintln(os.Stderr, "\nEvery setting of `cellbox serve -h` applies to the embedded server too,\nas do CELLBOX_* variables (CELLBOX_SERVER=URL, CELLBOX_BACKEND=local-unsafe, ...).\n"+
			"With --server, CELLBOX_API_KEY is the API key sent to it.")
	}
	return f
}

// parse parses args; a non-negative code means: exit with it now.
func (f *cliFlags) parse(args []string) int {
	f.cfg.Flags(f.fs)
	f.fs.Lookup("image").Usage = "the image the session runs on, built by cellbox image build NAME (default: the server's); an embedded server needs --rootfs image for it"
	if err := config.Load(f.fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(os.Stderr, "cellbox %s: %v\n", f.name, err)
		return exitUsage
	}
	return -1
}

// connect returns a client of the --server (with the key in CELLBOX_API_KEY, if set), or
// starts a keyless server on loopback in this process; stop ends the embedded one (every
// sandbox stopped).
func (f *cliFlags) connect(ctx context.Context) (c *client.Client, stop func(), err error) {
	if f.server != "" {
		return client.New(f.server, client.WithAPIKey(os.Getenv("CELLBOX_API_KEY"))), func() {}, nil
	}
	cfg := f.cfg
	cfg.Addr = "127.0.0.1:0"
	cfg.PoolSize = 0
	cfg.ImagePools = ""
	if cfg.Image == "" {
		cfg.Image = image.DefaultName
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("bad settings:\n%w", err)
	}
	s, err := startEmbedded(ctx, cfg, server.Options{Logger: server.NewLogger(cfg.LogLevel)})
	if err != nil {
		return nil, nil, err
	}
	return client.New(s.URL), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "cellbox: shut down the embedded server: %v\n", err)
		}
	}, nil
}

// startEmbedded starts a server on the first slot <state-dir>/embedded/N that no other
// server holds (server.Start locks it). A server cleans up every sandbox of its state dir
// when it starts (but for the sessions it takes over), so an embedded server must never
// share one with `cellbox serve` or with another run. The slots are reused: the next run
// cleans up after a crashed one (embedded servers end their sessions on exit, and those a
// crashed one left at start), and keeps the font cache.
func startEmbedded(ctx context.Context, cfg config.Config, opts server.Options) (*server.Server, error) {
	cfg.EndSessionsOnExit = true // its sessions are the command's own
	base := cfg.StateDir
	for i := 0; i < 1000; i++ {
		cfg.StateDir = filepath.Join(base, "embedded", strconv.Itoa(i))
		s, err := server.Start(ctx, cfg, opts)
		if !errors.Is(err, server.ErrStateDirInUse) {
			return s, err
		}
	}
	return nil, fmt.Errorf("state dir %s: 1000 embedded servers are running", base)
}

// start connects (see connect), creates a session and uploads the --file files into it;
// end deletes the session and stops an embedded server.
func (f *cliFlags) start(ctx context.Context, sig *signals) (s *session, end func(), err error) {
	for _, p := range f.files { // fail before starting anything
		if _, err := os.Stat(p); err != nil {
			return nil, nil, fmt.Errorf("--file: %w", err)
		}
	}
	c, stop, err := f.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	sess, err := c.CreateSession(ctx, api.CreateSessionRequest{Image: f.cfg.Image, Network: f.network})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("start a session: %w", err)
	}
	end = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		c.DeleteSession(ctx, sess.ID)
		stop()
	}
	for _, p := range f.files {
		if err := upload(ctx, c, sess.ID, p); err != nil {
			end()
			return nil, nil, err
		}
	}
	s = &session{c: c, id: sess.ID, outDir: f.out, stdout: os.Stdout, stderr: os.Stderr, sig: sig}
	return s, end, nil
}

func upload(ctx context.Context, c *client.Client, id, path string) error {
	r, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--file: %w", err)
	}
	defer r.Close()
	if _, err := c.UploadFile(ctx, id, filepath.Base(path), r); err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	return nil
}

// signals hands Ctrl-C (SIGINT) to the handler of the moment: a running cell interrupts,
// the repl's prompt clears its input, anything else quits. SIGTERM always quits.
type signals struct {
	mu   sync.Mutex
	quit func()
	fn   func()
	ch   chan os.Signal
}

// watchSignals starts handling signals; quit is the handler of SIGTERM and, until
// handle says otherwise, of SIGINT.
func watchSignals(quit func()) *signals {
	s := &signals{quit: quit, fn: quit, ch: make(chan os.Signal, 1)}
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		for sig := range s.ch {
			s.mu.Lock()
			fn := s.fn
			s.mu.Unlock()
			if sig != os.Interrupt {
				fn = s.quit
			}
			fn()
		}
	}()
	return s
}

// handle makes fn the handler of Ctrl-C until the returned func restores the one before.
func (s *signals) handle(fn func()) (restore func()) {
	s.mu.Lock()
	old := s.fn
	s.fn = fn
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.fn = old
		s.mu.Unlock()
	}
}

func (s *signals) stop() { signal.Stop(s.ch) }

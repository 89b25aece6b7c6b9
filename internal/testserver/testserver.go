// Package testserver starts cellbox servers for tests: in the test's process
// (server.Start), once per package (Shared) or once per test (Start), or as a `cellbox
// serve` process (Serve); each with a test's config, a state folder of its own, and its
// shutdown and cleanup. Only tests import it.
package testserver

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testbin"
)

// RuntimeEnv picks the OCI runtime of the tests' servers (runc by default).
const RuntimeEnv = "CELLBOX_TEST_RUNTIME"

// Runtime is the OCI runtime of the tests' servers: $CELLBOX_TEST_RUNTIME, else runc.
func Runtime() string {
	if rt := os.Getenv(RuntimeEnv); rt != "" {
		return rt
	}
	return "runc"
}

// Config is a server config for tests on setup, in stateDir: on a free local port, ending
// its sessions on exit (nothing outlives the test), a pool of 2 that does not grow (a test's
// quick run of sessions must not start sandboxes beside it: how a pool grows is the session
// package's tests'), warnings only in the log, and a short grace for an interrupt.
func Config(setup testbin.Setup, stateDir string) config.Config {
	cfg := config.Default()
	cfg.Backend, cfg.RootFS, cfg.ImagesDir = setup.Backend, setup.RootFS, setup.ImagesDir
	cfg.Runtime = Runtime()
	cfg.Addr = "127.0.0.1:0"
	cfg.StateDir = stateDir
	cfg.EndSessionsOnExit = true
	cfg.PoolSize, cfg.PoolMax = 2, 0
	cfg.LogLevel = "warn"
	cfg.InterruptGrace = 2 * time.Second
	return cfg
}

// Host is runc on the host's root filesystem, after calling Missing unless this machine
// can run it.
func Host(t testing.TB) testbin.Setup {
	t.Helper()
	testbin.NeedRunc(t)
	return testbin.Setup{Name: "runc", Backend: "runc", RootFS: "host"}
}

// Start starts a server in this process with cfg and opts (the test's binary as the guest
// unless opts names one); it shuts down when the test ends.
func Start(t testing.TB, cfg config.Config, opts server.Options) *server.Server {
	t.Helper()
	if opts.GuestBinary == "" {
		opts.GuestBinary = testbin.Cellbox(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := server.Start(ctx, cfg, opts)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(func() { shutdown(s) })
	return s
}

func shutdown(s *server.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.Shutdown(ctx)
}

// Shared is one server for the tests of a package, started by the first test that asks and
// shut down by Main after the last. The zero value is runc on the host's root with Config.
type Shared struct {
	// Prefix starts the name of the server's folder in the temporary folder.
	Prefix string
	// FromSetup: the server runs on testbin.TestSetup's setup ($CELLBOX_TEST_SETUP), not
	// always runc on the host's root.
	FromSetup bool
	// Prepare, if set, adjusts the config and options before the start; dir is the
	// server's folder (its state is dir/state), for files such as keys.
	Prepare func(dir string, cfg *config.Config, opts *server.Options) error

	once    sync.Once
	started atomic.Bool // srv is up: later calls check nothing
	srv     *server.Server
	err     error
	dir     string
	setup   testbin.Setup
}

// Start returns the shared server, starting it the first time; it calls Missing first when
// this machine lacks what the server needs.
func (s *Shared) Start(t testing.TB) *server.Server {
	t.Helper()
	if s.started.Load() {
		return s.srv
	}
	setup := testbin.Setup{}
	if s.FromSetup {
		setup = testbin.TestSetup(t)
		testbin.NeedProgram(t, Runtime(), Runtime())
	} else {
		setup = Host(t)
	}
	guest := testbin.Cellbox(t)
	s.once.Do(func() {
		s.setup = setup
		if s.dir, s.err = os.MkdirTemp("", "cellbox-"+s.Prefix+"-"); s.err != nil {
			return
		}
		cfg := Config(setup, filepath.Join(s.dir, "state"))
		opts := server.Options{GuestBinary: guest}
		if s.Prepare != nil {
			if s.err = s.Prepare(s.dir, &cfg, &opts); s.err != nil {
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s.srv, s.err = server.Start(ctx, cfg, opts)
		s.started.Store(s.err == nil)
	})
	if s.err != nil {
		t.Fatalf("start server: %v", s.err)
	}
	return s.srv
}

// Setup is what the shared server runs on (after Start).
func (s *Shared) Setup() testbin.Setup { return s.setup }

// Close shuts the server down, if it started, and removes its folder
// (testbin.RemoveStateDir).
func (s *Shared) Close() {
	if s.srv != nil {
		shutdown(s.srv)
	}
	testbin.RemoveStateDir(s.dir)
}

// Main runs the package's tests (call it from TestMain), then closes the shared servers.
func Main(m *testing.M, shared ...*Shared) {
	code := m.Run()
	for _, s := range shared {
		s.Close()
	}
	os.Exit(code)
}

// Served is a `cellbox serve` process.
type Served struct {
	URL    string
	Cmd    *exec.Cmd
	Log    string        // path of its stdout and stderr
	Exited chan struct{} // closed when it has exited; Err is then its Wait error
	Err    error
}

// Serve starts `cellbox serve` (the test's binary) on a free port with the state dir and
// args, and waits until it answers /healthz. It ends its sessions on exit unless args say
// --end-sessions-on-exit=false, and its pools do not grow (see Config) unless they give
// --pool-max. A server still running when the test ends gets SIGTERM,
// then SIGKILL; the end of its log is printed when the test failed.
func Serve(t testing.TB, state string, args ...string) *Served {
	t.Helper()
	return serve(t, state, nil, args)
}

func serve(t testing.TB, state string, attr *syscall.SysProcAttr, args []string) *Served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Served{URL: "http://" + addr, Log: filepath.Join(t.TempDir(), "serve.log"), Exited: make(chan struct{})}
	logf, err := os.Create(s.Log)
	if err != nil {
		t.Fatal(err)
	}
	s.Cmd = exec.Command(testbin.Cellbox(t), append([]string{"serve", "--addr", addr, "--state-dir", state, "--end-sessions-on-exit", "--pool-max", "0"}, args...)...)
	s.Cmd.Stdout, s.Cmd.Stderr, s.Cmd.SysProcAttr = logf, logf, attr
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.Err = s.Cmd.Wait()
		logf.Close()
		close(s.Exited)
	}()
	t.Cleanup(func() {
		s.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.Exited:
		case <-time.After(time.Minute):
			s.Cmd.Process.Kill()
			<-s.Exited
		}
		if t.Failed() { // what the server said is where a failure is explained
			out := s.Output()
			t.Logf("cellbox serve on %s, the end of its log:\n%s", s.URL, out[max(0, len(out)-8000):])
		}
	})
	c := client.New(s.URL)
	err = testbin.Poll(2*time.Minute, func() error {
		select {
		case <-s.Exited:
			t.Fatalf("cellbox serve exited: %v\n%s", s.Err, s.Output())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Health(ctx)
		return err
	})
	if err != nil {
		t.Fatalf("cellbox serve does not answer /healthz: %v\n%s", err, s.Output())
	}
	return s
}

// Output is what the process wrote so far.
func (s *Served) Output() string {
	b, _ := os.ReadFile(s.Log)
	return string(b)
}

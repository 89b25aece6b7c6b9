// Package testbin builds the cellbox binary once per test process, for tests that need a
// real guest or a real server process. Only tests import it.
package testbin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/mountinfo"
)

var (
	once sync.Once
	path string
	err  error
	out  []byte
)

// BinaryEnv names a cellbox binary, built as scripts/build.sh builds it, for the tests to run
// instead of building their own: `make test` builds ./bin/cellbox once and sets it, so the
// dozen packages that need the binary don't each link it (60 MB, minutes on a busy machine).
const BinaryEnv = "CELLBOX_TEST_BINARY"

// ModuleRoot is the folder of the module's go.mod, above the test's working folder (its
// package's): tests are built with -trimpath (make test), so their source files' paths
// name no folder.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the test's folder")
		}
		dir = up
	}
}

// Cellbox returns the path of a static cellbox binary (CGO_ENABLED=0) with its guest
// attached: $CELLBOX_TEST_BINARY when set, else one built once per test process.
func Cellbox(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if p := os.Getenv(BinaryEnv); p != "" {
			if path, err = filepath.Abs(p); err == nil {
				_, err = os.Stat(path)
			}
			if err != nil {
				err = fmt.Errorf("%s=%s: %w (make build builds it)", BinaryEnv, p, err)
			}
			return
		}
		root, rerr := ModuleRoot()
		if rerr != nil {
			err = rerr
			return
		}
		sweep()
		dir, derr := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
		if derr != nil {
			err = derr
			return
		}
		// As scripts/build.sh builds it: with the guest's own binary attached, which the
		// server writes out and runs in its sandboxes (a backend given path runs path).
		path = filepath.Join(dir, "cellbox")
		guest := filepath.Join(dir, "cellbox-guest")
		for _, args := range [][]string{
			{"go", "build", "-o", path, "./cmd/cellbox"},
			{"go", "build", "-o", guest, "./cmd/cellbox-guest"},
			{guest, "attach", guest, path},
		} {
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err = cmd.CombinedOutput(); err != nil {
				return
			}
		}
	})
	if err != nil {
		t.Fatalf("build cellbox: %v\n%s", err, out)
	}
	return path
}

// dirPrefix starts the name of each test process's build folder, followed by its pid.
const dirPrefix = "cellbox-testbin-"

// sweep removes the build folders of test processes that have ended: a test process has no
// hook at its exit, and a binary each (60 MB) would fill the disk over a few hundred runs.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), dirPrefix)
		pid, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '-'), 0)])
		if err == nil && pid > 0 && syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // its process may still run
		}
		os.RemoveAll(d)
	}
}

// Missing skips a test that needs a component this machine lacks (root, runc, IPython,
// Node.js, ...), saying which and how to get it. With the environment variable CI set it
// fails the test instead: `make test` installs everything, so a green CI means every test
// ran, and a broken install step cannot hide behind a skip.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set, so a missing component fails the test: "+format, args...)
	}
	t.Skipf(format, args...)
}

// NeedRoot calls Missing unless the test runs as root.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root (%s); make test runs as root", why)
	}
}

// NeedIPython calls Missing unless /usr/bin/python3 imports IPython and each of more.
func NeedIPython(t testing.TB, more ...string) {
	t.Helper()
	mods := strings.Join(append([]string{"IPython"}, more...), ", ")
	if out, err := exec.Command("/usr/bin/python3", "-c", "import "+mods).CombinedOutput(); err != nil {
		Missing(t, "needs /usr/bin/python3 with %s (Debian's python3-ipython etc.; make test installs them): %v: %s", mods, err, lastLine(out))
	}
}

// NeedProgram calls Missing unless name is in PATH; pkg is the Debian package with it.
func NeedProgram(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "needs %s (apt-get install %s; make test installs it)", name, pkg)
	}
	return p
}

// NeedRunc calls Missing when this machine cannot run the runc backend with Debian's
// Python stack.
func NeedRunc(t testing.TB) {
	t.Helper()
	NeedRoot(t, "the runc backend creates namespaces and cgroups")
	NeedProgram(t, "runc", "runc")
	NeedIPython(t, "pandas", "matplotlib")
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// Buffer is a bytes.Buffer safe for a process or logger writing while the test reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ImagesEnv names the folder of built images (a state dir's images/) that tests run
// sandboxes on; `make test` builds the default image there.
const ImagesEnv = "CELLBOX_TEST_IMAGES"

// Images returns $CELLBOX_TEST_IMAGES, where `make test` built the default image, and
// calls Missing when it is not set or holds no default image.
func Images(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(ImagesEnv)
	if dir == "" {
		Missing(t, "needs a built default image: set %s to a state dir's images folder after `cellbox image build` (make test does both)", ImagesEnv)
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, "default", "current")); err != nil {
		Missing(t, "needs the default image in %s=%s: run `cellbox image build --state-dir %s` (make test does)", ImagesEnv, dir, filepath.Dir(dir))
	}
	return dir
}

// NeedDocker calls Missing unless a Docker engine answers at DOCKER_HOST or the default
// socket (make test starts one).
func NeedDocker(t testing.TB) {
	t.Helper()
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return // a remote engine: the test's own connection says whether it answers
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		Missing(t, "needs a running Docker engine at %s (apt-get install docker.io, then dockerd; make test starts one): %v", host, err)
		return
	}
	conn.Close()
}

// SetupEnv picks what the end-to-end tests run sandboxes on (see TestSetup).
const SetupEnv = "CELLBOX_TEST_SETUP"

// Setup is what an end-to-end test's server runs sandboxes on.
type Setup struct {
	Name      string // runc, runc-image or docker
	Backend   string // --backend
	RootFS    string // --rootfs
	ImagesDir string // --images-dir: the test machine's built images; "" on the host's root
}

// TestSetup returns the setup of $CELLBOX_TEST_SETUP: runc (the default: runc on the host's
// root filesystem), runc-image (runc on the default image) or docker (the docker backend on
// the default image), after calling Missing for what it needs and this machine lacks.
func TestSetup(t testing.TB) Setup {
	t.Helper()
	switch name := os.Getenv(SetupEnv); name {
	case "", "runc":
		NeedRunc(t)
		return Setup{Name: "runc", Backend: "runc", RootFS: "host"}
	case "runc-image":
		NeedRoot(t, "the runc backend creates namespaces and cgroups")
		NeedProgram(t, "runc", "runc")
		return Setup{Name: name, Backend: "runc", RootFS: "image", ImagesDir: Images(t)}
	case "docker":
		NeedDocker(t)
		return Setup{Name: name, Backend: "docker", RootFS: "host", ImagesDir: Images(t)}
	default:
		t.Fatalf("%s=%q: want runc, runc-image or docker", SetupEnv, name)
		return Setup{}
	}
}

// Flags are the setup's flags of cellbox serve and cellbox mcp.
func (s Setup) Flags() []string {
	f := []string{"--backend", s.Backend, "--rootfs", s.RootFS}
	if s.ImagesDir != "" {
		f = append(f, "--images-dir", s.ImagesDir)
	}
	return f
}

// RemoveStateDir removes a test server's state folder once the server has shut down. It
// leaves the folder, and says so on stderr, while anything is still mounted under it: a
// sandbox's root is a bind of the host's (or an image's) root, and a removal that walked
// into a mount left behind would delete what lies beyond it.
func RemoveStateDir(dir string) {
	if dir == "" {
		return
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real // as the mount table names it
	}
	points, err := mountinfo.Points()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbin: %s kept: cannot read the mounts: %v\n", dir, err)
		return
	}
	for _, p := range points {
		if p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
			fmt.Fprintf(os.Stderr, "testbin: %s kept: %s is still mounted\n", dir, p)
			return
		}
	}
	os.RemoveAll(dir)
}

// Poll calls cond until it returns nil or d has passed, then returns cond's last error
// (wrapped with how long it waited). The one way tests wait for a condition: on a cause they
// can observe, never a fixed sleep. It starts checking at once and backs off to every 100 ms.
func Poll(d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", d, err)
		}
		time.Sleep(wait)
	}
}

// WaitFor is Poll for a test: it fails t, saying what it waited for, when d passes first.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(d, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Eventually is Poll for a condition that is only true or false.
func Eventually(d time.Duration, cond func() bool) bool {
	return Poll(d, func() error {
		if !cond() {
			return errNotYet
		}
		return nil
	}) == nil
}

var errNotYet = errors.New("the condition is still false")

// FreeAddr is a loopback address (127.0.0.1:PORT) with a port nothing listens on now, for
// a server the test starts as another process.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Get fetches url without credentials and returns the status and the body.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

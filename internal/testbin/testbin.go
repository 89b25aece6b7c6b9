// Package testbin builds the cellbox binary once per test process, for tests that need a
// real guest or a real server process. Only tests import it.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	path string
	err  error
	out  []byte
)

// Cellbox returns the path of a freshly built static cellbox binary (CGO_ENABLED=0).
func Cellbox(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, derr := os.MkdirTemp("", "cellbox-testbin-")
		if derr != nil {
			err = derr
			return
		}
		path = filepath.Join(dir, "cellbox")
		cmd := exec.Command("go", "build", "-o", path, "./cmd/cellbox")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err = cmd.CombinedOutput()
	})
	if err != nil {
		t.Fatalf("build cellbox: %v\n%s", err, out)
	}
	return path
}

// NeedRunc skips a test when this machine cannot run the runc backend with Debian's Python
// stack. `make test` runs as root with all of it installed, so in CI nothing is skipped.
func NeedRunc(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for the runc backend (make test runs as root)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("needs runc (make test installs it)")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import IPython, pandas, matplotlib").Run(); err != nil {
		t.Skip("needs Debian's python3-ipython, python3-pandas and python3-matplotlib (make test installs them)")
	}
}

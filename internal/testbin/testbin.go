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

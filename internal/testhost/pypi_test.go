package testhost

import (
	"archive/zip"
	"bytes"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/testbin"
)

// TestPyPI installs a wheel the index serves with pip itself, and imports it.
func TestPyPI(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-m", "pip", "--version").CombinedOutput(); err != nil {
		testbin.Missing(t, "needs pip for %s (apt-get install python3-pip): %v: %s", python, err, out)
	}
	srv := httptest.NewServer(PyPI(
		Wheel{Name: "Cellbox_Test.Pkg", Version: "1.2.3", Module: "cbtest_hello.py", Source: "VALUE = 'from the test index'\n"},
		Wheel{Name: "other", Version: "0.1", Module: "other.py", Source: "X = 1\n"},
	))
	defer srv.Close()
	dir := t.TempDir()
	cmd := exec.Command(python, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
		"--index-url", srv.URL+"/simple/", "--target", dir, "cellbox-test-pkg")
	cmd.Env = append(cmd.Environ(), "PIP_CONFIG_FILE=/dev/null", "PIP_BREAK_SYSTEM_PACKAGES=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	out, err := exec.Command(python, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import cbtest_hello; print(cbtest_hello.VALUE)", dir).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "from the test index" {
		t.Fatalf("import the installed module: %v: %s", err, out)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "Cellbox_Test_Pkg-1.2.3.dist-info", "RECORD")); len(m) != 1 {
		t.Errorf("pip left no dist-info RECORD in %s", dir)
	}
}

func TestWheelBuild(t *testing.T) {
	w := Wheel{Name: "a-b.c", Version: "2", Module: "ab.py", Source: "x = 1\n"}
	name, data := w.Build()
	if name != "a_b_c-2-py3-none-any.whl" {
		t.Errorf("file name %q", name)
	}
	if _, again := w.Build(); !bytes.Equal(data, again) {
		t.Error("two builds of one Wheel differ")
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	want := "ab.py a_b_c-2.dist-info/METADATA a_b_c-2.dist-info/WHEEL a_b_c-2.dist-info/RECORD"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("files %q, want %q", got, want)
	}
}

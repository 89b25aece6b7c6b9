package main

// cellbox run and repl as a user runs them: the built binary as a subprocess, with an
// embedded server on the runc backend (or --server against one in this process).

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testbin"
)

var stateDir string // shared by the tests' embedded servers: each takes its own slot

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cellbox-cli-")
	if err != nil {
		panic(err)
	}
	stateDir = dir
	code := m.Run()
	testbin.RemoveStateDir(dir)
	os.Exit(code)
}

// needRunc skips when this machine cannot run the runc backend. `make test` runs as root
// with runc and IPython installed, so in CI nothing is skipped.
func needRunc(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts sandboxes; not in -short mode")
	}
	testbin.NeedRunc(t)
}

type ran struct {
	code           int
	stdout, stderr string
	dir            string // the working folder: ./cellbox-out is under it
}

// cellbox runs the binary in a fresh working folder with stdin and waits for it.
func cellbox(t *testing.T, stdin string, args ...string) ran {
	t.Helper()
	needRunc(t)
	dir := t.TempDir()
	cmd := exec.Command(testbin.Cellbox(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CELLBOX_STATE_DIR="+stateDir)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := ran{stdout: stdout.String(), stderr: stderr.String(), dir: dir}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r ran) want(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
}

func TestRunPrint(t *testing.T) {
	r := cellbox(t, "", "run", "-c", "print(1+1)")
	r.want(t, exitOK)
	if r.stdout != "2\n" || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "cellbox-out")); !os.IsNotExist(err) {
		t.Errorf("out folder made with nothing to save: %v", err)
	}
}

func TestRunPlotAndFiles(t *testing.T) {
	code := "import matplotlib.pyplot as plt, os\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()\n" +
		"os.makedirs('sub dir', exist_ok=True)\nopen('sub dir/made.csv', 'w').write('a,b\\n1,2\\n')\n'done'"
	r := cellbox(t, "", "run", "--out", "plots", "-c", code)
	r.want(t, exitOK)
	if r.stdout != "'done'\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	png, err := os.ReadFile(filepath.Join(r.dir, "plots", "cell-1-out-1.png"))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("plot not saved as PNG: %v\nstderr: %s", err, r.stderr)
	}
	csv, err := os.ReadFile(filepath.Join(r.dir, "plots", "sub dir", "made.csv"))
	if err != nil || string(csv) != "a,b\n1,2\n" {
		t.Errorf("file not downloaded: %q, %v", csv, err)
	}
	for _, p := range []string{"plots/cell-1-out-1.png", "plots/sub dir/made.csv"} {
		if !strings.Contains(r.stderr, "saved "+filepath.FromSlash(p)) {
			t.Errorf("stderr does not name %s: %s", p, r.stderr)
		}
	}
}

func TestRunUploadCSV(t *testing.T) {
	data := trafficData(t)
	r := cellbox(t, "", "run", "--file", data, "-c",
		"import pandas as pd\ndf = pd.read_csv('/mnt/data/traffic_accidents.csv')\nprint(len(df), df.columns[0])")
	r.want(t, exitOK)
	if r.stdout != "8000 accidents\n" {
		t.Errorf("stdout %q, stderr %s", r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "saved") { // the upload itself is not an artifact
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestRunFailures(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		code  int
		inErr string
	}{
		{"exception", []string{"-c", "1/0"}, exitError, "ZeroDivisionError"},
		{"timeout", []string{"--timeout", "1s", "-c", "import time; time.sleep(30)"}, exitTimeout, "cellbox: timeout:"},
		{"no code", nil, exitUsage, "give the code"},
		{"code twice", []string{"-c", "1", "x.py"}, exitUsage, "not both"},
		{"bad flag", []string{"--nope"}, exitUsage, "not defined"},
		{"missing upload", []string{"--file", "/nonexistent.csv", "-c", "1"}, exitService, "nonexistent.csv"},
		{"unreachable server", []string{"--server", "http://127.0.0.1:1", "-c", "1"}, exitService, "connection refused"},
		{"image on the host's root", []string{"--image", "py", "-c", "1"}, exitService, `image "py": this server runs sandboxes on the host's root filesystem`},
		{"bad image name", []string{"--rootfs", "image", "--image", "Py!", "-c", "1"}, exitService, `--image: image name "Py!"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cellbox(t, "", append([]string{"run"}, tt.args...)...)
			r.want(t, tt.code)
			if !strings.Contains(r.stderr, tt.inErr) {
				t.Errorf("stderr lacks %q: %s", tt.inErr, r.stderr)
			}
		})
	}
}

// TestRunServer runs against a server in this test process: code from a file and from stdin.
func TestRunServer(t *testing.T) {
	needRunc(t)
	cfg := config.Default()
	cfg.Addr = "127.0.0.1:0"
	cfg.StateDir = t.TempDir()
	cfg.EndSessionsOnExit = true // nothing outlives the test
	cfg.PoolSize, cfg.PoolMax = 1, 0
	cfg.LogLevel = "warn"
	s, err := server.Start(t.Context(), cfg, server.Options{GuestBinary: testbin.Cellbox(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.Shutdown(ctx)
	}()
	script := filepath.Join(t.TempDir(), "script.py")
	os.WriteFile(script, []byte("open('out.txt', 'w').write('x')\nprint('from file')"), 0o644)
	r := cellbox(t, "", "run", "--server", s.URL, script, "--out", "o")
	r.want(t, exitOK)
	if r.stdout != "from file\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(r.dir, "o", "out.txt")); string(b) != "x" {
		t.Errorf("out.txt %q; stderr %s", b, r.stderr)
	}
	r = cellbox(t, "print('from stdin')", "run", "--server", s.URL, "-")
	r.want(t, exitOK)
	if r.stdout != "from stdin\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	if n, _ := s.Manager.Stats(); n != 0 {
		t.Errorf("%d sessions left on the server", n)
	}
}

// TestRunInterrupt sends Ctrl-C (SIGINT) to a running cell: the cell is interrupted, what
// it wrote is saved, and nothing is left running.
func TestRunInterrupt(t *testing.T) {
	needRunc(t)
	state := t.TempDir()
	cmd := exec.Command(testbin.Cellbox(t), "run", "--state-dir", state, "-c",
		"import time\nopen('before.txt', 'w').write('x')\nprint('started', flush=True)\ntime.sleep(60)")
	cmd.Dir = t.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "started\n" {
		cmd.Process.Kill()
		t.Fatalf("first line %q", line)
	}
	cmd.Process.Signal(syscall.SIGINT)
	go io.Copy(io.Discard, out)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitInterrupted {
		t.Fatalf("exit: %v, want code %d; stderr: %s", err, exitInterrupted, stderr.String())
	}
	if !strings.Contains(stderr.String(), "KeyboardInterrupt") || !strings.Contains(stderr.String(), "cellbox: interrupted") {
		t.Errorf("stderr: %s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(cmd.Dir, "cellbox-out", "before.txt")); err != nil {
		t.Errorf("file not saved after the interrupt: %v", err)
	}
	// Nothing left running: the runc backend's containers live under its state folder.
	roots, _ := filepath.Glob(filepath.Join(state, "embedded", "*", "runc", "runtime"))
	for _, root := range roots {
		out, _ := exec.Command("runc", "--root", root, "list", "-q").Output()
		if s := strings.TrimSpace(string(out)); s != "" {
			t.Errorf("sandboxes left running: %s", s)
		}
	}
}

// TestRunConcurrent runs a second embedded server on the same state folder while the first
// one's cell runs: a server cleans up its state folder's sandboxes when it starts, so each
// must have a folder of its own.
func TestRunConcurrent(t *testing.T) {
	needRunc(t)
	first := exec.Command(testbin.Cellbox(t), "run", "-c", "import time\nprint('started', flush=True)\ntime.sleep(2)\nprint('alive')")
	first.Dir = t.TempDir()
	first.Env = append(os.Environ(), "CELLBOX_STATE_DIR="+stateDir)
	var stderr bytes.Buffer
	first.Stderr = &stderr
	out, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(out)
	if line, _ := br.ReadString('\n'); line != "started\n" {
		first.Process.Kill()
		t.Fatalf("first run: %q; stderr %s", line, stderr.String())
	}
	cellbox(t, "", "run", "-c", "print(2)").want(t, exitOK)
	rest, _ := io.ReadAll(br)
	if err := first.Wait(); err != nil || string(rest) != "alive\n" {
		t.Fatalf("first run, after a second one started: %v, stdout %q, stderr %s", err, rest, stderr.String())
	}
}

func TestRepl(t *testing.T) {
	in := "x = 40\n" +
		"for i in range(3):\n    x += i\n\n" + // a block ends at an empty line
		"x -= 1\nprint(x)\n" +
		"1/0\n" +
		"import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()\n" +
		"y = [1,\n 2]\ny"
	r := cellbox(t, in, "repl")
	r.want(t, exitOK)
	if r.stdout != "42\n[1, 2]\n" {
		t.Errorf("stdout %q; stderr %s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "ZeroDivisionError") {
		t.Errorf("stderr lacks the traceback: %s", r.stderr)
	}
	matches, _ := filepath.Glob(filepath.Join(r.dir, "cellbox-out", "cell-*-out-1.png"))
	if len(matches) != 1 {
		t.Errorf("plot files %v; stderr %s", matches, r.stderr)
	}
}

// trafficData is the path of the traffic-accidents data set the examples use.
func trafficData(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "examples", "data", "traffic_accidents.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/sandboxtest"
	"github.com/cellbox/cellbox/internal/testbin"
)

func TestConformance(t *testing.T) {
	testbin.NeedIPython(t)
	level := slog.LevelInfo
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	b, err := New(Config{GuestBinary: testbin.Cellbox(t),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))})
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Run(t, b)
}

func TestCreateRefusesImage(t *testing.T) {
	b, err := New(Config{}) // refused before any guest starts
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Create(context.Background(), sandbox.Spec{ID: "img", Workspace: t.TempDir(), Image: "default"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "has no images") {
		t.Errorf("create on an image: %v, want invalid argument saying there are no images", err)
	}
	if b.live.Has("img") {
		t.Error("the sandbox is live after a refused create")
	}
}

func TestCleanupKillsOrphans(t *testing.T) {
	if runtime.GOOS != "linux" {
		testbin.Missing(t, "finding leftovers needs /proc (Linux)")
	}
	b, err := New(Config{GuestBinary: testbin.Cellbox(t)})
	if err != nil {
		t.Fatal(err)
	}
	// A process of a server that is gone (no such pid) and one of this server.
	orphan := exec.Command("sleep", "1000.6161")
	orphan.Env = []string{markerEnv + "=" + marker(1<<22+12345, "gone")}
	mine := exec.Command("sleep", "1000.6262")
	mine.Env = []string{markerEnv + "=" + marker(os.Getpid(), "live")}
	// And their temporary folders.
	goneTmp, mineTmp := tmpDir(1<<22+12345, "gone"), tmpDir(os.Getpid(), "live")
	for _, d := range []string{goneTmp, mineTmp} {
		if err := os.MkdirAll(filepath.Join(d, "ipython"), 0o700); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(d)
	}
	for _, c := range []*exec.Cmd{orphan, mine} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer c.Process.Kill()
	}
	if err := b.Cleanup(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- orphan.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("the orphan survived Cleanup")
	}
	if err := mine.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("Cleanup killed a process of this server: %v", err)
	}
	if _, err := os.Stat(goneTmp); !os.IsNotExist(err) {
		t.Errorf("the temporary folder of a server that is gone: %v", err)
	}
	if _, err := os.Stat(mineTmp); err != nil {
		t.Errorf("Cleanup removed a temporary folder of this server: %v", err)
	}
}

// A guest's temporary folder is the sandbox's own and goes with it: the guest is killed
// and cannot remove what its kernel left there.
func TestTemporaryFolderGoesWithTheSandbox(t *testing.T) {
	if runtime.GOOS != "linux" {
		testbin.Missing(t, "reading a process's environment needs /proc (Linux)")
	}
	b, err := New(Config{GuestBinary: testbin.Cellbox(t)})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Create(context.Background(), sandbox.Spec{ID: "tmpdir", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tmp := tmpDir(os.Getpid(), "tmpdir")
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", sb.(*Sandbox).cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(environ), "\x00"), "TMPDIR="+tmp) {
		t.Errorf("the guest's environment has no TMPDIR=%s: %q", tmp, environ)
	}
	if _, err := b.Create(context.Background(), sandbox.Spec{ID: "tmpdir", Workspace: t.TempDir()}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a second sandbox of the same id: %v, want failed precondition", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "left-by-user-code"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	sb.Stop(context.Background())
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the sandbox's temporary folder after Stop: %v", err)
	}
}

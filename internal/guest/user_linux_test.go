package guest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/testbin"
)

// TestUserSplit runs user code under a uid of its own: the kernel and commands run as the
// user, and the files the guest creates for it in the workspace belong to it.
func TestUserSplit(t *testing.T) {
	testbin.NeedRoot(t, "switching user code to another uid")
	needIPython(t)
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o711) // the user passes through to its workspace
	os.Chmod(base, 0o711)
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(ws, 1000, 1000)
	g := startGuest(t, Options{Workspace: ws, UserUID: 1000, UserGID: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := g.Configure(ctx, testConfig()); err != nil {
		t.Fatalf("configure: %v", err)
	}
	if got := text(g.exec(t, "import os\nprint(os.getuid(), os.getgid(), os.getgroups(), end='')", 0), "stdout"); got != "1000 1000 []" {
		t.Errorf("the kernel runs as %q, want uid and gid 1000 without other groups", got)
	}
	r, err := g.Command(ctx, api.CommandRequest{Cmd: []string{"id", "-u"}, TimeoutS: 10})
	if err != nil || strings.TrimSpace(r.Stdout) != "1000" {
		t.Errorf("a command runs as %+v, %v; want uid 1000", r, err)
	}
	if _, err := g.PutFile(ctx, "in/deep/a.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"in", "in/deep", "in/deep/a.txt"} {
		fi, err := os.Lstat(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("%s belongs to %d:%d, want the user's 1000:1000", p, st.Uid, st.Gid)
		}
	}
	// The user owns what the guest made for it: it can write into it and replace it.
	code := "open('in/deep/a.txt', 'a').write('y')\nopen('in/deep/b.txt', 'w').write('z')\nprint(open('in/deep/a.txt').read(), end='')"
	if got := text(g.exec(t, code, 0), "stdout"); got != "xy" {
		t.Errorf("user code appending to an uploaded file: %q", got)
	}
	// The kernel's private folders (IPython, matplotlib) are the user's too.
	if got := text(g.exec(t, "import os\nprint(os.access(os.environ['MPLCONFIGDIR'], os.W_OK), os.access(os.environ['IPYTHONDIR'], os.W_OK), end='')", 0), "stdout"); got != "True True" {
		t.Errorf("kernel folders writable: %q", got)
	}
}

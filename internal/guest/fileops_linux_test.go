package guest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

// tree lists what is under dir, as "path:kind" (kind d, f or l->target), sorted.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out = append(out, rel+":l->"+target)
		case info.IsDir():
			out = append(out, rel+":d")
		default:
			out = append(out, rel+":f")
		}
		return nil
	})
	sort.Strings(out)
	return strings.Join(out, " ")
}

func TestFileOps(t *testing.T) {
	t.Parallel()
	g := startGuest(t, Options{})
	ctx := context.Background()
	ws := g.dir
	os.WriteFile(filepath.Join(ws, "f.txt"), []byte("hello"), 0o640)

	// make_dir, with parents, says whether it made the folder.
	e, err := g.MakeDir(ctx, "a/b/c")
	if err != nil || !e.Created || e.Type != "dir" || e.Path != "/mnt/data/a/b/c" || e.Name != "c" || e.Mode != 0o755 {
		t.Errorf("make_dir a/b/c: %+v, %v", e, err)
	}
	if e, err := g.MakeDir(ctx, "/mnt/data/a/b/c/"); err != nil || e.Created || e.Type != "dir" {
		t.Errorf("make_dir again: %+v, %v", e, err)
	}
	if e, err := g.MakeDir(ctx, "."); err != nil || e.Created || e.Path != "/mnt/data" {
		t.Errorf("make_dir of the workspace: %+v, %v", e, err)
	}

	// stat: a file, a folder, a link (not followed), the workspace.
	if e, err := g.Stat(ctx, "f.txt"); err != nil || e.Type != "file" || e.Size != 5 || e.Mode != 0o640 || e.Path != "/mnt/data/f.txt" || e.ModTime.IsZero() {
		t.Errorf("stat f.txt: %+v, %v", e, err)
	}
	os.Symlink("f.txt", filepath.Join(ws, "link"))
	if e, err := g.Stat(ctx, "link"); err != nil || e.Type != "symlink" || e.Target != "f.txt" || e.Name != "link" {
		t.Errorf("stat link: %+v, %v", e, err)
	}
	if e, err := g.Stat(ctx, ""); err != nil || e.Type != "dir" || e.Path != "/mnt/data" {
		t.Errorf("stat the workspace: %+v, %v", e, err)
	}

	// move: a file to a folder that is made for it, a folder, a link itself.
	if e, err := g.Move(ctx, "f.txt", "x/y/g.txt"); err != nil || e.Type != "file" || e.Path != "/mnt/data/x/y/g.txt" || e.Size != 5 {
		t.Errorf("move f.txt: %+v, %v", e, err)
	}
	if e, err := g.Move(ctx, "a", "x/a2"); err != nil || e.Type != "dir" {
		t.Errorf("move a folder: %+v, %v", e, err)
	}
	if e, err := g.Move(ctx, "link", "x/link2"); err != nil || e.Type != "symlink" || e.Target != "f.txt" {
		t.Errorf("move a link: %+v, %v", e, err)
	}
	// A file replaces a file; a folder replaces an empty folder.
	os.WriteFile(filepath.Join(ws, "new.txt"), []byte("new"), 0o644)
	if _, err := g.Move(ctx, "new.txt", "x/y/g.txt"); err != nil {
		t.Errorf("move onto a file: %v", err)
	}
	os.Mkdir(filepath.Join(ws, "empty"), 0o755)
	if _, err := g.Move(ctx, "x/a2/b", "empty"); err != nil {
		t.Errorf("move onto an empty folder: %v", err)
	}
	if got, want := tree(t, ws), "empty/c:d empty:d x/a2:d x/link2:l->f.txt x/y/g.txt:f x/y:d x:d"; got != want {
		t.Errorf("after the moves:\n%s\nwant\n%s", got, want)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "x/y/g.txt")); string(b) != "new" {
		t.Errorf("replaced file holds %q", b)
	}

	errs := []struct {
		name string
		do   func() error
		want error
	}{
		{"make_dir on a file", func() error { _, err := g.MakeDir(ctx, "x/y/g.txt"); return err }, errdefs.ErrFailedPrecondition},
		{"make_dir below a file", func() error { _, err := g.MakeDir(ctx, "x/y/g.txt/z"); return err }, errdefs.ErrFailedPrecondition},
		{"make_dir a long name", func() error { _, err := g.MakeDir(ctx, strings.Repeat("n", 300)); return err }, errdefs.ErrInvalidArgument},
		{"stat missing", func() error { _, err := g.Stat(ctx, "nope"); return err }, errdefs.ErrNotFound},
		{"stat below a file", func() error { _, err := g.Stat(ctx, "x/y/g.txt/z"); return err }, errdefs.ErrNotFound},
		{"move missing", func() error { _, err := g.Move(ctx, "nope", "z"); return err }, errdefs.ErrNotFound},
		{"move the workspace", func() error { _, err := g.Move(ctx, "/mnt/data", "z"); return err }, errdefs.ErrInvalidArgument},
		{"move onto the workspace", func() error { _, err := g.Move(ctx, "x", "."); return err }, errdefs.ErrInvalidArgument},
		{"move into itself", func() error { _, err := g.Move(ctx, "x", "x/y/inside"); return err }, errdefs.ErrInvalidArgument},
		{"move onto a non-empty folder", func() error { _, err := g.Move(ctx, "empty", "x"); return err }, errdefs.ErrFailedPrecondition},
		{"move a folder onto a file", func() error { _, err := g.Move(ctx, "empty", "x/y/g.txt"); return err }, errdefs.ErrFailedPrecondition},
		{"move a file onto a folder", func() error { _, err := g.Move(ctx, "x/y/g.txt", "empty"); return err }, errdefs.ErrFailedPrecondition},
		{"move to a long name", func() error { _, err := g.Move(ctx, "x/y/g.txt", strings.Repeat("n", 300)); return err }, errdefs.ErrInvalidArgument},
		{"move to below a file", func() error { _, err := g.Move(ctx, "empty", "x/y/g.txt/z"); return err }, errdefs.ErrNotFound},
		{"remove missing", func() error { return g.Remove(ctx, "nope") }, errdefs.ErrNotFound},
		{"remove the workspace", func() error { return g.Remove(ctx, "/mnt/data/") }, errdefs.ErrInvalidArgument},
		{"remove with NUL", func() error { return g.Remove(ctx, "x\x00") }, errdefs.ErrInvalidArgument},
	}
	for _, e := range errs {
		if err := e.do(); !errors.Is(err, e.want) {
			t.Errorf("%s: %v, want %v", e.name, err, e.want)
		} else if strings.Contains(err.Error(), ws) {
			t.Errorf("%s: message shows a host path: %v", e.name, err)
		}
	}

	// remove: a folder, then a whole tree with a fifo, a deep folder and a link in it.
	unix.Mkfifo(filepath.Join(ws, "x/y/fifo"), 0o600)
	os.MkdirAll(filepath.Join(ws, "x/deep/er/and/deeper"), 0o755)
	os.WriteFile(filepath.Join(ws, "x/deep/er/f"), nil, 0o400)
	if err := g.Remove(ctx, "empty/c"); err != nil {
		t.Errorf("remove a folder: %v", err)
	}
	if err := g.Remove(ctx, "x"); err != nil {
		t.Errorf("remove a tree: %v", err)
	}
	if got := tree(t, ws); got != "empty:d" {
		t.Errorf("after the removes: %s", got)
	}
}

// TestMakeDirOwner: the folders make_dir and move make belong to the sandbox's user.
func TestMakeDirOwner(t *testing.T) {
	testbin.NeedRoot(t, "giving folders to another uid")
	t.Parallel()
	ws := t.TempDir()
	g := startGuest(t, Options{Workspace: ws, UserUID: 1000, UserGID: 1000})
	ctx := context.Background()
	if _, err := g.MakeDir(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "f"), nil, 0o644)
	if _, err := g.Move(ctx, "f", "c/d/f"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "c", "c/d"} {
		fi, err := os.Lstat(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("%s belongs to %d:%d, want the user's 1000:1000", p, st.Uid, st.Gid)
		}
	}
}

// TestFileOpsAttacks: no file op reaches outside the workspace through a symbolic link or
// "..", as a source, a destination or a folder on the way.
func TestFileOpsAttacks(t *testing.T) {
	t.Parallel()
	ws, outside := attackWorkspace(t)
	g := startGuest(t, Options{Workspace: ws})
	ctx := context.Background()
	before := tree(t, outside)
	bad := []string{
		"../outside", "dir/../../outside/x", "/etc", "/mnt/data/../etc",
		"root/tmp", "out/secret", "out/new", "up/secret", "dir/upup/x", "abs-inside/ok.txt",
		"passwd/x", "loop/x", "a\x00b", strings.Repeat("a/", 3000),
	}
	// Both resolvers: openat2, and the component walk used where it is missing.
	for _, fallback := range []bool{false, true} {
		serverOf(t, g).root.noOpenat2.Store(fallback)
		for _, p := range bad {
			refuseAll(t, g, ws, p)
		}
	}
	serverOf(t, g).root.noOpenat2.Store(false)
	// A link itself may be described, moved and removed: what it points to is untouched.
	if e, err := g.Stat(ctx, "out"); err != nil || e.Type != "symlink" || e.Target != outside {
		t.Errorf("stat out: %+v, %v", e, err)
	}
	if _, err := g.Move(ctx, "root", "dir/root2"); err != nil {
		t.Errorf("move a link to /: %v", err)
	}
	for _, p := range []string{"out", "dir/root2", "passwd"} {
		if err := g.Remove(ctx, p); err != nil {
			t.Errorf("remove link %s: %v", p, err)
		}
	}
	// A tree holding links to / and to outside goes, and only the tree.
	os.MkdirAll(filepath.Join(ws, "tree/sub"), 0o755)
	os.Symlink("/", filepath.Join(ws, "tree/root"))
	os.Symlink(outside, filepath.Join(ws, "tree/sub/out"))
	os.Symlink("../../up", filepath.Join(ws, "tree/sub/up"))
	if err := g.Remove(ctx, "tree"); err != nil {
		t.Errorf("remove tree: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "tree")); !os.IsNotExist(err) {
		t.Errorf("tree still there: %v", err)
	}
	if got := tree(t, outside); got != before {
		t.Errorf("outside changed: %s, was %s", got, before)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("/etc/passwd: %v", err)
	}
}

// refuseAll checks that every file op refuses path p (or a path below it), as the source,
// the destination or a folder on the way.
func refuseAll(t *testing.T, g *guestT, ws, p string) {
	t.Helper()
	ctx := context.Background()
	short := p[:min(len(p), 30)]
	refused := func(op string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s %q: not refused", op, short)
		} else if strings.Contains(err.Error(), ws) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s %q: message shows a host path: %v", op, short, err)
		}
	}
	_, err := g.MakeDir(ctx, p)
	refused("make_dir", err)
	_, err = g.MakeDir(ctx, p+"/sub")
	refused("make_dir below", err)
	_, err = g.Stat(ctx, p)
	refused("stat", err)
	_, err = g.Move(ctx, p, "stolen")
	refused("move from", err)
	os.WriteFile(filepath.Join(ws, "bait"), []byte("bait"), 0o644)
	_, err = g.Move(ctx, "bait", p)
	refused("move to", err)
	_, err = g.Move(ctx, "bait", p+"/sub/bait")
	refused("move to below", err)
	refused("remove", g.Remove(ctx, p))
}

// TestRemoveSwap swaps a folder for a symbolic link to outside at the two moments a
// remove could be fooled: after it found a folder and before it opened it, and after it
// opened it and before it removes it. Neither deletes anything outside.
func TestRemoveSwap(t *testing.T) {
	ws, outside := attackWorkspace(t)
	g := startGuest(t, Options{Workspace: ws})
	ctx := context.Background()
	before := tree(t, outside)
	defer func() { testHookRemove = nil }()
	for _, opened := range []bool{false, true} {
		os.MkdirAll(filepath.Join(ws, "t/victim/inner"), 0o755)
		os.WriteFile(filepath.Join(ws, "t/victim/inner/f"), nil, 0o644)
		swapped := false
		testHookRemove = func(name string, at bool) {
			if name != "victim" || at != opened || swapped {
				return
			}
			swapped = true
			v := filepath.Join(ws, "t/victim")
			if err := os.Rename(v, filepath.Join(ws, "moved")); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(outside, v); err != nil {
				t.Error(err)
			}
		}
		err := g.Remove(ctx, "t")
		if !swapped {
			t.Fatalf("opened=%v: the hook never swapped", opened)
		}
		if got := tree(t, outside); got != before {
			t.Fatalf("opened=%v: outside changed: %s, was %s", opened, got, before)
		}
		// Before the open, the link itself goes and so does t; after it, the folder's
		// contents go (through the descriptor) and the link stays.
		if !opened && err != nil {
			t.Errorf("swap before open: %v", err)
		}
		if opened {
			if err == nil {
				t.Errorf("swap after open: removed")
			}
			if got := tree(t, filepath.Join(ws, "moved")); got != "" {
				t.Errorf("swap after open: the folder opened still holds %s", got)
			}
		}
		os.RemoveAll(filepath.Join(ws, "t"))
		os.RemoveAll(filepath.Join(ws, "moved"))
	}
}

// TestFileOpsSwapRace swaps a folder for a link out while make_dir, move and remove work
// under it: none may create, move or delete anything outside.
func TestFileOpsSwapRace(t *testing.T) {
	t.Parallel()
	ws, outside := attackWorkspace(t)
	g := startGuest(t, Options{Workspace: ws})
	ctx := context.Background()
	os.WriteFile(filepath.Join(outside, "ok.txt"), []byte("SECRET"), 0o644)
	before := tree(t, outside)
	stop := swapDirForLink(ws, outside)
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		g.MakeDir(ctx, "dir/made/deep")
		g.Move(ctx, "dir/ok.txt", "dir/moved.txt")
		g.Move(ctx, "dir/moved.txt", "dir/ok.txt")
		g.Remove(ctx, "dir/made")
		g.Stat(ctx, "dir/ok.txt")
	}
	stop()
	if got := tree(t, outside); got != before {
		t.Errorf("outside changed: %s, was %s", got, before)
	}
}

// TestCommandDir: a command's absolute folder, entered as the user.
func TestCommandDir(t *testing.T) {
	t.Parallel()
	g := startGuest(t, Options{})
	ctx := context.Background()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o644)
	r, err := g.CommandRun(ctx, "dir-1", dir, api.CommandRequest{Cmd: []string{"pwd"}, TimeoutS: 10}, nil)
	if err != nil || r.Status != api.StatusOK || strings.TrimSpace(r.Stdout) != dir {
		t.Errorf("pwd in %s: %+v, %v", dir, r, err)
	}
	// A relative program is found from the folder.
	os.WriteFile(filepath.Join(dir, "hi.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	if r, err := g.CommandRun(ctx, "dir-2", dir, api.CommandRequest{Cmd: []string{"./hi.sh"}, TimeoutS: 10}, nil); err != nil || r.Stdout != "hi\n" {
		t.Errorf("./hi.sh in %s: %+v, %v", dir, r, err)
	}
	for _, c := range []struct {
		dir, cwd string
		want     error
	}{
		{filepath.Join(dir, "nope"), "", errdefs.ErrNotFound},
		{filepath.Join(dir, "file"), "", errdefs.ErrInvalidArgument},
		{"relative", "", errdefs.ErrInvalidArgument},
		{"/tmp\x00", "", errdefs.ErrInvalidArgument},
		{"/tmp", "sub", errdefs.ErrInvalidArgument},
	} {
		_, err := g.CommandRun(ctx, "dir-x", c.dir, api.CommandRequest{Cmd: []string{"true"}, Cwd: c.cwd, TimeoutS: 10}, nil)
		if !errors.Is(err, c.want) {
			t.Errorf("dir %q cwd %q: %v, want %v", c.dir, c.cwd, err, c.want)
		}
	}
	// A missing program in a folder that exists is still a missing program.
	if r, err := g.CommandRun(ctx, "dir-3", dir, api.CommandRequest{Cmd: []string{"no-such-program"}, TimeoutS: 10}, nil); err != nil || !strings.Contains(r.Message, "not found") {
		t.Errorf("missing program: %+v, %v", r, err)
	}
}

// TestCommandDirAsUser: the user enters the folder with its own permissions.
func TestCommandDirAsUser(t *testing.T) {
	testbin.NeedRoot(t, "switching user code to another uid")
	t.Parallel()
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o711)
	os.Chmod(base, 0o711)
	ws := filepath.Join(base, "ws")
	os.Mkdir(ws, 0o755)
	closed := filepath.Join(base, "closed")
	os.Mkdir(closed, 0o700) // root's: the user may not enter it
	g := startGuest(t, Options{Workspace: ws, UserUID: 1000, UserGID: 1000})
	ctx := context.Background()
	r, err := g.CommandRun(ctx, "u-1", closed, api.CommandRequest{Cmd: []string{"true"}, TimeoutS: 10}, nil)
	if err != nil || r.Status != api.StatusError || !strings.Contains(r.Message, "permission denied") || strings.Contains(r.Message, "executable?)") {
		t.Errorf("a folder the user may not enter: %+v, %v", r, err)
	}
	if r, err := g.CommandRun(ctx, "u-2", "/tmp", api.CommandRequest{Cmd: []string{"sh", "-c", "pwd; id -u"}, TimeoutS: 10}, nil); err != nil || r.Stdout != "/tmp\n1000\n" {
		t.Errorf("/tmp as the user: %+v, %v", r, err)
	}
}

// FuzzFileOps runs make_dir, move, stat and remove on fuzzed paths in a workspace with links
// that lead out: nothing outside it is ever made, moved or removed.
func FuzzFileOps(f *testing.F) {
	for _, s := range [][2]string{{"dir/ok.txt", "dir/new"}, {"out/x", "y"}, {"root", "root/tmp/x"},
		{"up/secret", "a"}, {"dir/upup", "dir/upup/x"}, {"a/b", "out/b"}, {"dir", "up/dir"}, {"../x", "/mnt/data/x"},
		{"dir/upup/secret", "dir"}, {"up/sub", "dir/upup"}} {
		f.Add(s[0], s[1])
	}
	base := f.TempDir()
	// Both resolvers: openat2, and the component walk of kernels without it.
	type fuzzWS struct {
		ws, outside string
		s           *server
	}
	var wss []fuzzWS
	for i, noOpenat2 := range []bool{false, true} {
		ws, outside := filepath.Join(base, "ws"+strconv.Itoa(i)), filepath.Join(base, "outside"+strconv.Itoa(i))
		os.MkdirAll(filepath.Join(outside, "sub"), 0o755)
		os.WriteFile(filepath.Join(outside, "sub", "secret"), []byte("SECRET"), 0o644)
		os.Mkdir(ws, 0o755)
		r, err := openRoot(ws, nil)
		if err != nil {
			f.Fatal(err)
		}
		r.noOpenat2.Store(noOpenat2)
		wss = append(wss, fuzzWS{ws, outside, &server{root: r}})
	}
	ctx := context.Background()
	want := "sub/secret:f sub:d"
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, w := range wss {
			ws, s := w.ws, w.s
			os.MkdirAll(filepath.Join(ws, "dir"), 0o755)
			os.WriteFile(filepath.Join(ws, "dir", "ok.txt"), nil, 0o644)
			os.Symlink("/", filepath.Join(ws, "root"))
			os.Symlink(w.outside, filepath.Join(ws, "out"))
			os.Symlink("../"+filepath.Base(w.outside), filepath.Join(ws, "up"))
			os.Symlink("../../"+filepath.Base(w.outside)+"/sub", filepath.Join(ws, "dir", "upup"))
			s.stat(a)
			s.stat(b)
			s.makeDir(a)
			s.move(a, b)
			s.makeDir(b)
			s.move(b, a)
			s.remove(ctx, b)
			s.remove(ctx, a)
			if got := tree(t, w.outside); got != want {
				t.Fatalf("%q, %q (openat2 %v): outside holds %s, want %s", a, b, !s.root.noOpenat2.Load(), got, want)
			}
			if got, err := os.ReadFile(filepath.Join(w.outside, "sub", "secret")); err != nil || string(got) != "SECRET" {
				t.Fatalf("%q, %q: the secret outside is now %q, %v", a, b, got, err)
			}
		}
	})
}

// TestFileOpsRemoveRefilled: a remove stops once its caller has gone, even in a folder of
// files only. Were it to go on, user code that keeps adding files as fast as the remove
// takes them away would hold it (and a guest goroutine, and a core) for as long as it liked.
// The caller goes once the remove has opened the folder.
func TestFileOpsRemoveRefilled(t *testing.T) {
	ws := t.TempDir()
	r, err := openRoot(ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	s := &server{root: r}
	full := filepath.Join(ws, "full")
	os.Mkdir(full, 0o755)
	for i := range 600 {
		os.WriteFile(filepath.Join(full, "f-"+strconv.Itoa(i)), nil, 0o644)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer func() { testHookRemove = nil }()
	testHookRemove = func(name string, opened bool) {
		if name == "full" && opened {
			cancel()
		}
	}
	m := s.remove(ctx, "full")
	if m.Error == nil || m.Error.Code != api.CodeCanceled {
		t.Errorf("remove of a folder of files after the caller went: %+v, want canceled", m)
	}
	if n, _ := os.ReadDir(full); len(n) != 600 {
		t.Errorf("the remove went on after its caller had gone: %d files left of 600", len(n))
	}
}

// TestCommandDirOracle: when a program fails to start with "not found" in an absolute
// folder (its script's interpreter is missing, say, and a link is swapped meanwhile), the
// folder is judged as the user sees it, never as the guest (root) does: what is inside a
// folder the user may not enter is not told.
func TestCommandDirOracle(t *testing.T) {
	testbin.NeedRoot(t, "switching user code to another uid")
	t.Parallel()
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o711)
	os.Chmod(base, 0o711)
	closed := filepath.Join(base, "closed")
	os.Mkdir(closed, 0o700) // root's: the user may not enter it
	os.WriteFile(filepath.Join(closed, "file"), nil, 0o644)
	user := &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}
	for _, p := range []string{"file", "nope", "."} {
		if e := dirError(filepath.Join(closed, p), user, unix.ENOENT); e != nil {
			t.Errorf("%s in a folder the user may not enter: %+v, want nothing told", p, e)
		}
	}
	// What the user sees is told.
	if e := dirError(filepath.Join(base, "nope"), user, unix.ENOENT); e == nil || e.Code != api.CodeNotFound {
		t.Errorf("a missing folder: %+v", e)
	}
	if e := dirError("/tmp", user, unix.ENOENT); e != nil {
		t.Errorf("a folder the user may enter: %+v", e)
	}
}

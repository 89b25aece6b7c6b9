package guest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

func TestFiles(t *testing.T) {
	t.Parallel()
	g := startGuest(t, Options{})
	ctx := context.Background()

	big := make([]byte, 5<<20+123)
	rand.Read(big)
	fi, err := g.PutFile(ctx, "/mnt/data/a/b/big.bin", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Path != "/mnt/data/a/b/big.bin" || fi.Name != "big.bin" || fi.Size != int64(len(big)) || fi.Type != "file" {
		t.Errorf("put: %+v", fi)
	}
	info, rc, err := g.GetFile(ctx, "a/b/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, rc); !bytes.Equal(got, big) || info.Size != int64(len(big)) {
		t.Errorf("get: %d bytes, info %+v", len(got), info)
	}
	// Replace, and an empty file, and a name with a newline.
	for _, c := range []struct{ path, body string }{{"a/b/big.bin", "small"}, {"empty", ""}, {"new\nline.txt", "nl"}} {
		if _, err := g.PutFile(ctx, c.path, strings.NewReader(c.body)); err != nil {
			t.Fatalf("put %q: %v", c.path, err)
		}
		_, rc, err := g.GetFile(ctx, c.path)
		if err != nil {
			t.Fatalf("get %q: %v", c.path, err)
		}
		if got := string(readAll(t, rc)); got != c.body {
			t.Errorf("get %q = %q, want %q", c.path, got, c.body)
		}
	}
	os.Symlink("a/b/big.bin", filepath.Join(g.dir, "inside-link"))
	os.WriteFile(filepath.Join(g.dir, ".hidden"), []byte("h"), 0o600)
	l, err := g.ListFiles(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range l.Files {
		names = append(names, f.Name+":"+f.Type)
	}
	if l.Path != "/mnt/data" || strings.Join(names, ",") != ".hidden:file,a:dir,empty:file,inside-link:symlink,new\nline.txt:file" {
		t.Errorf("list = %q at %s", names, l.Path)
	}
	if l, err := g.ListFiles(ctx, "a/b"); err != nil || len(l.Files) != 1 || l.Files[0].Path != "/mnt/data/a/b/big.bin" || l.Files[0].Size != 5 {
		t.Errorf("list a/b = %+v, %v", l, err)
	}
	// A symbolic link that stays inside the workspace is followed.
	if _, rc, err := g.GetFile(ctx, "inside-link"); err != nil || string(readAll(t, rc)) != "small" {
		t.Errorf("get inside-link: %v", err)
	}

	errs := []struct {
		name string
		do   func() error
		want error
	}{
		{"get missing", func() error { _, _, err := g.GetFile(ctx, "nope"); return err }, errdefs.ErrNotFound},
		{"get folder", func() error { _, _, err := g.GetFile(ctx, "a"); return err }, errdefs.ErrInvalidArgument},
		{"get below a file", func() error { _, _, err := g.GetFile(ctx, "empty/x"); return err }, errdefs.ErrNotFound},
		{"get fifo", func() error {
			unix.Mkfifo(filepath.Join(g.dir, "fifo"), 0o600)
			_, _, err := g.GetFile(ctx, "fifo")
			return err
		}, errdefs.ErrInvalidArgument},
		{"list missing", func() error { _, err := g.ListFiles(ctx, "nope"); return err }, errdefs.ErrNotFound},
		{"list a file", func() error { _, err := g.ListFiles(ctx, "empty"); return err }, errdefs.ErrInvalidArgument},
		{"put onto a folder", func() error { _, err := g.PutFile(ctx, "a", strings.NewReader("x")); return err }, errdefs.ErrInvalidArgument},
		{"put the workspace", func() error { _, err := g.PutFile(ctx, "/mnt/data", strings.NewReader("x")); return err }, errdefs.ErrInvalidArgument},
		{"put below a file", func() error { _, err := g.PutFile(ctx, "empty/x", strings.NewReader("x")); return err }, errdefs.ErrNotFound},
		{"delete missing", func() error { return g.DeleteFile(ctx, "nope") }, errdefs.ErrNotFound},
		{"delete non-empty folder", func() error { return g.DeleteFile(ctx, "a") }, errdefs.ErrFailedPrecondition},
		{"delete the workspace", func() error { return g.DeleteFile(ctx, "/mnt/data/") }, errdefs.ErrInvalidArgument},
	}
	for _, e := range errs {
		if err := e.do(); !errors.Is(err, e.want) {
			t.Errorf("%s: %v, want %v", e.name, err, e.want)
		} else if strings.Contains(err.Error(), g.dir) {
			t.Errorf("%s: message shows a host path: %v", e.name, err)
		}
	}

	for _, p := range []string{"a/b/big.bin", "a/b", "a", "inside-link", "fifo"} {
		if err := g.DeleteFile(ctx, p); err != nil {
			t.Errorf("delete %s: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(g.dir, "a")); !os.IsNotExist(err) {
		t.Errorf("a still there: %v", err)
	}
}

// failingReader yields n bytes, then fails.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("client went away")
	}
	k := min(len(p), f.n)
	f.n -= k
	return k, nil
}

func TestAbortedUpload(t *testing.T) {
	t.Parallel()
	g := startGuest(t, Options{})
	ctx := context.Background()
	g.PutFile(ctx, "keep.txt", strings.NewReader("old"))
	for _, p := range []string{"new.bin", "keep.txt", "dir/new.bin"} {
		if _, err := g.PutFile(ctx, p, &failingReader{n: 3 << 20}); err == nil {
			t.Fatalf("put %s with a failing body succeeded", p)
		}
	}
	// The guest sees the stream end without the end chunk a moment later.
	testbin.WaitFor(t, 5*time.Second, "only /keep.txt in the workspace after aborted uploads", func() error {
		var found []string
		filepath.Walk(g.dir, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				found = append(found, strings.TrimPrefix(p, g.dir))
			}
			return nil
		})
		if got := strings.Join(found, ","); got != "/keep.txt" {
			return fmt.Errorf("the workspace holds %q", found)
		}
		return nil
	})
	if b, _ := os.ReadFile(filepath.Join(g.dir, "keep.txt")); string(b) != "old" {
		t.Errorf("keep.txt = %q", b)
	}
}

// attackWorkspace builds a workspace with symbolic links that lead out, and a secret outside.
func attackWorkspace(t *testing.T) (ws, outside string) {
	t.Helper()
	base := t.TempDir()
	ws, outside = filepath.Join(base, "ws"), filepath.Join(base, "outside")
	os.Mkdir(ws, 0o755)
	os.Mkdir(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("SECRET"), 0o644)
	os.Mkdir(filepath.Join(ws, "dir"), 0o755)
	os.WriteFile(filepath.Join(ws, "dir", "ok.txt"), []byte("ok"), 0o644)
	for name, target := range map[string]string{
		"passwd":       "/etc/passwd",
		"root":         "/",
		"out":          outside,
		"up":           "../outside",
		"dir/upup":     "../../outside/secret",
		"abs-inside":   filepath.Join(ws, "dir"),
		"loop":         "loop",
		"dangling-out": filepath.Join(outside, "nothing"),
	} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	return ws, outside
}

// swapDirForLink swaps the workspace's folder "dir", over and over, for a link to outside
// and back, as user code racing the guest would, until the returned stop is called; stop
// waits for the swapping to end, with "dir" a folder again.
func swapDirForLink(ws, outside string) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		d := filepath.Join(ws, "dir")
		real, link := filepath.Join(ws, "real"), filepath.Join(ws, "link")
		os.Rename(d, real)
		for !done.Load() {
			os.Symlink(outside, link)
			os.Rename(link, d) // dir is now a link out
			os.Remove(d)
			os.Rename(real, d) // dir is real again
			os.Rename(d, real)
		}
		os.Rename(real, d)
	})
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

func TestPathAttacks(t *testing.T) {
	t.Parallel()
	ws, outside := attackWorkspace(t)
	g := startGuest(t, Options{Workspace: ws})
	ctx := context.Background()
	bad := []struct {
		path string
		want error
	}{
		{"../outside/secret", errdefs.ErrInvalidArgument},
		{"dir/../../outside/secret", errdefs.ErrInvalidArgument},
		{"/etc/passwd", errdefs.ErrInvalidArgument},
		{"/mnt/data/../etc/passwd", errdefs.ErrInvalidArgument},
		{"/mnt/database", errdefs.ErrInvalidArgument},
		{"passwd", errdefs.ErrInvalidArgument},
		{"root/etc/passwd", errdefs.ErrInvalidArgument},
		{"root", errdefs.ErrInvalidArgument},
		{"out/secret", errdefs.ErrInvalidArgument},
		{"out", errdefs.ErrInvalidArgument},
		{"up/secret", errdefs.ErrInvalidArgument},
		{"dir/upup", errdefs.ErrInvalidArgument},
		{"abs-inside/ok.txt", errdefs.ErrInvalidArgument}, // absolute targets are outside by definition
		{"dangling-out", errdefs.ErrInvalidArgument},
		{"loop/x", errdefs.ErrInvalidArgument},
		{"a\x00b", errdefs.ErrInvalidArgument},
		{`dir\..\..\x`, errdefs.ErrInvalidArgument},
		{strings.Repeat("a/", 3000), errdefs.ErrInvalidArgument},
		{strings.Repeat("x", 300), errdefs.ErrInvalidArgument}, // a name over NAME_MAX
	}
	for _, b := range bad {
		short := b.path[:min(len(b.path), 40)]
		t.Run("get "+short, func(t *testing.T) {
			_, rc, err := g.GetFile(ctx, b.path)
			if err == nil {
				t.Errorf("read %q", readAll(t, rc))
			}
			checkRefused(t, err, b.want, ws)
		})
		t.Run("list "+short, func(t *testing.T) {
			_, err := g.ListFiles(ctx, b.path+"/")
			if b.path == "passwd" || b.path == "dangling-out" || b.path == "dir/upup" {
				if err == nil {
					t.Errorf("listed %q", b.path)
				}
				return
			}
			checkRefused(t, err, b.want, ws)
		})
		t.Run("put "+short, func(t *testing.T) {
			_, err := g.PutFile(ctx, b.path+"/new", strings.NewReader("pwned"))
			checkRefused(t, err, b.want, ws)
			if b.path != "loop" { // loop/new: nothing to create anyway
				_, err = g.PutFile(ctx, b.path, strings.NewReader("pwned"))
				checkRefused(t, err, b.want, ws)
			}
		})
		t.Run("cwd "+short, func(t *testing.T) {
			_, err := g.Command(ctx, api.CommandRequest{Cmd: []string{"ls"}, Cwd: b.path, TimeoutS: 5})
			if b.path == "passwd" || b.path == "dangling-out" || b.path == "dir/upup" {
				if err == nil {
					t.Errorf("ran in %q", b.path)
				}
				return
			}
			checkRefused(t, err, b.want, ws)
		})
		t.Run("delete below "+short, func(t *testing.T) {
			err := g.DeleteFile(ctx, b.path+"/x")
			if err == nil {
				t.Errorf("deleted below %q", b.path)
			}
		})
	}
	// Deleting a link removes the link, never what it points to.
	if err := g.DeleteFile(ctx, "passwd"); err != nil {
		t.Errorf("delete the link itself: %v", err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("/etc/passwd: %v", err)
	}
	// Nothing outside changed.
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Errorf("outside holds %v", entries)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "SECRET" {
		t.Errorf("secret = %q", b)
	}
}

func checkRefused(t *testing.T, err error, want error, ws string) {
	t.Helper()
	if err == nil {
		t.Errorf("not refused")
		return
	}
	if !errors.Is(err, want) {
		t.Errorf("error %v, want %v", err, want)
	}
	if strings.Contains(err.Error(), ws) || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("message shows a host path or content: %v", err)
	}
}

// TestSymlinkSwap swaps a folder for a symbolic link that leads out while files are read
// through it: no read may ever see the secret.
func TestSymlinkSwap(t *testing.T) {
	t.Parallel()
	ws, outside := attackWorkspace(t)
	g := startGuest(t, Options{Workspace: ws})
	ctx := context.Background()
	os.WriteFile(filepath.Join(outside, "ok.txt"), []byte("SECRET"), 0o644)
	stop := swapDirForLink(ws, outside)
	deadline := time.Now().Add(1500 * time.Millisecond)
	reads := 0
	for time.Now().Before(deadline) {
		_, rc, err := g.GetFile(ctx, "dir/ok.txt")
		if err == nil {
			if b := readAll(t, rc); string(b) != "ok" {
				t.Fatalf("read %q through a swapped link", b)
			}
			reads++
		}
		r, err := g.Command(ctx, api.CommandRequest{Cmd: []string{"cat", "ok.txt"}, Cwd: "dir", TimeoutS: 5})
		if err == nil && strings.Contains(r.Stdout, "SECRET") {
			t.Fatalf("command ran outside the workspace")
		}
		if _, err := g.PutFile(ctx, "dir/new.txt", strings.NewReader("x")); err == nil {
			os.Remove(filepath.Join(ws, "dir", "new.txt"))
			os.Remove(filepath.Join(ws, "real", "new.txt"))
		}
	}
	stop()
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Errorf("an upload landed outside the workspace")
	}
	t.Logf("%d successful reads during the swap", reads)
}

// TestResolver checks both resolvers, openat2 and the component walk, directly.
func TestResolver(t *testing.T) {
	ws, _ := attackWorkspace(t)
	os.Symlink("dir/ok.txt", filepath.Join(ws, "rel-inside"))
	for _, fallback := range []bool{false, true} {
		r, err := openRoot(ws, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.noOpenat2.Load() && !fallback {
			r.close()
			t.Log("this kernel has no openat2")
			continue
		}
		r.noOpenat2.Store(fallback)
		tests := []struct {
			rel  string
			want error // nil: opens
		}{
			{".", nil},
			{"dir", nil},
			{"dir/ok.txt", nil},
			{"nope", unix.ENOENT},
			{"dir/ok.txt/x", unix.ENOTDIR},
			{"passwd", errEscape},
			{"root/etc", errEscape},
			{"out/secret", errEscape},
			{"up/secret", errEscape},
			{"dir/upup", errEscape},
			{"abs-inside/ok.txt", errEscape},
			{"rel-inside", nil}, // followed by openat2, refused by the walk
		}
		for _, tt := range tests {
			// O_RDONLY, and O_DIRECTORY as folders are listed (which the walk opens apart).
			for _, flags := range []int{unix.O_RDONLY, unix.O_RDONLY | unix.O_DIRECTORY} {
				fd, err := r.open(tt.rel, flags, 0)
				want := tt.want
				if fallback && want == errEscape {
					want = errSymlink
				}
				if fallback && tt.rel == "rel-inside" {
					want = errSymlink
				}
				if flags&unix.O_DIRECTORY != 0 && (tt.rel == "dir/ok.txt" || (tt.rel == "rel-inside" && !fallback)) {
					want = unix.ENOTDIR
				}
				if err == nil {
					unix.Close(fd)
				}
				if !errors.Is(err, want) && !(want == nil && err == nil) {
					t.Errorf("fallback=%v open %q with flags %#x: %v, want %v", fallback, tt.rel, flags, err, want)
				}
			}
		}
		// mkdirAll refuses to create through a link out.
		if _, err := r.mkdirAll("out/new/dir"); err == nil {
			t.Errorf("fallback=%v: mkdirAll through a link out succeeded", fallback)
		}
		fd, err := r.mkdirAll("x/y/z")
		if err != nil {
			t.Errorf("fallback=%v: mkdirAll: %v", fallback, err)
		} else {
			unix.Close(fd)
		}
		os.RemoveAll(filepath.Join(ws, "x"))
		r.close()
	}
}

// FuzzResolve opens fuzzed paths the way the file API does and checks that whatever opens
// is inside the workspace.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"dir/ok.txt", "../x", "/mnt/data/dir", "root/etc/passwd", "up/secret", "dir/upup", ".//dir/./ok.txt", "a\x00", "/mnt/data/../etc"} {
		f.Add(s)
	}
	base := f.TempDir()
	ws := filepath.Join(base, "ws")
	os.Mkdir(ws, 0o755)
	os.Mkdir(filepath.Join(ws, "dir"), 0o755)
	os.WriteFile(filepath.Join(ws, "dir", "ok.txt"), nil, 0o644)
	os.Symlink("/", filepath.Join(ws, "root"))
	os.Symlink("..", filepath.Join(ws, "up"))
	os.Symlink("../..", filepath.Join(ws, "dir", "upup"))
	os.Symlink("ok.txt", filepath.Join(ws, "dir", "in"))
	real, _ := filepath.EvalSymlinks(ws)
	r, err := openRoot(ws, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, perr := cleanPath(p)
		if perr != nil {
			return
		}
		fd, err := r.open(rel, unix.O_PATH, 0)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		got, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			t.Fatal(err)
		}
		if got != real && !strings.HasPrefix(got, real+"/") {
			t.Fatalf("%q opened %q, outside the workspace", p, got)
		}
	})
}

func TestSnapshotCap(t *testing.T) {
	ws := t.TempDir()
	for i := range 30 {
		os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%02d", i)), nil, 0o644)
	}
	r, err := openRoot(ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if s := r.snapshot(); !s.complete || len(s.files) != 30 {
		t.Fatalf("snapshot: complete=%v files=%d", s.complete, len(s.files))
	}
	defer func(n int) { maxSnapshot = n }(maxSnapshot)
	maxSnapshot = 10
	a := r.snapshot()
	os.WriteFile(filepath.Join(ws, "f00"), []byte("changed"), 0o644)
	os.WriteFile(filepath.Join(ws, "zz-new"), nil, 0o644)
	b := r.snapshot()
	if a.complete || len(a.files) != 10 {
		t.Errorf("capped snapshot: complete=%v files=%d", a.complete, len(a.files))
	}
	if got := diff(a, b); len(got) != 1 || got[0].Path != "/mnt/data/f00" {
		t.Errorf("diff = %+v", got)
	}
}

// A snapshot sees the files of folders below the root, not through symbolic links, and a
// folder removed between two snapshots has its files reported deleted.
func TestSnapshotFolders(t *testing.T) {
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(ws, "top.txt"), []byte("1"), 0o644)
	os.WriteFile(filepath.Join(ws, "a", "x.txt"), []byte("22"), 0o644)
	os.WriteFile(filepath.Join(ws, "a", "b", "c.txt"), []byte("333"), 0o644)
	os.Symlink("a", filepath.Join(ws, "link"))
	r, err := openRoot(ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	a := r.snapshot()
	var got []string
	for p, st := range a.files {
		got = append(got, fmt.Sprintf("%s:%d", p, st.size))
	}
	slices.Sort(got)
	if want := []string{"a/b/c.txt:3", "a/x.txt:2", "link:1", "top.txt:1"}; !a.complete || !slices.Equal(got, want) {
		t.Fatalf("snapshot: complete=%v %q, want %q", a.complete, got, want)
	}
	os.RemoveAll(filepath.Join(ws, "a", "b"))
	changes := diff(a, r.snapshot())
	if len(changes) != 1 || changes[0].Path != "/mnt/data/a/b/c.txt" || changes[0].Change != api.ChangeDeleted {
		t.Errorf("after removing a/b: %+v", changes)
	}
}

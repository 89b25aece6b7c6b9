package move

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
)

// A session's folders go through the stream as they are: files with their modes and
// owners, folders, symlinks as symlinks (their targets never read), FIFOs left out.
func TestRoundTrip(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	cp, ws := filepath.Join(src, "cp"), filepath.Join(src, "ws")
	secret := filepath.Join(src, "host-secret")
	mustWrite(t, secret, "host only", 0o600)
	for _, d := range []string{cp + "/images", ws + "/sub/deeper"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, cp+"/cellbox.json", `{"kind":"criu"}`, 0o600)
	mustWrite(t, cp+"/images/pages-1.img", strings.Repeat("p", 70000), 0o600)
	mustWrite(t, ws+"/data.csv", "a,b\n1,2\n", 0o644)
	mustWrite(t, ws+"/sub/deeper/run.sh", "#!/bin/sh\n", 0o755)
	mustWrite(t, ws+"/private", "mine", 0o600)
	if err := os.Chmod(ws+"/sub", os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, ws+"/leak"); err != nil { // what a guest would try
		t.Fatal(err)
	}
	if err := os.Symlink("data.csv", ws+"/sub/rel"); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(ws+"/data.csv", old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(ws+"/data.csv", ws+"/sub/hard"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(ws+"/fifo", 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(ws+"/data.csv", 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	o := &session.Outgoing{ID: "abc", Record: []byte(`{"id":"abc"}`), Checkpoint: cp, Workspace: ws}
	if err := write(&buf, o); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "a,b\n1,2\n"); n != 1 {
		t.Errorf("a file of two hard links went %d times; want once", n)
	}
	if strings.Contains(buf.String(), "host only") {
		t.Fatal("the stream holds the content of a file a workspace symlink points to")
	}
	tr := tar.NewReader(&buf)
	h, err := tr.Next()
	if err != nil || h.Name != recordName {
		t.Fatalf("first entry %+v, %v; want the record", h, err)
	}
	dcp, dws := filepath.Join(dst, "cp"), filepath.Join(dst, "ws")
	os.Mkdir(dcp, 0o700)
	os.Mkdir(dws, 0o755)
	if err := readTrees(tr, dcp, dws, 1<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path, content string
		mode          os.FileMode
	}{
		{"cp/cellbox.json", `{"kind":"criu"}`, 0o600},
		{"cp/images/pages-1.img", strings.Repeat("p", 70000), 0o600},
		{"ws/data.csv", "a,b\n1,2\n", 0o644},
		{"ws/sub/deeper/run.sh", "#!/bin/sh\n", 0o755},
		{"ws/private", "mine", 0o600},
	} {
		p := filepath.Join(dst, f.path)
		got, err := os.ReadFile(p)
		fi, serr := os.Lstat(p)
		if err != nil || serr != nil || string(got) != f.content || fi.Mode() != f.mode {
			t.Errorf("%s: %q %v, %v %v; want %q, %v", f.path, got, fi.Mode(), err, serr, f.content, f.mode)
		}
	}
	if fi, err := os.Lstat(dws + "/sub"); err != nil || fi.Mode() != os.ModeDir|os.ModeSticky|0o777 {
		t.Errorf("sub: %v, %v; want drwxrwxrwt", fi.Mode(), err)
	}
	if l, err := os.Readlink(dws + "/leak"); err != nil || l != secret {
		t.Errorf("leak: %q, %v; want a symlink to %s, as it was", l, err, secret)
	}
	if l, err := os.Readlink(dws + "/sub/rel"); err != nil || l != "data.csv" {
		t.Errorf("sub/rel: %q, %v", l, err)
	}
	if fi, err := os.Stat(dws + "/data.csv"); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("data.csv's mtime was not kept (its hard link came later): %v", err)
	}
	if a, err := os.Stat(dws + "/data.csv"); err != nil || a.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Errorf("data.csv's hard link did not come as one: %v", err)
	} else if b, err := os.Stat(dws + "/sub/hard"); err != nil || !os.SameFile(a, b) {
		t.Errorf("sub/hard is not data.csv: %v", err)
	}
	if _, err := os.Lstat(dws + "/fifo"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a FIFO went through: %v", err)
	}
	if os.Geteuid() == 0 {
		if fi, err := os.Lstat(dws + "/data.csv"); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
			t.Errorf("data.csv's owner was not kept: %v", err)
		}
	}
}

// The receiver is a boundary: no name, link, size or owner in a stream reaches outside the
// two folders or past the budgets; each is refused as invalid or exhausted.
func TestReadRefuses(t *testing.T) {
	type entry struct {
		h    tar.Header
		body string
	}
	reg := func(name, body string) entry {
		return entry{h: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body: body}
	}
	link := func(name, target string) entry {
		return entry{h: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target}}
	}
	for _, tc := range []struct {
		name    string
		entries []entry
		want    error
	}{
		{"dot-dot", []entry{reg("workspace/../escaped", "x")}, errdefs.ErrInvalidArgument},
		{"dot-dot inside", []entry{reg("workspace/a/../../escaped", "x")}, errdefs.ErrInvalidArgument},
		{"absolute", []entry{reg("/escaped", "x")}, errdefs.ErrInvalidArgument},
		{"no part", []entry{reg("escaped", "x")}, errdefs.ErrInvalidArgument},
		{"through a link", []entry{link("workspace/out", "OUTSIDE"), reg("workspace/out/escaped", "x")}, nil},
		{"through a relative link", []entry{link("workspace/out", "../../OUTSIDE"), reg("workspace/out/escaped", "x")}, nil},
		{"over a link", []entry{link("workspace/f", "OUTSIDE/escaped"), reg("workspace/f", "x")}, nil},
		{"a link in the checkpoint", []entry{link("checkpoint/x", "/etc")}, errdefs.ErrInvalidArgument},
		{"a hard link out", []entry{{h: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/h", Linkname: "/etc/shadow"}}}, errdefs.ErrInvalidArgument},
		{"a hard link up", []entry{{h: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/h", Linkname: "workspace/../OUTSIDE/x"}}}, errdefs.ErrInvalidArgument},
		{"a hard link to the checkpoint", []entry{reg("checkpoint/c", "1"), {h: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/h", Linkname: "checkpoint/c"}}}, errdefs.ErrInvalidArgument},
		{"a hard link through a symlink", []entry{link("workspace/l", "/etc/passwd"), {h: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/h", Linkname: "workspace/l"}}}, errdefs.ErrInvalidArgument},
		{"a hard link in the checkpoint", []entry{reg("workspace/w", "1"), {h: tar.Header{Typeflag: tar.TypeLink, Name: "checkpoint/h", Linkname: "workspace/w"}}}, errdefs.ErrInvalidArgument},
		{"a device", []entry{{h: tar.Header{Typeflag: tar.TypeChar, Name: "workspace/null", Devmajor: 1, Devminor: 3}}}, errdefs.ErrInvalidArgument},
		{"twice", []entry{reg("workspace/a", "1"), reg("workspace/a", "2")}, nil},
		{"too large", []entry{reg("workspace/big", strings.Repeat("x", 2048))}, errdefs.ErrResourceExhausted},
		{"too large together", []entry{reg("checkpoint/a", strings.Repeat("x", 800)), reg("checkpoint/b", strings.Repeat("x", 800))}, errdefs.ErrResourceExhausted},
		{"owner past the sandbox's ids", []entry{{h: tar.Header{Typeflag: tar.TypeReg, Name: "workspace/a", Uid: 70000}}}, errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			outside := filepath.Join(dir, "OUTSIDE")
			os.Mkdir(outside, 0o755)
			cp, ws := filepath.Join(dir, "a", "cp"), filepath.Join(dir, "a", "ws")
			os.MkdirAll(cp, 0o700)
			os.MkdirAll(ws, 0o755)
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, e := range tc.entries {
				h := e.h
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
				tw.Write([]byte(e.body))
			}
			tw.Close()
			err := readTrees(tar.NewReader(&buf), cp, ws, 1024, 1024)
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("%v; want %v", err, tc.want)
			}
			for _, p := range []string{filepath.Join(dir, "escaped"), filepath.Join(dir, "a", "escaped"), filepath.Join(outside, "escaped")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
		})
	}
}

// A move's signature is taken for its path, on the node it was made for, within the
// clock's skew, once; nothing else is.
func TestVerifier(t *testing.T) {
	now := time.Now()
	path := Path + "0123456789abcdef0123456789abcdef"
	n := strings.Repeat("a", 32)
	v := NewVerifier("s3cret-of-the-cluster", "node-b")
	good := Sign("s3cret-of-the-cluster", "node-b", path, now, n)
	for _, tc := range []struct {
		name, header, path string
	}{
		{"another secret", Sign("another", "node-b", path, now, n), path},
		{"another node", Sign("s3cret-of-the-cluster", "node-c", path, now, n), path},
		{"another path", good, Path + "ffffffffffffffffffffffffffffffff"},
		{"too old", Sign("s3cret-of-the-cluster", "node-b", path, now.Add(-10*time.Minute), n), path},
		{"ahead", Sign("s3cret-of-the-cluster", "node-b", path, now.Add(10*time.Minute), n), path},
		{"the secret as a bearer", "Bearer s3cret-of-the-cluster", path},
		{"mangled", strings.Replace(good, ".", "", 1), path},
		{"short nonce", Sign("s3cret-of-the-cluster", "node-b", path, now, "ab"), path},
		{"none", "", path},
	} {
		if v.Check(tc.header, tc.path, now) {
			t.Errorf("%s: taken", tc.name)
		}
	}
	if !v.Check(good, path, now) {
		t.Fatal("a good signature refused")
	}
	if v.Check(good, path, now) {
		t.Error("a signature taken twice")
	}
	if NewVerifier("", "node-b").Check(Sign("", "node-b", path, now, n), path, now) {
		t.Error("taken without a secret")
	}
}

func mustWrite(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// FuzzReadTrees: whatever the stream, nothing is written outside the two folders, and
// nothing panics.
func FuzzReadTrees(f *testing.F) {
	var seed bytes.Buffer
	tw := tar.NewWriter(&seed)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "workspace/d/", Mode: 0o755})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "workspace/d/f", Mode: 0o644, Size: 2})
	tw.Write([]byte("hi"))
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "workspace/l", Linkname: "../.."})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeLink, Name: "workspace/h", Linkname: "workspace/d/f"})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "checkpoint/x", Mode: 0o600, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	f.Add(seed.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		cp, ws := filepath.Join(dir, "in", "cp"), filepath.Join(dir, "in", "ws")
		os.MkdirAll(cp, 0o700)
		os.MkdirAll(ws, 0o755)
		readTrees(tar.NewReader(bytes.NewReader(data)), cp, ws, 1<<16, 1<<16)
		entries, _ := os.ReadDir(dir)
		inner, _ := os.ReadDir(filepath.Join(dir, "in"))
		if len(entries) != 1 || len(inner) != 2 {
			t.Fatalf("written outside the folders: %v %v", entries, inner)
		}
	})
}

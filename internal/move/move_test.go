package move

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
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
		// OUTSIDE (at the start of a target) is the absolute path of a folder beside the two.
		{"through a link", []entry{link("workspace/out", "OUTSIDE"), reg("workspace/out/escaped", "x")}, nil},
		{"through a relative link", []entry{link("workspace/out", "../../OUTSIDE"), reg("workspace/out/escaped", "x")}, nil},
		{"through a link, a folder down", []entry{link("workspace/out", "OUTSIDE"), {h: tar.Header{Typeflag: tar.TypeDir, Name: "workspace/out/d/", Mode: 0o755}}}, nil},
		{"over a link", []entry{link("workspace/f", "OUTSIDE/escaped"), reg("workspace/f", "x")}, nil},
		{"over a relative link", []entry{link("workspace/f", "../../OUTSIDE/escaped"), reg("workspace/f", "x")}, nil},
		{"a hard link over a link", []entry{reg("workspace/w", "x"), link("workspace/f", "OUTSIDE/escaped"), {h: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/f", Linkname: "workspace/w"}}}, nil},
		{"a link in the checkpoint", []entry{link("checkpoint/x", "/etc")}, errdefs.ErrInvalidArgument},
		{"a hard link out", []entry{{h: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/h", Linkname: "/etc/shadow"}}}, errdefs.ErrInvalidArgument},
		{"a hard link up", []entry{{h: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/h", Linkname: "workspace/../OUTSIDE/x"}}}, errdefs.ErrInvalidArgument},
		{"a hard link to the checkpoint", []entry{reg("checkpoint/c", "1"), {h: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/h", Linkname: "checkpoint/c"}}}, errdefs.ErrInvalidArgument},
		{"a hard link through a symlink", []entry{link("workspace/l", "/etc/passwd"), {h: tar.Header{Typeflag: tar.TypeLink, Name: "workspace/h", Linkname: "workspace/l"}}}, errdefs.ErrInvalidArgument},
		{"a hard link in the checkpoint", []entry{reg("workspace/w", "1"), {h: tar.Header{Typeflag: tar.TypeLink, Name: "checkpoint/h", Linkname: "workspace/w"}}}, errdefs.ErrInvalidArgument},
		{"a device", []entry{{h: tar.Header{Typeflag: tar.TypeChar, Name: "workspace/null", Devmajor: 1, Devminor: 3}}}, errdefs.ErrInvalidArgument},
		{"twice", []entry{reg("workspace/a", "1"), reg("workspace/a", "2")}, errdefs.ErrInvalidArgument},
		{"in a folder not sent", []entry{reg("workspace/none/a", "1")}, errdefs.ErrInvalidArgument},
		{"under a file", []entry{reg("workspace/f", "1"), reg("workspace/f/a", "1")}, errdefs.ErrInvalidArgument},
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
				if rest, ok := strings.CutPrefix(h.Linkname, "OUTSIDE"); ok && h.Typeflag == tar.TypeSymlink {
					h.Linkname = outside + rest
				}
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
			for _, p := range []string{filepath.Join(dir, "escaped"), filepath.Join(dir, "a", "escaped")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
			if entries, _ := os.ReadDir(outside); len(entries) > 0 {
				t.Errorf("written outside the two folders: %v", entries)
			}
		})
	}
}

// A move's signature is taken for its method, path and query, on the node it was made
// for, within the clock's skew, once (a restart remembers); and its body only as signed:
// a body changed, cut short or sent without its trailer ends in an error, not EOF.
func TestVerifier(t *testing.T) {
	const secret = "s3cret-of-the-cluster"
	nonces := filepath.Join(t.TempDir(), "cluster", "move-nonces")
	v, err := NewVerifier(secret, "node-b", nonces)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		ok   bool
		body string
		err  error
	}
	got := make(chan seen, 1)
	var now time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := v.Check(r, now)
		if !ok {
			got <- seen{}
			return
		}
		b, err := io.ReadAll(body)
		got <- seen{true, string(b), err}
	}))
	defer srv.Close()
	id := "0123456789abcdef0123456789abcdef"
	at := func(query string) *url.URL {
		u, _ := url.Parse(srv.URL + Path + id)
		u.RawQuery = query
		return u
	}
	send := func(req *http.Request) seen {
		t.Helper()
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return <-got
	}
	sign := func(secret, node string, u *url.URL, body string, t0 time.Time, nonce string) *http.Request {
		t.Helper()
		req, err := NewRequest(context.Background(), secret, node, u, strings.NewReader(body), t0, nonce)
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	now = time.Now()
	n := func(c string) string { return strings.Repeat(c, 32) }
	for _, tc := range []struct {
		name string
		req  func() *http.Request
	}{
		{"another secret", func() *http.Request { return sign("another", "node-b", at(""), "x", now, n("1")) }},
		{"another node", func() *http.Request { return sign(secret, "node-c", at(""), "x", now, n("2")) }},
		{"another path", func() *http.Request {
			req := sign(secret, "node-b", at(""), "x", now, n("3"))
			req.URL.Path = Path + "ffffffffffffffffffffffffffffffff"
			return req
		}},
		{"another query", func() *http.Request {
			req := sign(secret, "node-b", at(""), "x", now, n("4"))
			req.URL.RawQuery = "paused=true"
			return req
		}},
		{"another method", func() *http.Request {
			req := sign(secret, "node-b", at(""), "x", now, n("5"))
			req.Method = http.MethodPost
			return req
		}},
		{"too old", func() *http.Request { return sign(secret, "node-b", at(""), "x", now.Add(-10*time.Minute), n("6")) }},
		{"ahead", func() *http.Request { return sign(secret, "node-b", at(""), "x", now.Add(10*time.Minute), n("7")) }},
		{"the secret as a bearer", func() *http.Request {
			req := sign(secret, "node-b", at(""), "x", now, n("8"))
			req.Header.Set("Authorization", "Bearer "+secret)
			return req
		}},
		{"mangled", func() *http.Request {
			req := sign(secret, "node-b", at(""), "x", now, n("9"))
			req.Header.Set("Authorization", strings.Replace(req.Header.Get("Authorization"), ".", "", 1))
			return req
		}},
		{"short nonce", func() *http.Request { return sign(secret, "node-b", at(""), "x", now, "ab") }},
		{"none", func() *http.Request {
			req := sign(secret, "node-b", at(""), "x", now, n("a"))
			req.Header.Del("Authorization")
			return req
		}},
	} {
		if s := send(tc.req()); s.ok {
			t.Errorf("%s: taken", tc.name)
		}
	}

	good := sign(secret, "node-b", at("paused=true"), "the stream", now, n("b"))
	if s := send(good); !s.ok || s.err != nil || s.body != "the stream" {
		t.Fatalf("a good move: %+v", s)
	}
	again := sign(secret, "node-b", at("paused=true"), "the stream", now, n("b"))
	if s := send(again); s.ok {
		t.Error("a nonce taken twice")
	}

	// The body: signed as it was read; another one, or none signed, ends in errBody.
	changed := sign(secret, "node-b", at(""), "the stream as signed", now, n("c"))
	io.Copy(io.Discard, changed.Body) // the trailer of what was signed...
	changed.Body = io.NopCloser(strings.NewReader("the stream with a root of /"))
	if s := send(changed); !s.ok || !errors.Is(s.err, errBody) {
		t.Errorf("a changed body: %+v; want errBody at its end", s)
	}
	noTrailer := sign(secret, "node-b", at(""), "the stream", now, n("d"))
	noTrailer.Body, noTrailer.Trailer, noTrailer.ContentLength = io.NopCloser(strings.NewReader("the stream")), nil, int64(len("the stream"))
	if s := send(noTrailer); !s.ok || !errors.Is(s.err, errBody) {
		t.Errorf("a body without its trailer: %+v; want errBody at its end", s)
	}

	// After a restart: the nonces taken are still taken; those expired are forgotten.
	old := now.Add(-time.Hour)
	f, err := os.OpenFile(nonces, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "%d %s\nnot a line\n", old.Unix(), n("e"))
	f.Close()
	if v, err = NewVerifier(secret, "node-b", nonces); err != nil {
		t.Fatal(err)
	}
	if s := send(sign(secret, "node-b", at("paused=true"), "the stream", now, n("b"))); s.ok {
		t.Error("a nonce taken before a restart was taken again after it")
	}
	if data, _ := os.ReadFile(nonces); strings.Contains(string(data), n("e")) || strings.Contains(string(data), "not a line") || !strings.Contains(string(data), n("b")) {
		t.Errorf("the nonces' file after a restart: %q; want the live nonces only", data)
	}
	if fi, err := os.Stat(nonces); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the nonces' file: %v, %v; want 0600", fi, err)
	}
	if s := send(sign(secret, "node-b", at(""), "x", now, n("f"))); !s.ok {
		t.Error("a new nonce refused after a restart")
	}
	if v, err := NewVerifier("", "node-b", ""); err != nil {
		t.Fatal(err)
	} else if _, ok := v.Check(sign("", "node-b", at(""), "x", now, n("0")), now); ok {
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
// nothing panics. The seeds link to a folder outside them by its absolute path, and
// relatively; that folder, and the tree around the two, must stay as they were.
func FuzzReadTrees(f *testing.F) {
	outside, err := os.MkdirTemp("", "cellbox-fuzz-outside-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(outside) })
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
	for _, target := range []string{outside, "../../OUTSIDE"} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "workspace/out", Linkname: target})
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "workspace/out/escaped", Mode: 0o644, Size: 1})
		tw.Write([]byte("x"))
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "workspace/f", Linkname: target + "/over"})
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "workspace/f", Mode: 0o644, Size: 1})
		tw.Write([]byte("x"))
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "workspace/out/d/", Mode: 0o755})
		tw.Close()
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		cp, ws := filepath.Join(dir, "in", "cp"), filepath.Join(dir, "in", "ws")
		os.MkdirAll(cp, 0o700)
		os.MkdirAll(ws, 0o755)
		os.Mkdir(filepath.Join(dir, "OUTSIDE"), 0o755)
		readTrees(tar.NewReader(bytes.NewReader(data)), cp, ws, 1<<16, 1<<16)
		var stray []string
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			switch p {
			case cp, ws:
				return filepath.SkipDir
			case dir, filepath.Join(dir, "in"), filepath.Join(dir, "OUTSIDE"):
				return nil
			}
			stray = append(stray, p)
			return nil
		})
		if entries, _ := os.ReadDir(outside); len(entries) > 0 {
			for _, e := range entries {
				os.RemoveAll(filepath.Join(outside, e.Name()))
				stray = append(stray, filepath.Join(outside, e.Name()))
			}
		}
		if len(stray) > 0 {
			t.Fatalf("written outside the two folders: %v", stray)
		}
	})
}

package guestbin

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestAttachExtract(t *testing.T) {
	dir := t.TempDir()
	exe, guest, out := filepath.Join(dir, "exe"), filepath.Join(dir, "guest"), filepath.Join(dir, "out")
	body := bytes.Repeat([]byte("the server's own code "), 1000)
	write(t, exe, body)
	// None attached: nothing to extract, and nothing written.
	if p, err := Extract(exe, out); err != nil || p != "" {
		t.Fatalf("a plain binary: Extract = %q, %v; want none", p, err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("Extract made %s for a binary that carries no guest", out)
	}
	g1 := bytes.Repeat([]byte("guest one "), 500)
	write(t, guest, g1)
	if err := Attach(exe, guest); err != nil {
		t.Fatal(err)
	}
	p1, err := Extract(exe, out)
	if err != nil || p1 == "" {
		t.Fatalf("Extract = %q, %v", p1, err)
	}
	if b, _ := os.ReadFile(p1); !bytes.Equal(b, g1) {
		t.Fatalf("extracted %d bytes, want the guest's %d", len(b), len(g1))
	}
	if st, _ := os.Stat(p1); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", st.Mode().Perm())
	}
	// The executable's own bytes are untouched before the guest.
	if b, _ := os.ReadFile(exe); !bytes.HasPrefix(b, body) || len(b) != len(body)+len(g1)+trailerLen {
		t.Errorf("the executable is %d bytes, want %d + %d + %d", len(b), len(body), len(g1), trailerLen)
	}
	// Again: the same file, and a damaged copy at its name is written anew.
	write(t, p1, []byte("not the guest"))
	if p, err := Extract(exe, out); err != nil || p != p1 {
		t.Fatalf("again: %q, %v; want %q", p, err, p1)
	}
	if b, _ := os.ReadFile(p1); !bytes.Equal(b, g1) {
		t.Error("a damaged extracted guest was kept")
	}
	// Attaching another replaces the first: one trailer, a new file name.
	g2 := []byte("guest two")
	write(t, guest, g2)
	if err := Attach(exe, guest); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(exe); len(b) != len(body)+len(g2)+trailerLen {
		t.Errorf("after a second attach the executable is %d bytes, want %d", len(b), len(body)+len(g2)+trailerLen)
	}
	p2, err := Extract(exe, out)
	if err != nil || p2 == p1 {
		t.Fatalf("second guest: %q, %v (first %q)", p2, err, p1)
	}
	if b, _ := os.ReadFile(p2); !bytes.Equal(b, g2) {
		t.Errorf("second guest extracted as %q", b)
	}
}

// A trailer whose length or sum lies is refused: no file is written from it.
func TestExtractDamaged(t *testing.T) {
	dir := t.TempDir()
	exe, guest, out := filepath.Join(dir, "exe"), filepath.Join(dir, "guest"), filepath.Join(dir, "out")
	write(t, exe, []byte("server"))
	write(t, guest, []byte("the guest binary"))
	if err := Attach(exe, guest); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(exe)
	// One byte of the guest changed: the sum no longer matches.
	flipped := bytes.Clone(b)
	flipped[len("server")] ^= 1
	write(t, exe, flipped)
	if p, err := Extract(exe, out); err == nil || !strings.Contains(err.Error(), "sum") {
		t.Errorf("a changed guest: %q, %v; want a sum error", p, err)
	}
	// A length beyond the file.
	long := bytes.Clone(b)
	long[len(long)-trailerLen+32+7] = 0x7f
	write(t, exe, long)
	if p, err := Extract(exe, out); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("a length beyond the file: %q, %v; want an error", p, err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("files left in %s: %v", out, entries)
	}
}

// What it finds at its path is used only if it is this user's own executable file that no
// one else may write; a folder others may write is refused.
func TestExtractTrustsOnlyItsOwn(t *testing.T) {
	dir := t.TempDir()
	exe, guest, out := filepath.Join(dir, "exe"), filepath.Join(dir, "guest"), filepath.Join(dir, "out")
	write(t, exe, []byte("server"))
	g := []byte("the guest binary")
	write(t, guest, g)
	if err := Attach(exe, guest); err != nil {
		t.Fatal(err)
	}
	p, err := Extract(exe, out)
	if err != nil {
		t.Fatal(err)
	}
	// The right bytes, but writable by others: written anew, 0755.
	if err := os.Chmod(p, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Extract(exe, out); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(p); st.Mode().Perm() != 0o755 {
		t.Errorf("a file others could write was kept: mode %v", st.Mode().Perm())
	}
	// A symlink to a file with the right bytes: replaced by a file.
	elsewhere := filepath.Join(dir, "elsewhere")
	write(t, elsewhere, g)
	os.Remove(p)
	if err := os.Symlink(elsewhere, p); err != nil {
		t.Fatal(err)
	}
	if _, err := Extract(exe, out); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(p); !st.Mode().IsRegular() {
		t.Errorf("a symlink was kept: %v", st.Mode())
	}
	// A folder others may write: refused.
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Extract(exe, out); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("a folder others may write: %v", err)
	}
}

// Find takes only a file Extract could have written: of the sum asked, at its name, this
// user's and writable by no one else; anything else is no guest.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	exe, guest := filepath.Join(t.TempDir(), "exe"), filepath.Join(t.TempDir(), "guest")
	write(t, exe, []byte("server"))
	g := []byte("the guest of before")
	write(t, guest, g)
	if err := Attach(exe, guest); err != nil {
		t.Fatal(err)
	}
	p, err := Extract(exe, dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Sum(p)
	if err != nil || sum != sha256.Sum256(g) {
		t.Fatalf("Sum = %x, %v; want the guest's", sum, err)
	}
	if got, err := Find(dir, sum); err != nil || got != p {
		t.Fatalf("Find = %q, %v; want %q", got, err, p)
	}
	other := sha256.Sum256([]byte("another guest"))
	if got, err := Find(dir, other); err == nil {
		t.Errorf("Find of a sum not there = %q", got)
	}
	// A file at the sum's name with other content, or writable by others, is none.
	for _, tc := range []struct {
		name string
		mod  func(path string)
	}{
		{"other content", func(path string) { os.WriteFile(path, []byte("planted"), 0o755) }},
		{"writable by others", func(path string) { os.Chmod(path, 0o777) }},
		{"a symlink", func(path string) { os.Remove(path); os.Symlink(guest, path) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Extract(exe, dir); err != nil {
				t.Fatal(err)
			}
			tc.mod(p)
			if got, err := Find(dir, sum); err == nil {
				t.Errorf("Find = %q; want an error", got)
			}
		})
	}
}

package statefile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.json")
	for _, content := range []string{"first", "second, longer than the first"} {
		if err := Write(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	// A folder that is not there: an error, and nothing left.
	if err := Write(filepath.Join(dir, "no", "b.json"), []byte("x"), 0o600); err == nil {
		t.Error("write into a missing folder worked")
	}
}

// Update leaves a file that holds the data already as it is (the same inode: a bind mount
// of it still shows it), and replaces one that does not.
func TestUpdate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := Update(path, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	if err := Update(path, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	same, _ := os.Stat(path)
	if !os.SameFile(before, same) {
		t.Error("Update replaced a file that held the data already")
	}
	if err := Update(path, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "b" {
		t.Errorf("content %q, want b", got)
	}
}

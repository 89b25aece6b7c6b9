package workspace

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func TestCheckID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"a", true},
		{"0f3c9a1b2d4e5f60718293a4", true},
		{"warm-1", true},
		{strings.Repeat("a", 64), true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{"..", false},
		{".", false},
		{"../x", false},
		{"a/b", false},
		{"/abs", false},
		{"Upper", false},
		{"a.img", false},
		{"a b", false},
		{"a\x00", false},
		{"-rf", false},
		{"a_b", false},
		{"ü", false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			err := checkID(tt.id)
			if tt.ok && err != nil {
				t.Fatalf("checkID(%q) = %v, want ok", tt.id, err)
			}
			if !tt.ok && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("checkID(%q) = %v, want invalid argument", tt.id, err)
			}
		})
	}
}

// Every method refuses a bad id before touching the disk.
func TestStoreRefusesBadIDs(t *testing.T) {
	dir := t.TempDir()
	s, err := NewStore(StoreConfig{Dir: filepath.Join(dir, "ws"), Quota: "none", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"", "..", "../ws2", "a/b", "X", strings.Repeat("a", 65)} {
		if _, err := s.Create(ctx, id, 0); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Create(%q) = %v, want invalid argument", id, err)
		}
		if err := s.Release(ctx, id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Release(%q) = %v, want invalid argument", id, err)
		}
		if err := s.Remove(ctx, id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Remove(%q) = %v, want invalid argument", id, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ws2")); err == nil {
		t.Error("a bad id made a folder outside the store")
	}
}

func TestNewStoreBadQuota(t *testing.T) {
	_, err := NewStore(StoreConfig{Dir: t.TempDir(), Quota: "xfs"})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("NewStore(quota xfs) = %v, want invalid argument", err)
	}
}

// The lifecycle without quotas, which needs no root: it runs everywhere.
func TestStoreFolders(t *testing.T) {
	s, err := NewStore(StoreConfig{Dir: testDir(t), Quota: "none", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if s.Quotas() {
		t.Fatal("Quotas() = true with quota none")
	}
	testLifecycle(t, s)
}

// testLifecycle: create, write, release (data kept), sweep only after retention, and the
// errors of a repeated create, a release of nothing, a remove of nothing.
func testLifecycle(t *testing.T, s *Store) {
	ctx := context.Background()
	dir, err := s.Create(ctx, "life", 16)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(s.dir, "life") {
		t.Fatalf("Create returned %q", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Fatalf("new workspace not empty: %v %v", entries, err)
	}
	writeAsOwner(t, dir, "hello.txt", "hi\n")
	if _, err := s.Create(ctx, "life", 16); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("second Create = %v, want failed precondition", err)
	}
	if err := s.Release(ctx, "life"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "life"); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if _, err := s.Create(ctx, "life", 16); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Create of a kept workspace = %v, want failed precondition", err)
	}
	if s.Quotas() {
		if _, err := os.Stat(dir + imgSuffix); err != nil {
			t.Fatalf("image not kept after release: %v", err)
		}
		if m, _ := isMountPoint(dir); m {
			t.Fatal("still mounted after release")
		}
	} else if b, err := os.ReadFile(filepath.Join(dir, "hello.txt")); err != nil || string(b) != "hi\n" {
		t.Fatalf("data not kept after release: %q %v", b, err)
	}

	// A live workspace is never swept, whatever the retention.
	if _, err := s.Create(ctx, "live", 16); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("Sweep(1h) = %d, %v; want 0", n, err)
	}
	if n, err := s.Sweep(ctx, 0); err != nil || n != 1 {
		t.Fatalf("Sweep(0) = %d, %v; want 1", n, err)
	}
	for _, p := range []string{dir, dir + imgSuffix, dir + markerSuffix} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after sweep: %v", filepath.Base(p), err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.dir, "live")); err != nil {
		t.Fatalf("live workspace swept: %v", err)
	}
	if err := s.Release(ctx, "nothing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Release of nothing = %v, want not found", err)
	}
	if err := s.Remove(ctx, "nothing"); err != nil {
		t.Fatalf("Remove of nothing = %v", err)
	}
	if err := s.Remove(ctx, "live"); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, s.dir)
}

// Untrusted code fills the workspace with symlinks out of it; removing it must delete
// the links, never what they point at.
func TestStoreRemoveDoesNotFollowSymlinks(t *testing.T) {
	s, err := NewStore(StoreConfig{Dir: testDir(t), Quota: "none", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	testNoFollow(t, s)
}

func testNoFollow(t *testing.T, s *Store) {
	ctx := context.Background()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, release := range []bool{false, true} {
		dir, err := s.Create(ctx, "evil", 16)
		if err != nil {
			t.Fatal(err)
		}
		must(t, os.Symlink(outside, filepath.Join(dir, "out")))
		must(t, os.Symlink(secret, filepath.Join(dir, "secret")))
		must(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
		must(t, os.Symlink("/", filepath.Join(dir, "d", "root")))
		if release {
			must(t, s.Release(ctx, "evil"))
			if n, err := s.Sweep(ctx, 0); n != 1 || err != nil {
				t.Fatalf("Sweep = %d, %v", n, err)
			}
		} else {
			must(t, s.Remove(ctx, "evil"))
		}
		if b, err := os.ReadFile(secret); err != nil || string(b) != "keep me" {
			t.Fatalf("file behind a symlink touched: %q %v", b, err)
		}
		assertEmpty(t, s.dir)
	}
}

// testDir is a new folder for a Store that a workspace's owner (uid 1000) can pass through.
func testDir(t *testing.T) string {
	d := t.TempDir()
	for _, p := range []string{d, filepath.Dir(d)} {
		must(t, os.Chmod(p, 0o711))
	}
	return filepath.Join(d, "ws")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// assertEmpty checks that the store's folder holds no workspace files.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in store: %s", e.Name())
	}
}

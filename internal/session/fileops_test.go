package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// TestFileOps: the manager's folder, move, stat and remove calls reach the session's guest,
// and a spawned program may start in an absolute folder.
func TestFileOps(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ws := workspaceOf(t, m, s.ID)
	if e, err := m.MakeDir(ctx, s.ID, "a/b"); err != nil || !e.Created {
		t.Fatalf("make dir: %+v, %v", e, err)
	}
	os.WriteFile(filepath.Join(ws, "f.txt"), []byte("x"), 0o644)
	if e, err := m.Move(ctx, s.ID, "f.txt", "a/b/g.txt"); err != nil || e.Path != "/mnt/data/a/b/g.txt" {
		t.Fatalf("move: %+v, %v", e, err)
	}
	if e, err := m.Stat(ctx, s.ID, "/mnt/data/a/b/g.txt"); err != nil || e.Type != "file" || e.Size != 1 {
		t.Errorf("stat: %+v, %v", e, err)
	}
	if err := m.Remove(ctx, s.ID, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "a")); !os.IsNotExist(err) {
		t.Errorf("a still there: %v", err)
	}
	refused := []struct {
		name string
		err  error
	}{
		{"remove the workspace", m.Remove(ctx, s.ID, "/mnt/data")},
		{"move the workspace", func() error { _, err := m.Move(ctx, s.ID, ".", "x"); return err }()},
		{"move onto the workspace", func() error { _, err := m.Move(ctx, s.ID, "x", ""); return err }()},
		{"move out", func() error { _, err := m.Move(ctx, s.ID, "x", "../x"); return err }()},
		{"stat outside", func() error { _, err := m.Stat(ctx, s.ID, "/etc/passwd"); return err }()},
		{"make dir outside", func() error { _, err := m.MakeDir(ctx, s.ID, "a/../../x"); return err }()},
		{"spawn in a relative folder", func() error {
			_, err := m.Spawn(ctx, s.ID, "tmp", api.CommandRequest{Cmd: []string{"pwd"}}, nil)
			return err
		}()},
		{"spawn with a folder and a cwd", func() error {
			_, err := m.Spawn(ctx, s.ID, "/tmp", api.CommandRequest{Cmd: []string{"pwd"}, Cwd: "a"}, nil)
			return err
		}()},
	}
	for _, r := range refused {
		if !errors.Is(r.err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid argument", r.name, r.err)
		}
	}
	if r, err := m.Spawn(ctx, s.ID, "/tmp", api.CommandRequest{Cmd: []string{"pwd"}}, nil); err != nil || r.Stdout != "/tmp\n" {
		t.Errorf("spawn in /tmp: %+v, %v", r, err)
	}
	if _, err := m.Stat(ctx, "no-such-session", "x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("stat in no session: %v", err)
	}
}

package e2b

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
)

// TestSandboxStateGoesWithItsSession: a sandbox's state (its code contexts, in memory and
// in a file) goes when its session ends, deleted or reaped, with no request needed to
// notice; the files of sandboxes that ended while no server ran go at start; a state asked
// for just after its sandbox ended is not kept.
func TestSandboxStateGoesWithItsSession(t *testing.T) {
	m := sessiontest.NewTold(sessiontest.New(t, nil))
	dir := t.TempDir()
	stale := filepath.Join(dir, "e2b", "contexts", "0123abcd.json")
	os.MkdirAll(filepath.Dir(stale), 0o700)
	os.WriteFile(stale, []byte("[]"), 0o600)
	h := &Handler{m: m.Manager, opts: Options{StateDir: dir}, boxes: map[string]*sandboxState{}}
	h.follow(m)
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the state file of a sandbox that ended while no server ran: %v", err)
	}

	ctx := context.Background()
	withContext := func(t *testing.T) (string, string) {
		t.Helper()
		s, err := m.Create(ctx, api.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		st := h.state(s.ID)
		if _, err := st.addContext("python", "/mnt/data"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(st.file); err != nil {
			t.Fatal(err)
		}
		return s.ID, st.file
	}
	ended := func(t *testing.T, id, file string, why session.EndReason) {
		t.Helper()
		for ev := range m.Handled {
			if ev.Kind == session.SessionEnded && ev.SessionID == id {
				if ev.Reason != why {
					t.Errorf("ended %q, want %q", ev.Reason, why)
				}
				break
			}
		}
		h.mu.Lock()
		_, kept := h.boxes[id]
		h.mu.Unlock()
		if _, err := os.Stat(file); kept || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after its session ended: state kept %v, file %v", kept, err)
		}
	}

	t.Run("deleted", func(t *testing.T) {
		id, file := withContext(t)
		if err := m.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		ended(t, id, file, session.EndDeleted)
		st := h.state(id) // a request that found the sandbox live just before
		st.addContext("python", "/mnt/data")
		h.mu.Lock()
		_, kept := h.boxes[id]
		h.mu.Unlock()
		if _, err := os.Stat(file); kept || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a state asked for after the end: kept %v, file %v", kept, err)
		}
	})
	t.Run("lifetime", func(t *testing.T) {
		id, file := withContext(t)
		if _, err := m.SetLifetime(ctx, id, time.Second); err != nil { // the reaper ends it
			t.Fatal(err)
		}
		ended(t, id, file, session.EndLifetime)
	})
}

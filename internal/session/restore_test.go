package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/workspace"
)

// attachBackend re-attaches with the errors it is given, per sandbox id, and says which
// sandboxes Cleanup was told to keep.
type attachBackend struct {
	errs map[string]error
	kept map[string]bool
}

func (b *attachBackend) Name() string { return "fake" }
func (b *attachBackend) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Reattach: true}
}
func (b *attachBackend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	return nil, fmt.Errorf("the fake starts nothing: %w", errdefs.ErrUnavailable)
}
func (b *attachBackend) Attach(ctx context.Context, id string) (sandbox.Sandbox, error) {
	return nil, b.errs[id]
}
func (b *attachBackend) Cleanup(ctx context.Context, keep func(string) bool) error {
	for id := range b.errs {
		b.kept[id] = keep(id)
	}
	return nil
}

// At start, what the records say decides each session's fate: idle too long ends (its
// sandbox is not kept), and so does past its deadline, busy or not; a record of a busy
// session is not idle; a sandbox the runtime could not tell about is left for the next
// start, record and all; a lost sandbox whose workspace is gone too ends.
func TestRestoreDecisions(t *testing.T) {
	state := t.TempDir()
	recs := records{dir: filepath.Join(state, "sessions")}
	if err := os.MkdirAll(recs.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(-time.Hour)
	past, ahead := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	for _, r := range []record{
		{ID: "aaa1", IdleTimeoutS: 60, LastActiveAt: hour},                                      // idle too long
		{ID: "aaa2", IdleTimeoutS: 60, LastActiveAt: hour, Busy: true},                          // busy when its server died
		{ID: "aaa3", IdleTimeoutS: 600, LastActiveAt: time.Now()},                               // lost, workspace gone
		{ID: "aaa4", IdleTimeoutS: 600, LastActiveAt: time.Now(), Busy: true, ExpiresAt: &past}, // past its deadline
		{ID: "aaa5", IdleTimeoutS: 600, LastActiveAt: time.Now(), ExpiresAt: &ahead},            // within it
	} {
		r.Limits = api.Limits{MemoryMB: 512}
		if err := recs.save(r); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(recs.dir, "notes.txt"), []byte("the operator's"), 0o600)
	b := &attachBackend{kept: map[string]bool{}, errs: map[string]error{
		"aaa1": errdefs.ErrNotFound,
		"aaa2": fmt.Errorf("runc state: timed out: %w", errdefs.ErrUnavailable),
		"aaa3": fmt.Errorf("gone: %w", errdefs.ErrNotFound),
		"aaa4": errdefs.ErrNotFound,
		"aaa5": fmt.Errorf("runc state: timed out: %w", errdefs.ErrUnavailable),
	}}
	store, err := workspace.NewStore(workspace.StoreConfig{Dir: filepath.Join(state, "workspaces"), Quota: "none"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.StateDir = state
	cfg.PoolSize = 0
	m, err := New(context.Background(), cfg, b, store, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	if b.kept["aaa1"] || !b.kept["aaa2"] || !b.kept["aaa3"] || b.kept["aaa4"] || !b.kept["aaa5"] {
		t.Errorf("cleanup kept %v; want the busy and the recent sessions' sandboxes, but the one past its deadline", b.kept)
	}
	if n, _ := m.Stats(); n != 0 {
		t.Errorf("%d sessions restored, want none", n)
	}
	for id, want := range map[string]bool{"aaa1": false, "aaa2": true, "aaa3": false, "aaa4": false, "aaa5": true} {
		if _, err := os.Stat(recs.path(id)); (err == nil) != want {
			t.Errorf("record of %s: %v; want kept %v", id, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(recs.dir, "notes.txt")); err != nil {
		t.Errorf("a file that is not a record was removed: %v", err)
	}
	if !errors.Is(store.Ready("aaa3"), errdefs.ErrNotFound) {
		t.Error("the ended session's workspace is there")
	}
}

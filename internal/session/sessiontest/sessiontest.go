// Package sessiontest starts a session.Manager for the tests of the packages built on it:
// the local-unsafe backend with the real guest and a real IPython, fast enough for unit
// tests (isolation is tested on runc elsewhere).
package sessiontest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/sandbox/local"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/workspace"
)

// New returns a manager with no warm pool and no pre-imports; mod, if set, changes the
// config first. It is shut down when the test ends. The test is skipped (with the reason)
// where IPython is missing.
func New(t testing.TB, mod func(*config.Config)) *session.Manager {
	t.Helper()
	testbin.NeedIPython(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	b, err := local.New(local.Config{GuestBinary: testbin.Cellbox(t), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	store, err := workspace.NewStore(workspace.StoreConfig{Dir: t.TempDir(), Quota: "none", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.Preimport = ""
	cfg.PoolSize = 0
	if mod != nil {
		mod(&cfg)
	}
	m, err := session.New(context.Background(), cfg, b, store, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m
}

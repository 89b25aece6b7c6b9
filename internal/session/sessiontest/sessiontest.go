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
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/local"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/workspace"
)

var logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// New returns a manager with no warm pool and no pre-imports; mod, if set, changes the
// config first. It is shut down when the test ends. The test is skipped (with the reason)
// where IPython is missing.
func New(t testing.TB, mod func(*config.Config)) *session.Manager {
	t.Helper()
	return NewOn(t, Local(t), mod)
}

// Local is the local-unsafe backend running the real guest; the test is skipped (with
// the reason) where IPython is missing.
func Local(t testing.TB) sandbox.Backend {
	t.Helper()
	testbin.NeedIPython(t)
	b, err := local.New(local.Config{GuestBinary: testbin.Cellbox(t), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// NewOn is New on backend b (sandboxtest.Images(Local(t), ...) for one on images).
func NewOn(t testing.TB, b sandbox.Backend, mod func(*config.Config)) *session.Manager {
	t.Helper()
	store, err := workspace.NewStore(workspace.StoreConfig{Dir: t.TempDir(), Quota: "none", Logger: logger})
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
	m, err := session.New(context.Background(), cfg, b, store, logger, nil)
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

// Told is a manager whose subscribers' handlers say, on Handled, each event they have
// handled: a test of a front door's reaction to a session's end waits on it, not on time.
type Told struct {
	*session.Manager
	Handled chan session.Event
}

// NewTold wraps m; Handled holds up to 16 events not yet read.
func NewTold(m *session.Manager) Told { return Told{m, make(chan session.Event, 16)} }

// Subscribe subscribes f, then tells Handled of each event f returned from.
func (m Told) Subscribe(f func(session.Event)) func() {
	return m.Manager.Subscribe(func(ev session.Event) {
		f(ev)
		m.Handled <- ev
	})
}

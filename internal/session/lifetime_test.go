package session

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

// waitEnded waits, generously, until the session is gone.
func waitEnded(t *testing.T, m *Manager, id string) {
	t.Helper()
	if !testbin.Eventually(time.Minute, func() bool { _, err := m.Get(context.Background(), id); return errors.Is(err, errdefs.ErrNotFound) }) {
		t.Fatalf("session %s still there a minute after its deadline", id)
	}
}

// TestLifetimeEndsBusySession: a session ends at its deadline even while a cell runs: the
// cell's caller is told the session ended, and its record is gone.
func TestLifetimeEndsBusySession(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{LifetimeS: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.ExpiresAt == nil || s.ExpiresAt.Sub(s.CreatedAt) != time.Second {
		t.Fatalf("expires_at %v, created_at %v; want a second apart", s.ExpiresAt, s.CreatedAt)
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "import time; time.sleep(600)", TimeoutS: 900}, nil)
		done <- err
	}()
	select {
	case err := <-done: // the session's end is what ends the cell
		if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "ended") {
			t.Errorf("the running cell's caller got %v; want not found: the session ended", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the cell still runs two minutes after the session's deadline")
	}
	waitEnded(t, m, s.ID)
	if _, err := os.Stat(m.records.path(s.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ended session's record: %v", err)
	}
}

// TestSetLifetime: SetLifetime replaces the deadline, from now; a short one ends an idle
// session without waiting for the idle reaper's tick.
func TestSetLifetime(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{LifetimeS: 3600})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got, err := m.SetLifetime(ctx, s.ID, 2*time.Hour)
	after := time.Now()
	if err != nil || got.ExpiresAt == nil || got.ExpiresAt.Before(before.Add(2*time.Hour)) || got.ExpiresAt.After(after.Add(2*time.Hour)) {
		t.Fatalf("SetLifetime(2h) between %v and %v: %+v, %v", before, after, got, err)
	}
	if v, _ := m.Get(ctx, s.ID); !v.ExpiresAt.Equal(*got.ExpiresAt) {
		t.Errorf("get: expires_at %v, want %v", v.ExpiresAt, got.ExpiresAt)
	}
	if _, err := m.SetLifetime(ctx, s.ID, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, m, s.ID)
	if _, err := m.SetLifetime(ctx, s.ID, time.Hour); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetLifetime on an ended session: %v, want not found", err)
	}
}

// TestLifetimeChecks: lifetimes past --max-lifetime, negative or zero (for SetLifetime)
// are refused with a message naming what to change.
func TestLifetimeChecks(t *testing.T) {
	m := newManager(t, func(c *config.Config) { c.MaxLifetime = time.Hour })
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		lifetimeS int
		want      string
	}{
		{"above the maximum", 3601, "lifetime_s 3601 is above this server's maximum 3600 (--max-lifetime 1h0m0s)"},
		{"negative", -1, "lifetime_s must not be negative"},
		{"overflows a duration", 1 << 62, "--max-lifetime"},
	} {
		t.Run("create/"+tt.name, func(t *testing.T) {
			_, err := m.Create(ctx, api.CreateSessionRequest{LifetimeS: tt.lifetimeS})
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%v; want invalid argument saying %q", err, tt.want)
			}
		})
	}
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil || s.ExpiresAt != nil {
		t.Fatalf("a session without a lifetime: %+v, %v", s, err)
	}
	for _, tt := range []struct {
		name string
		d    time.Duration
		want string
	}{
		{"zero", 0, "lifetime_s must be positive"},
		{"negative", -time.Second, "lifetime_s must be positive"},
		{"above the maximum", time.Hour + time.Second, "lifetime_s 3601 is above this server's maximum 3600 (--max-lifetime 1h0m0s)"},
	} {
		t.Run("set/"+tt.name, func(t *testing.T) {
			_, err := m.SetLifetime(ctx, s.ID, tt.d)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%v; want invalid argument saying %q", err, tt.want)
			}
		})
	}
	if v, _ := m.Get(ctx, s.ID); v == nil || v.ExpiresAt != nil {
		t.Errorf("refused lifetimes changed the session: %+v", v)
	}
	if _, err := m.SetLifetime(ctx, s.ID, time.Hour); err != nil {
		t.Errorf("the maximum refused: %v", err)
	}
}

// TestEndExpired: the reaper's decision at a given time: sessions at or past their
// deadline end, the others stay, and the earliest deadline ahead is what it waits for.
func TestEndExpired(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	create := func(lifetimeS int) *api.Session {
		s, err := m.Create(ctx, api.CreateSessionRequest{LifetimeS: lifetimeS})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	soon, later, never := create(3600), create(7200), create(0)
	if next := m.endExpired(ctx, time.Now()); !next.Equal(*soon.ExpiresAt) {
		t.Errorf("next deadline %v, want %v", next, soon.ExpiresAt)
	}
	if next := m.endExpired(ctx, *soon.ExpiresAt); !next.Equal(*later.ExpiresAt) {
		t.Errorf("next deadline %v, want %v", next, later.ExpiresAt)
	}
	if _, err := m.Get(ctx, soon.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the session at its deadline: %v, want ended", err)
	}
	if next := m.endExpired(ctx, later.ExpiresAt.Add(time.Hour)); !next.IsZero() {
		t.Errorf("next deadline %v, want none", next)
	}
	if l := m.List(ctx); len(l) != 1 || l[0].ID != never.ID {
		t.Errorf("sessions left: %+v; want the one without a lifetime", l)
	}
}

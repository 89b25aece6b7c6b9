package session

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// A session's lifetime: it ends at its deadline (Session.expires) whatever it does, like
// Delete (what runs in it is killed). Create sets one from lifetime_s, SetLifetime replaces
// it, the record keeps it over a restart, and the reaper (reap.go) keeps a timer to the
// earliest one. The idle timeout applies either way.

// createLifetime is the lifetime of api.CreateSessionRequest.LifetimeS; 0: none.
func (m *Manager) createLifetime(seconds int) (time.Duration, error) {
	switch {
	case seconds < 0:
		return 0, fmt.Errorf("lifetime_s must not be negative (0: no lifetime): %w", errdefs.ErrInvalidArgument)
	case seconds == 0:
		return 0, nil
	case seconds > int(m.cfg.MaxLifetime/time.Second): // before the multiplication overflows
		return 0, m.tooLong(float64(seconds))
	}
	return time.Duration(seconds) * time.Second, nil
}

func (m *Manager) tooLong(seconds float64) error {
	return fmt.Errorf("lifetime_s %s is above this server's maximum %s (--max-lifetime %v): %w",
		strconv.FormatFloat(seconds, 'f', -1, 64), strconv.FormatFloat(m.cfg.MaxLifetime.Seconds(), 'f', -1, 64),
		m.cfg.MaxLifetime, errdefs.ErrInvalidArgument)
}

// SetLifetime makes the session of ctx's tenant end d from now, busy or idle, replacing
// its earlier deadline, if any. d must be positive and at most --max-lifetime. The call
// counts as activity, like any other on the session.
func (m *Manager) SetLifetime(ctx context.Context, id string, d time.Duration) (*api.Session, error) {
	s, err := m.lookupStill(ctx, id)
	if err != nil {
		return nil, err
	}
	switch {
	case d <= 0:
		return nil, fmt.Errorf("lifetime_s must be positive: the session ends that many seconds from now: %w", errdefs.ErrInvalidArgument)
	case d > m.cfg.MaxLifetime:
		return nil, m.tooLong(d.Seconds())
	}
	now := time.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, notFound(id)
	}
	s.expires = now.Add(d)
	s.lastActive = now
	s.mu.Unlock()
	m.save(s)
	m.deadlineSet()
	v := s.view()
	return &v, nil
}

// deadlineSet tells the reaper that a session's deadline was set, so that it looks again
// for the earliest.
func (m *Manager) deadlineSet() {
	select {
	case m.deadlines <- struct{}{}:
	default: // it will look anyway
	}
}

// endExpired ends, together, the sessions whose deadline is at or before now, and
// returns the earliest deadline still ahead (zero: none).
func (m *Manager) endExpired(ctx context.Context, now time.Time) (next time.Time) {
	all := m.live()
	var wg sync.WaitGroup
	for _, s := range all {
		s.mu.Lock()
		exp := s.expires
		moving := s.moving // it ends where it goes, if it has to
		expired := !s.closed && !moving && !exp.IsZero() && !now.Before(exp)
		if expired {
			// Decided under the lock: a SetLifetime from now on finds the session ended,
			// rather than succeeding just before it ends.
			s.closed = true
		}
		s.mu.Unlock()
		switch {
		case expired:
			wg.Go(func() {
				m.log.Info("ending a session whose lifetime ran out", "session_id", s.id, "tenant", s.tenant)
				m.end(ctx, s.id, EndLifetime)
			})
		case exp.IsZero(), moving:
		case next.IsZero() || exp.Before(next):
			next = exp
		}
	}
	wg.Wait()
	return next
}

package session

import (
	"context"
	"fmt"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// admitIn admits work of kind k in session s (see admission): it returns the session's box,
// the run's context, which ends with ctx, with an Interrupt of the session while the run
// holds its turn, and with Shutdown; and release, which gives back everything it took. It
// counts as activity; while the run holds the turn the session is busy. A paused session
// is resumed first (use).
func (m *Manager) admitIn(ctx context.Context, s *Session, k kind) (_ *box, _ context.Context, release func(), _ error) {
	rctx, admitted, err := m.adm.admit(ctx, s.tenant, k, s.turn)
	if err != nil {
		return nil, nil, nil, err
	}
	_, unuse, err := m.use(rctx, s)
	if err != nil {
		admitted()
		return nil, nil, nil, err
	}
	free := func() {
		unuse()
		admitted()
	}
	turn := uses[k].turn
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		free()
		return nil, nil, nil, fmt.Errorf("session %s ended: %w", s.id, errdefs.ErrNotFound)
	}
	s.busy = s.busy || turn
	s.lastActive = time.Now()
	b := s.box
	s.mu.Unlock()
	var busy *time.Timer
	if turn {
		// The record says busy once the turn has run for busySave; most end sooner.
		busy = time.AfterFunc(busySave, func() { m.saveSoon(s) })
	}
	return b, rctx, func() {
		s.mu.Lock()
		if turn {
			s.busy = false
		}
		s.lastActive = time.Now()
		now := s.mustSave() || s.activityStale()
		s.mu.Unlock()
		switch {
		case !turn:
			m.save(s)
		case !busy.Stop() || now: // busy written or being written, or activity saveEvery old
			m.saveSoon(s)
		}
		free()
	}, nil
}

// current returns the session's box, for a call that uses it already (use), as it is now:
// replaced, maybe, since the call began. It counts as activity.
func (m *Manager) current(s *Session) *box {
	s.mu.Lock()
	s.lastActive = time.Now()
	b := s.box
	stale := s.activityStale()
	s.mu.Unlock()
	if stale {
		m.saveSoon(s)
	}
	return b
}

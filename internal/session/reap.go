package session

import (
	"context"
	"errors"
	"time"

	"github.com/cellbox/cellbox/api"
)

// reap ends idle sessions (every 2 s) and those past their deadline (at once: a timer to
// the earliest, set again whenever a deadline is set), and sweeps old workspaces.
func (m *Manager) reap(ctx context.Context) {
	defer m.bg.Done()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	expiry := time.NewTimer(0) // restored sessions may be past their deadline already
	defer expiry.Stop()
	lastSweep := time.Now() // New swept
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.deadlines:
		case <-expiry.C:
		case now := <-tick.C:
			m.endIdle(ctx, now)
			if now.Sub(lastSweep) > 10*time.Minute {
				lastSweep = now
				m.sweep(ctx)
			}
		}
		// Every round, so that a jump of the wall clock (restored deadlines have no
		// monotonic reading) is caught within a tick.
		if next := m.endExpired(ctx, time.Now()); next.IsZero() {
			expiry.Stop()
		} else {
			expiry.Reset(time.Until(next))
		}
	}
}

// endIdle ends (or pauses, as their idle action says) the sessions idle at now, and ends
// those paused past --paused-retention. A session is ended or paused only while the reaper
// holds its turn: one that an execution or command took meanwhile is left alone, and so is
// one where a spawned program runs. Pauses go on in the background, at most pausesAtOnce
// at a time, each holding its session's turn until it is done.
func (m *Manager) endIdle(ctx context.Context, now time.Time) {
	all := m.live()
	for _, s := range all {
		if !s.turn.tryTake() {
			continue // something runs: not idle
		}
		s.mu.Lock()
		paused := !s.pausedAt.IsZero()
		idle := !s.closed && !paused && s.turn.spawning() == 0 && now.Sub(s.lastActive) > s.idle
		expired := !s.closed && paused && !s.moving && now.Sub(s.pausedAt) > m.cfg.PausedRetention
		pause := idle && s.idleAction == api.IdleActionPause
		s.mu.Unlock()
		switch {
		case expired:
			m.log.Info("ending a session paused for longer than --paused-retention", "session_id", s.id)
			m.end(ctx, s.id, EndPausedRetention)
		case pause:
			if m.pauseIdle(ctx, s) {
				continue // the pause gives the turn back
			}
		case idle:
			m.log.Info("ending idle session", "session_id", s.id)
			m.end(ctx, s.id, EndIdle)
		}
		s.turn.give()
	}
}

// pausesAtOnce bounds the idle sessions being paused at once: each writes its memory to disk.
const pausesAtOnce = 2

// pauseIdle pauses idle session s, whose turn the reaper holds, in the background, and
// reports whether it began (the pause then gives the turn back). One that cannot be paused
// ends, as an idle session does; one with a file call in flight is left for the next round.
func (m *Manager) pauseIdle(ctx context.Context, s *Session) bool {
	select {
	case m.pausing <- struct{}{}:
	default:
		return false // as many pauses as there may be: the next round
	}
	done, ok := m.adm.track()
	if !ok {
		<-m.pausing
		return false
	}
	go func() {
		defer done()
		defer func() { <-m.pausing }()
		defer s.turn.give()
		err := m.pauseHeld(ctx, s, false)
		switch {
		case err == nil, errors.Is(err, errBusy):
		default:
			m.log.Warn("an idle session could not be paused; it ends", "session_id", s.id, "err", err)
			m.end(ctx, s.id, EndIdle)
		}
	}()
	return true
}

// sweep deletes the workspaces whose retention has passed.
func (m *Manager) sweep(ctx context.Context) {
	if n, err := m.store.Sweep(ctx, m.cfg.Retention); err != nil {
		m.log.Warn("sweep workspaces", "err", err)
	} else if n > 0 {
		m.log.Info("removed old workspaces", "count", n)
	}
}

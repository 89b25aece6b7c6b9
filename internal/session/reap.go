package session

import (
	"context"
	"time"
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

// endIdle ends the sessions idle at now. A session is ended only while the reaper holds its
// turn: one that an execution or command took meanwhile is left alone, and so is one where
// a spawned program runs.
func (m *Manager) endIdle(ctx context.Context, now time.Time) {
	all := m.live()
	for _, s := range all {
		if !s.turn.tryTake() {
			continue // something runs: not idle
		}
		s.mu.Lock()
		idle := !s.closed && s.turn.spawning() == 0 && now.Sub(s.lastActive) > s.idle
		s.mu.Unlock()
		if idle {
			m.log.Info("ending idle session", "session_id", s.id)
			m.end(ctx, s.id, EndIdle)
		}
		s.turn.give()
	}
}

// sweep deletes the workspaces whose retention has passed.
func (m *Manager) sweep(ctx context.Context) {
	if n, err := m.store.Sweep(ctx, m.cfg.Retention); err != nil {
		m.log.Warn("sweep workspaces", "err", err)
	} else if n > 0 {
		m.log.Info("removed old workspaces", "count", n)
	}
}

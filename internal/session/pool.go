package session

import (
	"context"
	"time"
)

// wakePool asks the pool filler to look again.
func (m *Manager) wakePool() {
	select {
	case m.poolWake <- struct{}{}:
	default:
	}
}

// takePool returns a live warm box, or nil when none is ready.
func (m *Manager) takePool() *box {
	defer m.wakePool()
	for {
		m.mu.Lock()
		if len(m.pool) == 0 {
			m.mu.Unlock()
			return nil
		}
		b := m.pool[0]
		m.pool = m.pool[1:]
		m.mu.Unlock()
		if b.alive() {
			return b
		}
		m.log.Warn("warm sandbox died while waiting; discarding it", "sandbox_id", b.id)
		go m.discard(context.Background(), b, false)
	}
}

// fillPool keeps PoolSize warm boxes ready, one start at a time, backing off on failure.
func (m *Manager) fillPool(ctx context.Context) {
	defer m.bg.Done()
	backoff := time.Second
	for {
		m.mu.Lock()
		need := !m.closed && len(m.pool) < m.cfg.PoolSize
		m.mu.Unlock()
		if !need {
			select {
			case <-ctx.Done():
				return
			case <-m.poolWake:
				continue
			}
		}
		b, err := m.startBox(ctx, newID(), m.defaults(), nil, "")
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.log.Error("start warm sandbox", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, time.Minute)
			continue
		}
		backoff = time.Second
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			m.discard(ctx, b, false)
			return
		}
		m.pool = append(m.pool, b)
		m.mu.Unlock()
	}
}

// reap ends idle sessions and sweeps old workspaces.
func (m *Manager) reap(ctx context.Context) {
	defer m.bg.Done()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	lastSweep := time.Now() // New swept
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			m.mu.Lock()
			var idle []string
			for id, s := range m.sessions {
				s.mu.Lock()
				if !s.busy && now.Sub(s.lastActive) > s.idle {
					idle = append(idle, id)
				}
				s.mu.Unlock()
			}
			m.mu.Unlock()
			for _, id := range idle {
				m.log.Info("ending idle session", "session_id", id)
				m.end(ctx, id)
			}
			if now.Sub(lastSweep) > 10*time.Minute {
				lastSweep = now
				m.sweep(ctx)
			}
		}
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

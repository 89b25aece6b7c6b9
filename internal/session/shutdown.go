package session

import (
	"context"
	"errors"
	"sync"
)

// Shutdown refuses new work, ends every run (cells are interrupted, commands killed; their
// callers get their results) and waits for them until ctx ends. Then, when sessions
// outlive the server (see New), it lets go of their sandboxes, which run on for the next
// server process; else it ends every session, keeping its workspace. Warm sandboxes are
// stopped either way. The Manager is unusable afterwards.
func (m *Manager) Shutdown(ctx context.Context) error {
	if !m.adm.close() { // from now on no work is admitted, and the runs are cancelled
		return nil
	}
	m.stopBg()
	m.bg.Wait()
	// Runs, one-shots' sandboxes being stopped and records being written.
	if !m.adm.wait(ctx) {
		m.log.Warn("shutdown: runs still going when time ran out; going on without them")
	}

	// The sessions left now: the reaper (idle, deadlines) may have ended some until it
	// stopped, and no session starts once closed is set.
	all := m.live()

	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.keep {
				m.detach(ctx, s)
				return
			}
			if err := m.end(ctx, s.id, EndServerExit); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	for _, p := range m.pools {
		for _, b := range p.close() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.discard(ctx, b, false)
			}()
		}
	}
	wg.Wait()
	m.events.close()
	return errors.Join(errs...)
}

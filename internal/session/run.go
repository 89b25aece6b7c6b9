package session

import (
	"context"
	"fmt"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// run is one execution or command, a one-shot's included. Its context is its caller's:
// the caller going away ends it, and so do an Interrupt of its session and Shutdown. The
// guest protocol client turns that end into an interrupt addressed to the run, which the
// guest keeps even when it overtakes the run.
type run struct {
	cancel context.CancelFunc
}

// startRun registers a run whose context ends with ctx or at cancel. end unregisters it;
// Shutdown waits for every registered run to end. After Shutdown began no run starts.
func (m *Manager) startRun(ctx context.Context) (_ context.Context, _ *run, end func(), _ error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &run{cancel: cancel}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		cancel()
		return nil, nil, nil, fmt.Errorf("the server is shutting down: %w", errdefs.ErrUnavailable)
	}
	m.runs[r] = true
	m.running.Add(1)
	m.mu.Unlock()
	return ctx, r, func() {
		m.mu.Lock()
		delete(m.runs, r)
		m.mu.Unlock()
		cancel()
		m.running.Done()
	}, nil
}

package guest

import (
	"context"
	"sync"
)

// maxEarly bounds the interrupts remembered for runs that have not arrived yet.
const maxEarly = 256

// runs tracks the guest's runs (cells and commands) by the id the server gave each, so that
// an interrupt finds its run whether it arrives while the run is going, or before it: the
// server sends them on separate streams, and either may be first.
type runs struct {
	mu    sync.Mutex
	live  map[string]context.CancelFunc
	early map[string]bool // interrupted before they started
	order []string        // of early, oldest first
}

func newRuns() *runs {
	return &runs{live: map[string]context.CancelFunc{}, early: map[string]bool{}}
}

// start registers run id and returns its context, which ends with ctx (the caller's
// stream), at an interrupt naming id, or at once if one came earlier. end unregisters it.
func (r *runs) start(ctx context.Context, id string) (_ context.Context, end func()) {
	ctx, cancel := context.WithCancel(ctx)
	if id == "" {
		return ctx, cancel
	}
	r.mu.Lock()
	if r.early[id] {
		delete(r.early, id)
		cancel()
	} else {
		r.live[id] = cancel
	}
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		delete(r.live, id)
		r.mu.Unlock()
		cancel()
	}
}

// interrupt ends run id, or remembers that it is to end as soon as it starts.
func (r *runs) interrupt(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cancel, ok := r.live[id]; ok {
		cancel()
		return
	}
	if r.early[id] {
		return
	}
	if len(r.order) >= maxEarly {
		delete(r.early, r.order[0])
		r.order = r.order[1:]
	}
	r.early[id] = true
	r.order = append(r.order, id)
}

package session

import (
	"context"
	"sync"
)

// starts bounds how many sandboxes start at once. A start is mostly CPU (the runtime, the
// guest, the kernel's fork): past about two per core, more at once only slow each other,
// and a burst of a hundred that all start together all finish late. Requests waiting for
// a sandbox go first, in the order they came; the warm pools' refills take what is left.
type starts struct {
	mu         sync.Mutex
	free       int
	urgent     []chan struct{} // waiters, oldest first; a send (close) grants a slot
	background []chan struct{}
}

func newStarts(n int) *starts { return &starts{free: max(1, n)} }

// acquire waits for a slot: urgent for a request that waits for the sandbox, else a
// refill. It returns the slot's release, or ctx's error.
func (s *starts) acquire(ctx context.Context, urgent bool) (func(), error) {
	s.mu.Lock()
	if s.free > 0 && len(s.urgent) == 0 && (urgent || len(s.background) == 0) {
		s.free--
		s.mu.Unlock()
		return s.release, nil
	}
	ch := make(chan struct{})
	q := &s.background
	if urgent {
		q = &s.urgent
	}
	*q = append(*q, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return s.release, nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, c := range *q {
			if c == ch {
				*q = append((*q)[:i:i], (*q)[i+1:]...)
				return nil, ctx.Err()
			}
		}
		// Granted meanwhile: pass the slot on.
		s.releaseLocked()
		return nil, ctx.Err()
	}
}

func (s *starts) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

// releaseLocked hands the slot to the oldest urgent waiter, else the oldest refill, else
// frees it.
func (s *starts) releaseLocked() {
	for _, q := range []*[]chan struct{}{&s.urgent, &s.background} {
		if len(*q) > 0 {
			ch := (*q)[0]
			*q = (*q)[1:]
			close(ch)
			return
		}
	}
	s.free++
}

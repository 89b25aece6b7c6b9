package session

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// pool keeps up to size ready boxes, started one at a time by its run loop, and hands each
// out exactly once. A box is owned by the pool while it waits, then by whoever took it, or
// by close's caller: the pool never stops a box it handed out.
type pool struct {
	size    int
	start   func(context.Context) (*box, error)
	discard func(*box) // for boxes that died waiting, and those started after close
	log     *slog.Logger
	// after is the pool's clock for its refill delay and backoff: time.After, a fake in tests.
	after func(time.Duration) <-chan time.Time

	mu     sync.Mutex
	boxes  []*box
	closed bool
	wake   chan struct{}
}

func newPool(size int, start func(context.Context) (*box, error), discard func(*box), log *slog.Logger) *pool {
	return &pool{size: size, start: start, discard: discard, log: log, after: time.After, wake: make(chan struct{}, 1)}
}

// len is the number of boxes waiting.
func (p *pool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.boxes)
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns a live box, now the caller's, or nil when none is ready (or the pool is
// closed). Dead boxes it finds on the way are discarded.
func (p *pool) take() *box {
	defer p.poke()
	for {
		p.mu.Lock()
		if p.closed || len(p.boxes) == 0 {
			p.mu.Unlock()
			return nil
		}
		b := p.boxes[0]
		p.boxes = p.boxes[1:]
		p.mu.Unlock()
		if b.alive() {
			return b
		}
		p.log.Warn("warm sandbox died while waiting; discarding it", "sandbox_id", b.id)
		go p.discard(b)
	}
}

// put adds a box, unless the pool is closed or full: then it reports false and the box is
// still the caller's.
func (p *pool) put(b *box) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.boxes) >= p.size {
		return false
	}
	p.boxes = append(p.boxes, b)
	return true
}

// refillDelay is how long the pool waits after a box is taken before it starts the next,
// while it still holds one: the taker's first cell runs now, and a sandbox's start beside it
// (the runtime, the guest, the kernel's fork) would take the CPU it needs.
const refillDelay = 250 * time.Millisecond

// run keeps the pool filled until ctx ends, one start at a time, backing off on failure.
func (p *pool) run(ctx context.Context) {
	backoff := time.Second
	for {
		p.mu.Lock()
		need := !p.closed && len(p.boxes) < p.size
		some := len(p.boxes) > 0
		p.mu.Unlock()
		if !need {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
				continue
			}
		}
		if some {
			select {
			case <-ctx.Done():
				return
			case <-p.after(refillDelay):
			}
		}
		b, err := p.start(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Error("start warm sandbox", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-p.after(backoff):
			}
			backoff = min(backoff*2, time.Minute)
			continue
		}
		backoff = time.Second
		if !p.put(b) {
			p.discard(b)
		}
	}
}

// close stops handing out boxes and returns those waiting, now the caller's.
func (p *pool) close() []*box {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	left := p.boxes
	p.boxes = nil
	return left
}

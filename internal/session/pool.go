package session

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// pool keeps ready boxes and hands each out exactly once. A box is owned by the pool while
// it waits, then by whoever took it, or by close's caller: the pool never stops a box it
// handed out.
//
// Its size follows demand (see demand): it holds at least min boxes and grows toward the
// most boxes asked of it within one refill window lately, up to max and while room says
// the host has memory to spare; when demand falls away it shrinks back to min.
type pool struct {
	min, max int
	start    func(context.Context) (*box, error)
	discard  func(*box) // for boxes that died waiting, those over target, and those started after close
	// room reports whether the host has memory for more warm boxes than min.
	room func() bool
	log  *slog.Logger
	// after and now are the pool's clock (refill delay, backoff, demand): time.After and
	// time.Now, fakes in tests.
	after func(time.Duration) <-chan time.Time
	now   func() time.Time
	// parallel is how many boxes the pool starts at once.
	parallel int

	mu       sync.Mutex
	boxes    []*box
	starting int
	closed   bool
	demand   demand
	target   int       // the size the pool fills to (see setTarget)
	lastTake time.Time // when the last box was handed out
	failed   time.Time // the last start's failure, zero after a success
	backoff  time.Duration
	hits     int // takes answered and not, since the target was last logged
	misses   int
	wake     chan struct{}
}

// newPool makes a pool of at least lo boxes and at most hi (at least lo).
func newPool(lo, hi int, start func(context.Context) (*box, error), discard func(*box), log *slog.Logger) *pool {
	p := &pool{min: lo, max: max(lo, hi), start: start, discard: discard, log: log,
		room: func() bool { return true }, after: time.After, now: time.Now, parallel: 2,
		wake: make(chan struct{}, 1), backoff: time.Second, target: lo}
	p.demand.init()
	return p
}

// len is the number of boxes waiting.
func (p *pool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.boxes)
}

// size is the number of boxes the pool fills to now.
func (p *pool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns a live box, now the caller's, or nil when none is ready (or the pool is
// closed). Each call is one request for a box, answered or not: the demand the pool's size
// follows. Dead boxes it finds on the way are discarded.
func (p *pool) take() *box {
	defer p.poke()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.demand.add(p.now())
	p.setTargetLocked()
	for !p.closed && len(p.boxes) > 0 {
		b := p.boxes[0]
		p.boxes = p.boxes[1:]
		if b.alive() {
			p.hits++
			p.lastTake = p.now()
			return b
		}
		p.log.Warn("warm sandbox died while waiting; discarding it", "sandbox_id", b.id)
		go p.discard(b)
	}
	p.misses++
	return nil
}

// put adds a box, unless the pool is closed or full: then it reports false and the box is
// still the caller's.
func (p *pool) put(b *box) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.putLocked(b)
}

func (p *pool) putLocked(b *box) bool {
	if p.closed || len(p.boxes) >= p.target {
		return false
	}
	p.boxes = append(p.boxes, b)
	return true
}

// setTargetLocked sets the target from the demand: the most boxes asked for within one
// refill window in the last demandHistory, between min and max; above min only while the
// host has room. A change is logged with the hit rate since the last.
func (p *pool) setTargetLocked() {
	t := p.demand.peak(p.now(), refillWindow)
	t = max(p.min, min(t, p.max))
	if t > p.target && t > p.min && !p.room() {
		t = max(p.min, p.target) // no growth while memory is short; shrinking goes on
	}
	if t == p.target {
		return
	}
	level := slog.LevelInfo
	if t < p.target {
		level = slog.LevelDebug
	}
	p.log.Log(context.Background(), level, "warm pool resized", "from", p.target, "to", t, "ready", len(p.boxes),
		"hits", p.hits, "misses", p.misses)
	p.target = t
	p.hits, p.misses = 0, 0
}

// refillDelay is how long after a box is taken the pool waits before it starts the next,
// while it still holds one: the taker's first cell runs now, and a sandbox's start beside it
// (the runtime, the guest, the kernel's fork) would take the CPU it needs. An empty pool
// starts at once: requests are waiting for it.
const refillDelay = 250 * time.Millisecond

// retarget is how often an idle pool looks at its demand again (to shrink as it ages).
const retarget = 10 * time.Second

// run keeps the pool at its target until ctx ends: it starts up to parallel boxes at once,
// backs off after a failure, and stops the boxes over target one at a time.
func (p *pool) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		p.mu.Lock()
		p.setTargetLocked()
		var drop *box
		if !p.closed && len(p.boxes) > p.target {
			drop, p.boxes = p.boxes[len(p.boxes)-1], p.boxes[:len(p.boxes)-1]
		}
		have := len(p.boxes) + p.starting
		// Past its floor, each start looks at the host's memory again: a target set when
		// there was room is not a promise.
		need := !p.closed && have < p.target && p.starting < p.parallel && (have < p.min || p.room())
		var wait, settle time.Duration
		if need && !p.failed.IsZero() {
			wait = p.failed.Add(p.backoff).Sub(p.now())
		}
		if len(p.boxes) > 0 && !p.lastTake.IsZero() {
			settle = p.lastTake.Add(refillDelay).Sub(p.now())
		}
		p.mu.Unlock()
		if drop != nil {
			p.discard(drop)
			continue
		}
		if !need || wait > 0 {
			d := retarget
			if need {
				d = wait
			}
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			case <-p.after(d):
			}
			continue
		}
		if settle > 0 {
			select {
			case <-ctx.Done():
				return
			case <-p.after(settle):
			}
			continue // the pool may have changed meanwhile
		}
		p.mu.Lock()
		p.starting++
		p.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.poke()
			b, err := p.start(ctx)
			p.mu.Lock()
			p.starting--
			switch {
			case err != nil && ctx.Err() == nil:
				if !p.failed.IsZero() {
					p.backoff = min(p.backoff*2, time.Minute)
				}
				p.failed = p.now()
				p.log.Error("start warm sandbox", "err", err, "retry_in", p.backoff)
			case err == nil:
				p.failed, p.backoff = time.Time{}, time.Second
			}
			// Put in the same hold of the lock that ends the start, so that the loop never
			// counts the box neither as starting nor as waiting (and starts one too many).
			kept := err == nil && p.putLocked(b)
			p.mu.Unlock()
			if err == nil && !kept {
				p.discard(b)
			}
		}()
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

// Demand: how many boxes were asked of a pool, in buckets of demandBucket over the last
// demandHistory. The pool's target is the most asked within any refillWindow of that
// history: a burst of 100 sessions at once makes the pool keep 100 ready for the next
// 10 minutes, a session every few seconds keeps it at its minimum.
const (
	demandBucket  = 250 * time.Millisecond
	demandHistory = 10 * time.Minute
	// refillWindow is about how long the pool takes to start a box when sandboxes start
	// beside each other: demand within it is what the pool must hold already.
	refillWindow = time.Second
)

type demand struct {
	counts []int32   // a ring of buckets; counts[i] is bucket number i mod len
	last   int64     // the newest bucket's number
	origin time.Time // bucket 0 starts a history before the first time seen
}

func (d *demand) init() {
	d.counts = make([]int32, demandHistory/demandBucket)
}

// bucketOf is t's bucket number, counted on the clock's monotonic reading where it has one
// (a step of the wall clock moves no bucket); never below 0 (older times are in bucket 0).
func (d *demand) bucketOf(t time.Time) int64 {
	if d.origin.IsZero() {
		d.origin = t.Add(-demandHistory)
	}
	return max(0, int64(t.Sub(d.origin)/demandBucket))
}

// advance clears the buckets between the newest one and t's.
func (d *demand) advance(t time.Time) int64 {
	b := d.bucketOf(t)
	if b > d.last {
		for i := d.last + 1; i <= b && i <= d.last+int64(len(d.counts)); i++ {
			d.counts[i%int64(len(d.counts))] = 0
		}
		d.last = b
	}
	return b
}

func (d *demand) add(t time.Time) {
	b := d.advance(t)
	if b <= d.last-int64(len(d.counts)) {
		return // older than the history
	}
	d.counts[b%int64(len(d.counts))]++
}

// peak is the most asked within any window of length w in the history up to t.
func (d *demand) peak(t time.Time, w time.Duration) int {
	d.advance(t)
	n := len(d.counts)
	k := max(1, int(w/demandBucket))
	sum, best := int32(0), int32(0)
	for i := range n {
		sum += d.counts[(d.last-int64(i)+int64(n)*2)%int64(n)]
		if i >= k {
			sum -= d.counts[(d.last-int64(i-k)+int64(n)*2)%int64(n)]
		}
		best = max(best, sum)
	}
	return int(best)
}

package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/testbin"
)

// fakeSandbox is a sandbox.Sandbox that is alive until killed.
type fakeSandbox struct {
	id   string
	done chan struct{}
	once sync.Once
}

func (f *fakeSandbox) ID() string                     { return f.id }
func (f *fakeSandbox) Conn() io.ReadWriteCloser       { return nil }
func (f *fakeSandbox) GuestWorkspace() string         { return "/mnt/data" }
func (f *fakeSandbox) Done() <-chan struct{}          { return f.done }
func (f *fakeSandbox) Stop(ctx context.Context) error { f.kill(); return nil }
func (f *fakeSandbox) Detach() error                  { return nil }
func (f *fakeSandbox) kill()                          { f.once.Do(func() { close(f.done) }) }

var _ sandbox.Sandbox = (*fakeSandbox)(nil)

// fakeBoxes starts numbered fake boxes and counts what is discarded.
type fakeBoxes struct {
	mu        sync.Mutex
	n         int
	discarded map[string]int
	fail      bool
	started   chan string // if not nil, gets each started box's id
}

func (f *fakeBoxes) start(ctx context.Context) (*box, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, errors.New("no")
	}
	f.n++
	id := strconv.Itoa(f.n)
	if f.started != nil {
		f.started <- id
	}
	return &box{id: id, sb: &fakeSandbox{id: id, done: make(chan struct{})}}, nil
}

func (f *fakeBoxes) discard(b *box) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.discarded == nil {
		f.discarded = map[string]int{}
	}
	f.discarded[b.id]++
}

// testPool is a pool of size boxes that does not grow.
func testPool(size int) (*pool, *fakeBoxes) {
	return testPoolUpTo(size, size)
}

func testPoolUpTo(lo, hi int) (*pool, *fakeBoxes) {
	f := &fakeBoxes{}
	return newPool(lo, hi, f.start, f.discard, slog.New(slog.DiscardHandler)), f
}

// instant is a clock on which every wait is already over.
func instant(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

// until waits up to 10 s for cond, failing t with what it waited for.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !testbin.Eventually(10*time.Second, cond) {
		t.Fatalf("waiting for %s: not within 10 s", what)
	}
}

// fill runs p's fill loop until the returned stop, which waits for it to end.
func fill(p *pool) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		p.run(ctx)
		close(ran)
	}()
	return func() { cancel(); <-ran }
}

// manualClock is a clock whose waits end when the test says: after reports each wait asked
// for on asked, and the wait ends on a send to fire.
type manualClock struct {
	asked chan time.Duration
	fire  chan time.Time
}

func newManualClock() *manualClock {
	return &manualClock{asked: make(chan time.Duration), fire: make(chan time.Time)}
}

func (c *manualClock) after(d time.Duration) <-chan time.Time {
	c.asked <- d
	return c.fire
}

// TestPoolHandsOutEachBoxOnce: concurrent takers while the pool fills never get the same box,
// and every box started is handed out, left in the pool, or discarded: none is lost.
func TestPoolHandsOutEachBoxOnce(t *testing.T) {
	p, f := testPool(3)
	// The refill delay is TestPoolWaitsBeforeRefill's: here each reading of the clock is
	// a second after the last, so no wait is due.
	p.after = instant
	var tick atomic.Int64
	p.now = func() time.Time { return time.Unix(tick.Add(1), 0) }
	stop := fill(p)
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 50; {
				if b := p.take(); b != nil {
					mu.Lock()
					got[b.id]++
					mu.Unlock()
					n++
				} else {
					runtime.Gosched()
				}
			}
		}()
	}
	wg.Wait()
	stop()
	left := p.close()
	for id, n := range got {
		if n != 1 {
			t.Errorf("box %s handed out %d times", id, n)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(got)+len(left)+len(f.discarded) != f.n {
		t.Errorf("started %d boxes; handed out %d, left %d, discarded %d", f.n, len(got), len(left), len(f.discarded))
	}
}

// TestPoolWaitsBeforeRefill: a pool starts its boxes at once while none was taken; after a
// take, while it still holds a box, it waits refillDelay before it starts the next, on the
// pool's clock.
func TestPoolWaitsBeforeRefill(t *testing.T) {
	p, f := testPool(2)
	p.parallel = 1
	f.started = make(chan string, 4)
	clock := newManualClock()
	p.after = clock.after
	var now atomic.Int64
	p.now = func() time.Time { return time.Unix(0, now.Load()) }
	defer fill(p)()
	// asked is the next wait the pool asks for, other than its idle one (retarget), which
	// its poke ends.
	asked := func() time.Duration {
		for {
			if d := <-clock.asked; d != retarget {
				return d
			}
		}
	}
	for i := range 2 {
		select {
		case <-f.started:
		case d := <-clock.asked:
			if d != retarget {
				t.Fatalf("filling: the pool waited %v before start %d", d, i+1)
			}
			<-f.started
		}
	}
	until(t, "the pool's two boxes", func() bool { return p.len() == 2 })
	if b := p.take(); b == nil || b.id != "1" {
		t.Fatalf("took %v, want box 1", b)
	}
	if d := asked(); d != refillDelay {
		t.Fatalf("after a take: the pool waited %v, want %v", d, refillDelay)
	}
	select {
	case id := <-f.started:
		t.Fatalf("box %s started before the wait ended", id)
	default:
	}
	now.Add(int64(refillDelay))
	clock.fire <- time.Time{}
	<-f.started
	go func() { // the pool's waits after the test, until it ends
		for range clock.asked {
		}
	}()
}

// TestPoolGrowsWithDemand: a burst of requests makes the pool hold as many boxes, up to its
// max; while the host has no room it stays at its size; once the burst is older than the
// demand's history it shrinks back, stopping the boxes over its size.
func TestPoolGrowsWithDemand(t *testing.T) {
	p, f := testPoolUpTo(1, 8)
	p.after = instant
	var now atomic.Int64
	now.Store(time.Hour.Nanoseconds())
	p.now = func() time.Time { return time.Unix(0, now.Load()) }
	room := atomic.Bool{}
	p.room = room.Load

	for range 5 { // no room: the misses count, the target stays
		if b := p.take(); b != nil {
			t.Fatalf("took %s from a pool that never ran", b.id)
		}
	}
	if got := p.size(); got != 1 {
		t.Fatalf("without room the pool's target is %d, want 1", got)
	}
	room.Store(true)
	for range 6 { // 11 within a second: past the max
		p.take()
	}
	if got := p.size(); got != 8 {
		t.Fatalf("after 11 requests within a second the target is %d, want the max, 8", got)
	}
	defer fill(p)()
	until(t, "8 boxes", func() bool { return p.len() == 8 })
	now.Add((demandHistory + time.Second).Nanoseconds())
	p.poke()
	until(t, "the 7 boxes over the floor stopped", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return p.len() == 1 && len(f.discarded) == 7
	})
	if got := p.size(); got != 1 {
		t.Errorf("after the history the target is %d, want 1", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n != 8 {
		t.Errorf("started %d boxes for a target of 8", f.n)
	}
}

// TestPoolStartsInParallel: a pool below its target starts up to parallel boxes at once, and
// no more.
func TestPoolStartsInParallel(t *testing.T) {
	p, f := testPool(6)
	p.after = instant
	p.parallel = 3
	gate := make(chan struct{})
	var mu sync.Mutex
	running, most := 0, 0
	p.start = func(ctx context.Context) (*box, error) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		<-gate
		mu.Lock()
		running--
		mu.Unlock()
		return f.start(ctx)
	}
	stop := fill(p)
	until(t, "3 starts at once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running == 3
	})
	close(gate)
	until(t, "6 boxes", func() bool { return p.len() == 6 })
	stop()
	if most != 3 {
		t.Errorf("at most %d starts at once, want 3", most)
	}
}

// TestDemandPeak: the peak is the most requests within any window, across buckets, and
// forgets what is older than the history.
func TestDemandPeak(t *testing.T) {
	var d demand
	d.init()
	t0 := time.Unix(1000, 0)
	for i := range 10 { // 10 over 2.5 s
		d.add(t0.Add(time.Duration(i) * demandBucket))
	}
	for range 4 { // 4 in one bucket
		d.add(t0.Add(time.Minute))
	}
	at := t0.Add(2 * time.Minute)
	if got := d.peak(at, time.Second); got != 4 {
		t.Errorf("peak within 1 s: %d, want 4", got)
	}
	if got := d.peak(at, 3*time.Second); got != 10 {
		t.Errorf("peak within 3 s: %d, want 10", got)
	}
	if got := d.peak(t0.Add(demandHistory+2*time.Minute), time.Second); got != 0 {
		t.Errorf("peak after the history: %d, want 0", got)
	}
}

// TestStartsOrder: a freed slot goes to the oldest request that waits for a sandbox, before
// any refill that waited longer; a waiter that gives up takes no slot.
func TestStartsOrder(t *testing.T) {
	s := newStarts(1)
	ctx := context.Background()
	hold, err := s.acquire(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	waiting := func(n int) {
		until(t, fmt.Sprintf("%d waiters", n), func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.urgent)+len(s.background) == n
		})
	}
	get := func(name string, urgent bool) {
		release, err := s.acquire(ctx, urgent)
		if err != nil {
			t.Error(err)
			return
		}
		order <- name
		release()
	}
	go get("refill", false)
	waiting(1)
	gone, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error)
	go func() {
		_, err := s.acquire(gone, true)
		gaveUp <- err
	}()
	waiting(2)
	go get("request", true)
	waiting(3)
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a cancelled waiter got a slot")
	}
	hold()
	if a, b := <-order, <-order; a != "request" || b != "refill" {
		t.Errorf("slots went to %s, then %s; want the request, then the refill", a, b)
	}
	if r, err := s.acquire(ctx, false); err != nil || s.free != 0 {
		t.Errorf("after everyone: acquire %v, %d free", err, s.free)
	} else {
		r()
	}
}

// TestPoolDiscardsDeadBoxes: a box that died waiting is discarded, never handed out.
func TestPoolDiscardsDeadBoxes(t *testing.T) {
	p, f := testPool(2)
	b1, _ := f.start(context.Background())
	b2, _ := f.start(context.Background())
	p.put(b1)
	p.put(b2)
	b1.sb.(*fakeSandbox).kill()
	if b := p.take(); b != b2 {
		t.Fatalf("took %v, want the live box %s", b, b2.id)
	}
	if b := p.take(); b != nil {
		t.Fatalf("took %s from an empty pool", b.id)
	}
	until(t, "the dead box discarded", func() bool { // in the background
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.discarded[b1.id] == 1
	})
}

// TestPoolClose: after close nothing is handed out or taken in; a box that was starting
// when the pool closed is discarded by the run loop, and the waiting ones go to the caller.
func TestPoolClose(t *testing.T) {
	p, f := testPool(2)
	b1, _ := f.start(context.Background())
	if !p.put(b1) {
		t.Fatal("put into an open pool failed")
	}
	left := p.close()
	if len(left) != 1 || left[0] != b1 {
		t.Fatalf("close returned %v", left)
	}
	if b := p.take(); b != nil {
		t.Errorf("take after close: %s", b.id)
	}
	b2, _ := f.start(context.Background())
	if p.put(b2) {
		t.Error("put after close succeeded")
	}
	// The run loop of a closed pool starts nothing.
	stop := fill(p)
	p.poke()
	stop()
	if f.n != 2 {
		t.Errorf("a closed pool started %d boxes", f.n-2)
	}
}

package session

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/sandbox"
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

func testPool(size int) (*pool, *fakeBoxes) {
	f := &fakeBoxes{}
	return newPool(size, f.start, f.discard, slog.New(slog.DiscardHandler)), f
}

// instant is a clock on which every wait is already over.
func instant(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
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
	p.after = instant // the refill delay is TestPoolWaitsBeforeRefill's
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		p.run(ctx)
		close(ran)
	}()
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
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	<-ran
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

// TestPoolWaitsBeforeRefill: an empty pool starts a box at once; one that still holds a box
// waits refillDelay before it starts the next, on the pool's clock.
func TestPoolWaitsBeforeRefill(t *testing.T) {
	p, f := testPool(2)
	f.started = make(chan string, 4)
	clock := newManualClock()
	p.after = clock.after
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		p.run(ctx)
		close(ran)
	}()
	defer func() { cancel(); <-ran }()
	select {
	case <-f.started:
	case d := <-clock.asked:
		t.Fatalf("an empty pool waited %v before its first start", d)
	}
	wait := func(what string) {
		t.Helper()
		if d := <-clock.asked; d != refillDelay {
			t.Fatalf("%s: the pool waited %v, want %v", what, d, refillDelay)
		}
		select {
		case id := <-f.started:
			t.Fatalf("%s: box %s started before the wait ended", what, id)
		default:
		}
		clock.fire <- time.Time{}
		<-f.started
	}
	wait("filling")
	if b := p.take(); b == nil || b.id != "1" {
		t.Fatalf("took %v, want box 1", b)
	}
	wait("after a take")
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
	for ; ; runtime.Gosched() { // the dead box is discarded in the background
		f.mu.Lock()
		n := f.discarded[b1.id]
		f.mu.Unlock()
		if n == 1 {
			break
		}
	}
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
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		p.run(ctx)
		close(ran)
	}()
	p.poke()
	cancel()
	<-ran
	if f.n != 2 {
		t.Errorf("a closed pool started %d boxes", f.n-2)
	}
}

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

// TestPoolHandsOutEachBoxOnce: concurrent takers while the pool fills never get the same box,
// and every box started is handed out, left in the pool, or discarded: none is lost.
func TestPoolHandsOutEachBoxOnce(t *testing.T) {
	p, f := testPool(3)
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

package session

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
)

// TestEventsNeverWait: a subscriber that is stuck, or that waits for the lock the manager
// publishes under (as one calling back into the manager would), holds back neither the
// publisher nor the other subscribers; each gets every event, in order.
func TestEventsNeverWait(t *testing.T) {
	e := newEvents()
	var mu sync.Mutex // stands for Manager.mu, held while publishing
	stuck := make(chan struct{})
	e.subscribe(func(Event) { <-stuck })
	callsBack := make(chan Event, 100)
	e.subscribe(func(ev Event) {
		mu.Lock() // would deadlock if it were called under the publisher's lock
		callsBack <- ev
		mu.Unlock()
	})
	mu.Lock()
	for i := range 50 {
		e.publish(Event{Kind: SessionCreated, SessionID: string(rune('a' + i%26))})
	}
	e.publish(Event{Kind: SessionEnded, SessionID: "z", Reason: EndIdle})
	mu.Unlock()
	for i := range 50 {
		if ev := <-callsBack; ev.Kind != SessionCreated || ev.SessionID != string(rune('a'+i%26)) {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	if ev := <-callsBack; ev.Kind != SessionEnded || ev.Reason != EndIdle {
		t.Fatalf("last event: %+v", ev)
	}
	close(stuck)
}

// TestEventsStopAndClose: after stop nothing more is delivered; close delivers what is
// queued and ends the subscription; a subscription after close hears nothing.
func TestEventsStopAndClose(t *testing.T) {
	e := newEvents()
	stopped := make(chan Event, 10)
	stop := e.subscribe(func(ev Event) { stopped <- ev })
	e.publish(Event{Kind: SessionCreated, SessionID: "a"})
	if ev := <-stopped; ev.SessionID != "a" {
		t.Fatalf("%+v", ev)
	}
	stop()
	stop() // harmless

	gate := make(chan struct{})
	got := make(chan Event, 10)
	e.subscribe(func(ev Event) { <-gate; got <- ev })
	e.publish(Event{Kind: SessionCreated, SessionID: "b"})
	e.publish(Event{Kind: SessionEnded, SessionID: "b", Reason: EndServerExit, Detached: true})
	e.close()
	e.publish(Event{Kind: SessionCreated, SessionID: "c"}) // nobody hears it
	after := make(chan Event, 1)
	e.subscribe(func(ev Event) { after <- ev })
	close(gate)
	if a, b := <-got, <-got; a.SessionID != "b" || b.Kind != SessionEnded || !b.Detached {
		t.Errorf("queued at close: %+v, %+v", a, b)
	}
	select {
	case ev := <-stopped:
		t.Errorf("delivered after stop: %+v", ev)
	case ev := <-got:
		t.Errorf("delivered after close: %+v", ev)
	case ev := <-after:
		t.Errorf("a subscription after close heard %+v", ev)
	default:
	}
}

// TestSessionEvents: the manager tells a subscriber of each session's creation and end,
// with why, in order; the subscriber may call the manager from its callback.
func TestSessionEvents(t *testing.T) {
	m := newManager(t, nil)
	got := make(chan Event, 100)
	m.Subscribe(func(ev Event) {
		m.List(WithTenant(context.Background(), ev.Tenant)) // calls back: no deadlock
		got <- ev
	})
	next := func(t *testing.T, kind EventKind, id string, why EndReason) {
		t.Helper()
		select {
		case ev := <-got:
			if ev.Kind != kind || ev.SessionID != id || ev.Reason != why || ev.Tenant != "alice" {
				t.Fatalf("event %+v, want %v %s %q of alice", ev, kind, id, why)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no %v event of %s", kind, id)
		}
	}
	alice := WithTenant(context.Background(), "alice")
	create := func(t *testing.T) string {
		t.Helper()
		s, err := m.Create(alice, api.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		next(t, SessionCreated, s.ID, "")
		return s.ID
	}

	t.Run("deleted", func(t *testing.T) {
		id := create(t)
		if err := m.Delete(alice, id); err != nil {
			t.Fatal(err)
		}
		next(t, SessionEnded, id, EndDeleted)
	})
	t.Run("idle", func(t *testing.T) {
		id := create(t)
		s, _ := m.lookup(alice, id)
		s.mu.Lock()
		s.lastActive = time.Now().Add(-time.Hour)
		s.mu.Unlock()
		m.endIdle(context.Background(), time.Now())
		next(t, SessionEnded, id, EndIdle)
	})
	t.Run("lifetime", func(t *testing.T) {
		id := create(t)
		s, _ := m.lookup(alice, id)
		s.mu.Lock()
		s.expires = time.Now().Add(-time.Second)
		s.mu.Unlock()
		m.endExpired(context.Background(), time.Now())
		next(t, SessionEnded, id, EndLifetime)
	})
	t.Run("server exit", func(t *testing.T) {
		id := create(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-got:
			if ev.Kind != SessionEnded || ev.SessionID != id || ev.Reason != EndServerExit || ev.Detached != m.keep {
				t.Fatalf("event %+v, want %s ended at server exit, detached %v", ev, id, m.keep)
			}
		case <-time.After(time.Minute):
			t.Fatal("no event at Shutdown")
		}
	})
}

// TestOneEndEvent: a session ended from every side at once (its tenant's Delete, the idle
// reaper, its deadline) ends once, and its subscribers hear of it once, after its creation.
func TestOneEndEvent(t *testing.T) {
	m := newManager(t, nil)
	got := make(chan Event, 100)
	m.Subscribe(func(ev Event) { got <- ev })
	alice := WithTenant(context.Background(), "alice")
	sess, err := m.Create(alice, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.lookup(alice, sess.ID)
	s.mu.Lock()
	s.lastActive, s.expires = time.Now().Add(-time.Hour), time.Now().Add(-time.Second)
	s.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { m.Delete(alice, sess.ID) })
	wg.Go(func() { m.endIdle(context.Background(), time.Now()) })
	wg.Go(func() { m.endExpired(context.Background(), time.Now()) })
	wg.Wait()
	// Each ending told its event before it returned; a marker session's end, told in order
	// after them, shows that every one has been delivered.
	marker, err := m.Create(alice, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(alice, marker.ID); err != nil {
		t.Fatal(err)
	}
	var evs []Event
	for {
		select {
		case ev := <-got:
			if ev.SessionID == sess.ID {
				evs = append(evs, ev)
			}
			if ev.SessionID != marker.ID || ev.Kind != SessionEnded {
				continue
			}
		case <-time.After(time.Minute):
			t.Fatalf("no end of the marker session; events of the other: %+v", evs)
		}
		break
	}
	if len(evs) != 2 || evs[0].Kind != SessionCreated || evs[1].Kind != SessionEnded {
		t.Errorf("events %+v; want created, then ended once", evs)
	}
}

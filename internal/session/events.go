package session

import "sync"

// Session events tell what lives beside a session (a front door's state about it) that the
// session was created or has ended, and why, or that its tools changed, so that nobody
// polls for it.

// EventKind is what happened to a session.
type EventKind int

const (
	// SessionCreated: Create made the session.
	SessionCreated EventKind = iota + 1
	// SessionEnded: the session is gone from this server; Event.Reason says why.
	SessionEnded
	// ToolsChanged: the session's tools changed (a run defined or removed one, its kernel
	// restarted, saved tools were loaded); Manager.Tools has them.
	ToolsChanged
)

func (k EventKind) String() string {
	switch k {
	case SessionCreated:
		return "created"
	case SessionEnded:
		return "ended"
	case ToolsChanged:
		return "tools_changed"
	}
	return "unknown"
}

// EndReason is why a session ended.
type EndReason string

const (
	EndDeleted  EndReason = "deleted"  // Delete, by its tenant
	EndIdle     EndReason = "idle"     // idle past its idle timeout
	EndLifetime EndReason = "lifetime" // its deadline passed (lifetime_s, SetLifetime)
	// EndServerExit: Shutdown. With Event.Detached the session lives on in its sandbox for
	// the next server process (its state beside it should be kept); without, it ended.
	EndServerExit EndReason = "server_exit"
	// EndFailed: its sandbox died and could not be replaced, or, at start, the session of
	// an earlier process could not be restored (before anyone could subscribe: state kept
	// across restarts is checked against the live sessions once at start).
	EndFailed EndReason = "failed"
	// EndPausedRetention: it stayed paused longer than --paused-retention.
	EndPausedRetention EndReason = "paused_retention"
	// EndMoved: it moved to another node of the cluster (a drain), where it lives on.
	EndMoved EndReason = "moved"
)

// Event is something that happened to a session.
type Event struct {
	Kind      EventKind
	SessionID string
	Tenant    string    // the session's owner
	Reason    EndReason // of SessionEnded
	Detached  bool      // of EndServerExit: the session outlives this server process
}

// Subscribe calls f with every session event from now on, until stop. The guarantees:
//   - the manager never waits for f: each subscriber has its own queue (unbounded) and its
//     own goroutine, which calls f with one event at a time, in the order they happened;
//   - so f may call the Manager (even end sessions: those events queue behind), and a
//     slow or stuck f holds back only its own events;
//   - a session's SessionCreated comes before its SessionEnded, and a subscriber that
//     subscribed before a session was created hears both; no event is dropped;
//   - events are told after the fact: a call made between a session's end and f hearing
//     of it finds the session gone (errdefs.ErrNotFound).
//
// After stop, f is not called again, but for a call running at that moment. After
// Shutdown the events of its endings are still delivered, and then the goroutine ends;
// a Subscribe after Shutdown hears nothing.
func (m *Manager) Subscribe(f func(Event)) (stop func()) {
	return m.events.subscribe(f)
}

// events hands every event to every subscriber's queue without waiting.
type events struct {
	mu     sync.Mutex
	subs   map[*subscriber]bool
	closed bool
}

type subscriber struct {
	f    func(Event)
	wake chan struct{} // one pending signal

	mu      sync.Mutex
	queue   []Event
	stopped bool // stop: nothing more is delivered
	closing bool // the manager is done: deliver the queue, then end
}

func newEvents() *events { return &events{subs: map[*subscriber]bool{}} }

func (e *events) subscribe(f func(Event)) (stop func()) {
	s := &subscriber{f: f, wake: make(chan struct{}, 1)}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return func() {}
	}
	e.subs[s] = true
	e.mu.Unlock()
	go s.deliver()
	return func() {
		e.mu.Lock()
		delete(e.subs, s)
		e.mu.Unlock()
		s.mu.Lock()
		s.stopped, s.queue = true, nil
		s.mu.Unlock()
		s.poke()
	}
}

// publish queues ev for every subscriber; it never blocks on one. The manager calls it
// under its own lock, so that the events of a session are queued in the order they happen.
func (e *events) publish(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for s := range e.subs {
		s.mu.Lock()
		if !s.stopped {
			s.queue = append(s.queue, ev)
		}
		s.mu.Unlock()
		s.poke()
	}
}

// close ends every subscription once its queue is delivered.
func (e *events) close() {
	e.mu.Lock()
	e.closed = true
	subs := e.subs
	e.subs = map[*subscriber]bool{}
	e.mu.Unlock()
	for s := range subs {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		s.poke()
	}
}

func (s *subscriber) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) deliver() {
	for range s.wake {
		for {
			s.mu.Lock()
			if s.stopped || len(s.queue) == 0 {
				end := s.stopped || s.closing
				s.mu.Unlock()
				if end {
					return
				}
				break
			}
			ev := s.queue[0]
			s.queue[0] = Event{}
			s.queue = s.queue[1:]
			s.mu.Unlock()
			s.f(ev)
		}
	}
}

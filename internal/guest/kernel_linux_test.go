package guest

import "testing"

// TestStopRunTargets: the stop of a cell that has ended (its caller's context ended just as
// the cell did: context.AfterFunc runs late) never lands on the next cell; a stop of whichever
// runs (a restart) does, but for a run of a kernel's start: its preimport is not ended by a
// restart that raced with it.
func TestStopRunTargets(t *testing.T) {
	k := &kernel{efd: -1}
	ended, next := &cellRun{}, &cellRun{}
	k.run = next
	if k.stopRun(ended, stopInterrupt) || next.stop != stopNone {
		t.Fatalf("a late stop of the cell before stopped the next one: %v", next.stop)
	}
	if !k.stopRun(next, stopInterrupt) || next.stop != stopInterrupt {
		t.Fatalf("the cell's own stop: %v", next.stop)
	}
	other := &cellRun{}
	k.run = other
	if !k.stopRun(nil, stopRestart) || other.stop != stopRestart {
		t.Fatalf("a restart's stop: %v", other.stop)
	}
	preimport := &cellRun{silent: true, startup: true}
	k.run = preimport
	if k.stopRun(nil, stopRestart) || preimport.stop != stopNone {
		t.Fatalf("a restart stopped a kernel's preimport: %v", preimport.stop)
	}
	drop := &cellRun{silent: true} // a context's drop: the user's finalizers run
	k.run = drop
	if k.stopRun(drop, stopInterrupt) || drop.stop != stopNone {
		t.Fatalf("an interrupt stopped a silent run: %v", drop.stop)
	}
	if !k.stopRun(nil, stopRestart) || drop.stop != stopRestart {
		t.Fatalf("a restart did not stop a context's drop: %v", drop.stop)
	}
}

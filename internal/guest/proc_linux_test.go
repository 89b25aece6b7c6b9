package guest

import (
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAdoptAfterAFlood: a process that ended and was reaped before adopt, whose status more
// than maxUnclaimed later ones pushed out (user code's orphans, reaped by the guest as
// process 1), gets an unknown status at once: waiting would wait forever.
func TestAdoptAfterAFlood(t *testing.T) {
	p := &procTable{waiters: map[int]chan unix.WaitStatus{}, adopted: map[int]bool{},
		unclaimed: map[int]unix.WaitStatus{}, reapAll: true}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil { // started, ended and reaped: its pid names nothing now
		t.Fatal(err)
	}
	gone := cmd.Process.Pid
	p.mu.Lock()
	p.deliver(gone, 0)
	for i := range maxUnclaimed + 8 { // a flood pushes its status out
		p.deliver(1<<22+i, 0)
	}
	_, kept := p.unclaimed[gone]
	p.mu.Unlock()
	if kept {
		t.Fatal("the flood did not push the status out; the test proves nothing")
	}
	select {
	case ws := <-p.adopt(gone):
		if ws.Exited() && ws.ExitStatus() == 0 {
			t.Errorf("status %v: want an unknown one, not a clean exit", ws)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("adopt of a process that is gone waits forever")
	}
	// A living process is waited for, not given a status.
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer live.Process.Kill()
	select {
	case ws := <-p.adopt(live.Process.Pid):
		t.Errorf("a living process got status %v", ws)
	case <-time.After(100 * time.Millisecond):
	}
}

package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

// These tests need no kernel: admission counts and registers, nothing more.

var allKinds = map[string]kind{"create": kindCreate, "one-shot": kindOneShot, "execute": kindExecute, "command": kindCommand,
	"restart": kindRestart, "context": kindContext, "spawn": kindSpawn}

// admitted admits k for tenant (in a session with turn t) or fails the test.
func admitted(t *testing.T, a *admission, tenant string, k kind, tn *turn) (context.Context, func()) {
	t.Helper()
	ctx, release, err := a.admit(context.Background(), tenant, k, tn)
	if err != nil {
		t.Fatalf("admit %v for %q: %v", k, tenant, err)
	}
	return ctx, release
}

func exhausted(t *testing.T, err error, flag string) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), flag) {
		t.Errorf("%v; want resource exhausted naming %s", err, flag)
	}
	if err != nil && strings.Contains(err.Error(), "/v1/") {
		t.Errorf("%q names a route of a front door", err)
	}
}

// TestAdmissionTenantRuns: every kind that runs in a sandbox counts against
// --tenant-max-executions (a restart and a context delete too); a new session does not.
// Other tenants are not held back, and a release gives the place back.
func TestAdmissionTenantRuns(t *testing.T) {
	for name, k := range allKinds {
		t.Run(name, func(t *testing.T) {
			a := newAdmission(caps{sessions: 100, tenantRuns: 1}, nil)
			_, release := admitted(t, a, "alice", kindExecute, newTurn())
			_, again, err := a.admit(context.Background(), "alice", k, newTurn())
			if k == kindCreate {
				if err != nil {
					t.Fatalf("a new session at the run cap: %v", err)
				}
				again()
			} else {
				exhausted(t, err, "--tenant-max-executions")
				// What frees a place even from a cell that never ends (a restart is refused too).
				if !strings.Contains(err.Error(), "interrupt or stop one") || !strings.Contains(err.Error(), "end one of your sessions") {
					t.Errorf("%q does not say how to free a place", err)
				}
			}
			_, other := admitted(t, a, "bob", k, newTurn())
			other()
			release()
			_, again = admitted(t, a, "alice", k, newTurn())
			again()
			if len(a.tenants) != 0 || a.sessions != 0 || len(a.runs) != 0 {
				t.Errorf("after every release: tenants %v, %d sessions, %d runs", a.tenants, a.sessions, len(a.runs))
			}
		})
	}
}

// TestAdmissionSessionSlots: a new session and a one-shot take a slot under --max-sessions
// and --tenant-max-sessions; nothing else does.
func TestAdmissionSessionSlots(t *testing.T) {
	a := newAdmission(caps{sessions: 2, tenantSessions: 1}, nil)
	_, alice := admitted(t, a, "alice", kindCreate, nil)
	for _, k := range []kind{kindCreate, kindOneShot} {
		_, _, err := a.admit(context.Background(), "alice", k, nil)
		exhausted(t, err, "--tenant-max-sessions")
	}
	for _, k := range []kind{kindExecute, kindCommand, kindRestart, kindContext, kindSpawn} {
		_, release := admitted(t, a, "alice", k, newTurn())
		release()
	}
	_, bob := admitted(t, a, "bob", kindOneShot, nil)
	_, _, err := a.admit(context.Background(), "carol", kindCreate, nil)
	exhausted(t, err, "maximum of 2 sessions")
	bob()
	bob() // a second release gives back nothing more
	_, carol := admitted(t, a, "carol", kindCreate, nil)
	_, _, err = a.admit(context.Background(), "dave", kindCreate, nil)
	exhausted(t, err, "maximum of 2 sessions")
	alice()
	carol()
	// A restored session is counted whatever the caps.
	held := []func(){a.hold("alice"), a.hold("alice"), a.hold("alice")}
	_, _, err = a.admit(context.Background(), "bob", kindCreate, nil)
	exhausted(t, err, "maximum of 2 sessions")
	for _, release := range held {
		release()
	}
	if len(a.tenants) != 0 || a.sessions != 0 {
		t.Errorf("after every release: tenants %v, %d sessions", a.tenants, a.sessions)
	}
}

// TestAdmissionTurn: the kinds that take the session's turn run one at a time; Interrupt
// (turn.interrupt) ends the holder's run only; a restart interrupts the holder and takes
// the turn after it; a spawn runs beside the turn.
func TestAdmissionTurn(t *testing.T) {
	a := newAdmission(caps{}, nil)
	tn := newTurn()
	first, releaseFirst := admitted(t, a, "", kindExecute, tn)
	_, spawn := admitted(t, a, "", kindSpawn, tn) // beside it

	waiting := make(chan error, 1)
	var second context.Context
	var releaseSecond func()
	go func() {
		var err error
		second, releaseSecond, err = a.admit(context.Background(), "", kindCommand, tn)
		waiting <- err
	}()
	testbin.WaitFor(t, 10*time.Second, "the command to queue", func() error {
		if n := tn.queued(); n != 1 {
			return fmt.Errorf("%d waiting for the turn", n)
		}
		return nil
	})
	tn.interrupt()
	<-first.Done()
	select {
	case err := <-waiting:
		t.Fatalf("a command took the turn while an execution held it: %v", err)
	default:
	}
	releaseFirst()
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	if second.Err() != nil {
		t.Fatal("the interrupt reached the run after the one it was addressed to")
	}
	if n := tn.queued(); n != 0 {
		t.Fatalf("%d waiting for the turn once the command holds it", n)
	}

	restarted := make(chan error, 1)
	go func() {
		_, release, err := a.admit(context.Background(), "", kindRestart, tn)
		if err == nil {
			release()
		}
		restarted <- err
	}()
	<-second.Done() // the restart interrupted the holder
	releaseSecond()
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	spawn()

	// A caller that goes away while it waits for the turn gives everything back.
	_, hold := admitted(t, a, "", kindExecute, tn)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := a.admit(ctx, "", kindContext, tn); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting with a cancelled context: %v", err)
	}
	hold()
	if len(a.runs) != 0 || len(a.tenants) != 0 || tn.queued() != 0 || tn.tryTake() == false {
		t.Errorf("after every release: %d runs, tenants %v, %d waiting for the turn, turn free: false", len(a.runs), a.tenants, tn.queued())
	}
}

func TestAdmissionSpawnPlaces(t *testing.T) {
	a := newAdmission(caps{}, nil)
	tn := newTurn()
	var releases []func()
	for range maxSpawns {
		_, release := admitted(t, a, "", kindSpawn, tn)
		releases = append(releases, release)
	}
	_, _, err := a.admit(context.Background(), "", kindSpawn, tn)
	exhausted(t, err, "16 programs")
	if len(a.tenants) != 1 || a.tenants[""].runs != maxSpawns {
		t.Errorf("a refused spawn kept its count: %v", a.tenants)
	}
	for _, release := range releases {
		release()
	}
	if tn.spawning() != 0 || len(a.tenants) != 0 {
		t.Errorf("after every release: %d spawns, tenants %v", tn.spawning(), a.tenants)
	}
}

// TestAdmissionClose: close cancels every run, admits nothing more (a run waiting for its
// turn included), and wait returns once every run and tracked piece of work is done.
func TestAdmissionClose(t *testing.T) {
	a := newAdmission(caps{}, nil)
	tn := newTurn()
	running, release := admitted(t, a, "", kindExecute, tn)
	waiting := make(chan error, 1)
	go func() {
		_, _, err := a.admit(context.Background(), "", kindExecute, tn)
		waiting <- err
	}()
	testbin.WaitFor(t, 10*time.Second, "the second run to queue", func() error {
		if n := tn.queued(); n != 1 {
			return fmt.Errorf("%d waiting for the turn", n)
		}
		return nil
	})
	done, ok := a.track()
	if !ok {
		t.Fatal("track before close")
	}
	if !a.close() || a.close() {
		t.Fatal("close reports wrongly whether it closed")
	}
	<-running.Done()
	if err := <-waiting; !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a run waiting for its turn at close: %v, want unavailable", err)
	}
	for name, k := range allKinds {
		if _, _, err := a.admit(context.Background(), "", k, newTurn()); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("%s after close: %v, want unavailable", name, err)
		}
	}
	expired, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if a.wait(expired) {
		t.Fatal("wait returned with a run and tracked work in flight")
	}
	more, ok := a.track() // while something is in flight, Shutdown still waits
	if !ok {
		t.Fatal("track refused while Shutdown waits")
	}
	release()
	done()
	more()
	if !a.wait(context.Background()) {
		t.Fatal("wait")
	}
	if _, ok := a.track(); ok {
		t.Error("track after Shutdown stopped waiting: the caller must do the work itself")
	}
}

// TestAdmissionMetrics: cellbox_tenant_executions_total counts executions (one-shots
// included) and commands (spawns included), as before restarts and context deletes were
// admitted too.
func TestAdmissionMetrics(t *testing.T) {
	got := map[string]int{}
	a := newAdmission(caps{}, func(tenant, kind string) { got[tenant+"/"+kind]++ })
	for _, k := range allKinds {
		_, release := admitted(t, a, "alice", k, newTurn())
		release()
	}
	if want := map[string]int{"alice/execute": 2, "alice/command": 2}; len(got) != len(want) || got["alice/execute"] != 2 || got["alice/command"] != 2 {
		t.Errorf("counted %v, want %v", got, want)
	}
}

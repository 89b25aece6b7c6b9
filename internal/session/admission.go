package session

import (
	"context"
	"fmt"
	"sync"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// Admission: every kind of work the manager does for a caller passes admission.admit, which
// counts what the work uses against the server's and the tenant's caps, registers its run,
// takes the session's turn or one of its places for spawned programs, and hands back the
// run's context and one release. Nothing else counts work: a kind that is not in the table
// below escapes no cap because it has no other way in.
//
//	kind      session slot  tenant run  run  turn           spawn place
//	create    yes (*)       -           -    -              -
//	one-shot  yes           yes         yes  -              -
//	execute   -             yes         yes  yes            -
//	command   -             yes         yes  yes            -
//	restart   -             yes         yes  yes (**)       -
//	context   -             yes         yes  yes            -
//	spawn     -             yes         yes  -              yes
//	pause     -             yes         yes  yes            -
//	ask       -             yes         yes  yes            -
//
// (*) held by the session until it ends: its release is the session's (Session.slot).
// (**) after interrupting whatever holds it.
//
// A session slot counts against --max-sessions and --tenant-max-sessions, a tenant run
// against --tenant-max-executions (while the run waits for its turn too). A run is what
// Shutdown cancels and waits for; its context is the caller's, so the caller going away
// ends it too, and Interrupt cancels the run that holds the session's turn.

// kind is a kind of work.
type kind int

const (
	kindCreate kind = iota
	kindOneShot
	kindExecute
	kindCommand
	kindRestart
	kindContext
	kindSpawn
	kindPause
	kindAsk // a question to the kernel: complete, inspect, is_complete
)

// uses is what each kind takes.
var uses = map[kind]struct {
	slot, tenantRun, run, turn, spawn bool
	metric                            string // its kind in cellbox_tenant_executions_total; "": not counted there
}{
	kindCreate:  {slot: true},
	kindOneShot: {slot: true, tenantRun: true, run: true, metric: "execute"},
	kindExecute: {tenantRun: true, run: true, turn: true, metric: "execute"},
	kindCommand: {tenantRun: true, run: true, turn: true, metric: "command"},
	kindRestart: {tenantRun: true, run: true, turn: true},
	kindContext: {tenantRun: true, run: true, turn: true},
	kindSpawn:   {tenantRun: true, run: true, spawn: true, metric: "command"},
	kindPause:   {tenantRun: true, run: true, turn: true},
	kindAsk:     {tenantRun: true, run: true, turn: true},
}

// caps are the limits admission enforces; 0: none.
type caps struct {
	sessions       int // --max-sessions
	tenantSessions int // --tenant-max-sessions
	tenantRuns     int // --tenant-max-executions
}

// run is one piece of work in flight that Shutdown cancels and waits for: an execution, a
// command, a restart, ... (see admit). Its context is its caller's: the caller going away
// ends it, and so do an Interrupt of its session (when it holds the turn) and Shutdown.
// The guest protocol client turns that end into an interrupt addressed to the run, which
// the guest keeps even when it overtakes the run.
type run struct {
	cancel context.CancelFunc
}

// admission counts and registers work; see the table above. Its zero value is not usable:
// see newAdmission.
type admission struct {
	caps    caps
	started func(tenant, kind string) // a run of a metric kind was admitted (metrics)

	mu       sync.Mutex
	closed   bool
	sessions int            // slots held: live sessions, sessions being created, one-shots
	tenants  map[string]use // by tenant
	runs     map[*run]bool
	inflight int           // runs and tracked work (track)
	drained  chan struct{} // closed once closed and nothing is in flight
}

// use is what one tenant holds.
type use struct{ sessions, runs int }

func newAdmission(c caps, started func(tenant, kind string)) *admission {
	if started == nil {
		started = func(string, string) {}
	}
	return &admission{caps: c, started: started, tenants: map[string]use{}, runs: map[*run]bool{}, drained: make(chan struct{})}
}

var errShuttingDown = fmt.Errorf("the server is shutting down: %w", errdefs.ErrUnavailable)

// admit admits work of kind k for tenant, in the session whose turn is t (nil for the
// kinds that take neither the turn nor a spawn place). It returns the run's context (ctx
// itself for a kind without a run) and the release, which gives back everything taken;
// it is safe to call more than once. Past a cap it fails with errdefs.ErrResourceExhausted,
// after Shutdown began with errdefs.ErrUnavailable.
func (a *admission) admit(ctx context.Context, tenant string, k kind, t *turn) (_ context.Context, release func(), _ error) {
	u := uses[k]
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, nil, errShuttingDown
	}
	tu := a.tenants[tenant]
	if u.slot {
		if err := a.slotFull(tu); err != nil {
			a.mu.Unlock()
			return nil, nil, err
		}
		a.sessions++
		tu.sessions++
	}
	if u.tenantRun {
		if max := a.caps.tenantRuns; max > 0 && tu.runs >= max {
			if u.slot {
				a.sessions-- // tu, counting it too, is not stored
			}
			a.mu.Unlock()
			return nil, nil, fmt.Errorf("you run %d executions and commands at once (restarts, context deletes and completions count too), "+
				"this server's maximum per API key (--tenant-max-executions): interrupt or stop one of them (a cell that ignores "+
				"the interrupt has its kernel restarted after the grace period) or end one of your sessions, then try again: %w",
				max, errdefs.ErrResourceExhausted)
		}
		tu.runs++
	}
	a.tenants[tenant] = tu
	rctx := ctx
	var r *run
	if u.run {
		var cancel context.CancelFunc
		rctx, cancel = context.WithCancel(ctx)
		r = &run{cancel: cancel}
		a.runs[r] = true
		a.inflight++
	}
	a.mu.Unlock()
	if u.metric != "" {
		a.started(tenant, u.metric)
	}

	var once sync.Once
	var give func() // gives back the turn or the spawn place
	release = func() {
		once.Do(func() {
			if give != nil {
				give()
			}
			if r != nil {
				r.cancel()
			}
			a.mu.Lock()
			tu := a.tenants[tenant]
			if u.slot {
				a.sessions--
				tu.sessions--
			}
			if u.tenantRun {
				tu.runs--
			}
			a.setUse(tenant, tu)
			if r != nil {
				delete(a.runs, r)
				a.done()
			}
			a.mu.Unlock()
		})
	}
	switch {
	case u.turn:
		if k == kindRestart {
			t.interrupt()
		}
		if err := t.take(rctx, r); err != nil {
			release()
			if a.isClosed() {
				return nil, nil, errShuttingDown
			}
			return nil, nil, fmt.Errorf("waiting for the session's running execution to finish: %w", err)
		}
		give = t.give
		if a.isClosed() { // Shutdown began while it waited: it cancelled the runs it knew of
			release()
			return nil, nil, errShuttingDown
		}
	case u.spawn:
		if err := t.spawn(); err != nil {
			release()
			return nil, nil, err
		}
		give = t.spawned
	}
	return rctx, release, nil
}

// slotFull refuses a session slot past --max-sessions or --tenant-max-sessions; a.mu is
// held. The messages say what to do, not how: each front door has its own way to end a
// session.
func (a *admission) slotFull(tu use) error {
	if max := a.caps.sessions; max > 0 && a.sessions >= max {
		return fmt.Errorf("this server runs its maximum of %d sessions: end one of your sessions or retry later: %w",
			max, errdefs.ErrResourceExhausted)
	}
	if max := a.caps.tenantSessions; max > 0 && tu.sessions >= max {
		return fmt.Errorf("you have %d sessions (one-shot executions count too), this server's maximum per API key "+
			"(--tenant-max-sessions): end one of your sessions or retry later: %w", max, errdefs.ErrResourceExhausted)
	}
	return nil
}

func (a *admission) freeSlot(tenant string) {
	a.mu.Lock()
	tu := a.tenants[tenant]
	a.sessions--
	tu.sessions--
	a.setUse(tenant, tu)
	a.mu.Unlock()
}

// hold counts a session that exists without having been admitted (one restored from an
// earlier server process), whatever the caps; the release is the session's.
func (a *admission) hold(tenant string) (release func()) {
	a.mu.Lock()
	tu := a.tenants[tenant]
	a.sessions++
	tu.sessions++
	a.tenants[tenant] = tu
	a.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { a.freeSlot(tenant) }) }
}

// takeSlot takes a slot for a session that exists already (one resumed from a pause),
// within the caps; the release is the session's.
func (a *admission) takeSlot(tenant string) (release func(), _ error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, errShuttingDown
	}
	tu := a.tenants[tenant]
	if err := a.slotFull(tu); err != nil {
		a.mu.Unlock()
		return nil, err
	}
	a.sessions++
	tu.sessions++
	a.tenants[tenant] = tu
	a.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { a.freeSlot(tenant) }) }, nil
}

// setUse stores tu, dropping a tenant that holds nothing; a.mu is held.
func (a *admission) setUse(tenant string, tu use) {
	if tu == (use{}) {
		delete(a.tenants, tenant)
		return
	}
	a.tenants[tenant] = tu
}

// track counts work that Shutdown waits for besides runs (a record being written, a
// one-shot's sandbox being stopped). It reports false once Shutdown began and nothing is
// in flight any more: the caller then does the work itself, at once.
func (a *admission) track() (done func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed && a.inflight == 0 {
		return nil, false
	}
	a.inflight++
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			a.done()
			a.mu.Unlock()
		})
	}, true
}

// done ends one piece of work in flight; a.mu is held.
func (a *admission) done() {
	if a.inflight--; a.inflight == 0 && a.closed {
		close(a.drained)
	}
}

func (a *admission) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// close refuses all work from now on and cancels every run; it reports false when it was
// closed already.
func (a *admission) close() bool {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return false
	}
	a.closed = true
	runs := make([]*run, 0, len(a.runs))
	for r := range a.runs {
		runs = append(runs, r)
	}
	if a.inflight == 0 {
		close(a.drained)
	}
	a.mu.Unlock()
	for _, r := range runs {
		r.cancel()
	}
	return true
}

// wait waits until, after close, no work is in flight, or ctx ends (false).
func (a *admission) wait(ctx context.Context) bool {
	select {
	case <-a.drained:
		return true
	case <-ctx.Done():
		return false
	}
}

// maxSpawns caps the programs Spawn runs at once in one session.
const maxSpawns = 16

// turn is a session's: one run at a time holds it (executions, commands, restarts,
// context deletes, and the reaper's look at an idle session), and beside it up to
// maxSpawns spawned programs run.
type turn struct {
	ch chan struct{} // holds one token while the turn is held

	mu      sync.Mutex
	holder  *run // the run holding the turn; nil when none, or the manager's own
	waiting int  // calls in take that do not hold the turn yet
	spawns  int
}

func newTurn() *turn { return &turn{ch: make(chan struct{}, 1)} }

// take waits for the turn until ctx ends; r (may be nil) is what interrupt cancels.
func (t *turn) take(ctx context.Context, r *run) error {
	t.mu.Lock()
	t.waiting++
	t.mu.Unlock()
	var err error
	select {
	case t.ch <- struct{}{}:
	case <-ctx.Done():
		err = ctx.Err()
	}
	t.mu.Lock()
	t.waiting--
	if err == nil {
		t.holder = r
	}
	t.mu.Unlock()
	return err
}

// queued is the number of calls waiting in take (a run queued behind the holder, or one
// about to take a free turn).
func (t *turn) queued() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waiting
}

// tryTake takes the turn if it is free.
func (t *turn) tryTake() bool {
	select {
	case t.ch <- struct{}{}:
		return true
	default:
		return false
	}
}

func (t *turn) give() {
	t.mu.Lock()
	t.holder = nil
	t.mu.Unlock()
	<-t.ch
}

// interrupt cancels the run holding the turn, if any.
func (t *turn) interrupt() {
	t.mu.Lock()
	r := t.holder
	t.mu.Unlock()
	if r != nil {
		r.cancel()
	}
}

// spawn takes one of the places for programs beside the turn.
func (t *turn) spawn() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.spawns >= maxSpawns {
		return fmt.Errorf("this session runs %d programs beside its executions, the most it may: "+
			"wait for one to end or stop one: %w", maxSpawns, errdefs.ErrResourceExhausted)
	}
	t.spawns++
	return nil
}

func (t *turn) spawned() {
	t.mu.Lock()
	t.spawns--
	t.mu.Unlock()
}

// spawning is the number of programs running beside the turn.
func (t *turn) spawning() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.spawns
}

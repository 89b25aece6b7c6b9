package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// Fork: N new sessions from one, each with a copy of its variables (the kernel's memory,
// from one checkpoint) and of its workspace, in a sandbox of its own with the same limits,
// image, policy and tools, of the same tenant. A paused session is forked from its
// checkpoint; a running one is checkpointed for it and kept frozen while its workspace is
// copied (nothing writes it meanwhile), then goes on while the forks are restored: it is
// never stopped and restored itself. Each fork's kernel then reseeds its random
// generators: forks never draw the same numbers.

// forksAtOnce bounds the workspaces made, and the sandboxes restored, at once.
const forksAtOnce = 2

// reseed is what a forked kernel runs first, quietly: new seeds for the random module's
// and numpy's global generators, and fresh entropy for OpenSSL's (which tells a fork by its
// pid, the same in every fork a checkpoint makes). Generators the user's code made itself
// (random.Random(), numpy's default_rng()) are copied as they are.
const reseed = "import os as _o, random as _r, ssl as _t, sys as _s\n" +
	"_r.seed(); _t.RAND_add(_o.urandom(64), 64)\n" +
	"if 'numpy' in _s.modules: _s.modules['numpy'].random.seed()\n" +
	"del _o, _r, _t, _s"

// Fork makes req.Count new sessions from session id (see above).
func (m *Manager) Fork(ctx context.Context, id string, req api.ForkRequest) (*api.ForkResult, error) {
	n := req.Count
	if n == 0 {
		n = 1
	}
	if n < 0 || n > api.MaxForks {
		return nil, fmt.Errorf("count %d: want 1 to %d: %w", req.Count, api.MaxForks, errdefs.ErrInvalidArgument)
	}
	s, err := m.lookupStill(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := m.checkPausable(s); err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	// Every fork's slot first: none is made past the caps.
	var slots []func()
	release := func() {
		for _, f := range slots {
			f()
		}
	}
	for range n {
		slot, err := m.adm.takeSlot(s.tenant)
		if err != nil {
			release()
			return nil, fmt.Errorf("fork %d sessions: %w", n, err)
		}
		slots = append(slots, slot)
	}
	rctx, done, err := m.adm.admit(ctx, s.tenant, kindPause, s.turn)
	if err != nil {
		release()
		return nil, err
	}
	defer done()
	// The wake lock is held until the forks are made: a paused session stays so, its
	// checkpoint and workspace as they are.
	if err := lockWithin(rctx, &s.wake); err != nil {
		release()
		return nil, fmt.Errorf("fork: session %s: files are being read or written: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseTimeout)
	defer cancel()
	// Its workspace is copied: mounted, or mounted again if a reboot of the host unmounted it.
	if err := m.store.Remount(ctx, s.id); err != nil {
		s.wake.Unlock()
		release()
		m.log.Warn("a fork failed: the session's workspace", "session_id", s.id, "err", err)
		return nil, opaque(fmt.Sprintf("session %s could not be forked", s.id), err)
	}
	start := time.Now()
	dir, thaw, err := m.forkPoint(ctx, s)
	if err != nil {
		s.wake.Unlock()
		release()
		return nil, fmt.Errorf("fork: %w", err)
	}
	forks := make([]fork, n)
	for i := range forks {
		forks[i].id = m.newSessionID()
	}
	// First every fork's workspace, while the source's sandbox is frozen or stopped; then
	// the source goes on, and the forks' sandboxes are restored.
	err = forEach(n, func(i int) error { return m.forkWorkspace(ctx, s, forks[i].id) })
	if thaw != nil {
		thaw()
	}
	if err == nil {
		err = forEach(n, func(i int) (err error) {
			forks[i].s, err = m.forkOne(ctx, s, forks[i].id, dir, slots[i])
			return err
		})
	}
	if thaw != nil {
		os.RemoveAll(dir)
	}
	s.wake.Unlock()
	if err != nil {
		for i, f := range forks {
			if f.s != nil {
				// Not kept for --retention: nobody saw it.
				m.end(ctx, f.id, EndFailed)
			} else {
				slots[i]()
			}
			m.store.Remove(ctx, f.id)
		}
		m.log.Warn("a fork failed", "session_id", s.id, "err", err)
		return nil, opaque(fmt.Sprintf("session %s could not be forked", s.id), err)
	}
	out := &api.ForkResult{Sessions: make([]api.Session, n)}
	for i, f := range forks {
		out.Sessions[i] = f.s.view()
	}
	m.log.Info("session forked", "session_id", s.id, "tenant", s.tenant, "count", n, "took", time.Since(start).Round(time.Millisecond))
	return out, nil
}

// fork is one fork in the making: its id, and its session once made.
type fork struct {
	id string
	s  *Session
}

// forEach runs f(0) to f(n-1), forksAtOnce at a time, and returns their errors.
func forEach(n int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, forksAtOnce)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// forkPoint returns the checkpoint that session s is forked from, its turn and wake lock
// held: a paused session's own; else one made for the forks, of its sandbox kept frozen
// until thaw, which lets it go on (nil for a paused session). The caller removes a
// checkpoint made for the forks.
func (m *Manager) forkPoint(ctx context.Context, s *Session) (dir string, thaw func(), _ error) {
	s.mu.Lock()
	b, closed, paused := s.box, s.closed, !s.pausedAt.IsZero()
	s.mu.Unlock()
	switch {
	case closed:
		return "", nil, notFound(s.id)
	case paused:
		return m.checkpointDir(s.id), nil, nil
	}
	// Not the session's own checkpoint folder: a paused session's, counted by the sweep.
	dir = m.checkpointDir(s.id) + ".fork"
	thaw, err := m.checkpoint(ctx, s, b, dir, true)
	if err != nil {
		return "", nil, err
	}
	return dir, thaw, nil
}

// forkWorkspace makes fork id's workspace, a copy of paused or frozen session s's.
func (m *Manager) forkWorkspace(ctx context.Context, s *Session, id string) error {
	s.mu.Lock()
	src, diskMB := s.box.ws, s.box.limits.DiskMB
	s.mu.Unlock()
	ws, err := m.store.Create(ctx, id, diskMB)
	if err != nil {
		return fmt.Errorf("create a workspace: %w", err)
	}
	// Nothing writes the source meanwhile: its sandbox is checkpointed and stopped or
	// frozen. Links are copied as links (-a: never followed), owners and modes kept.
	if out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", "--", src+"/.", ws+"/").CombinedOutput(); err != nil {
		return fmt.Errorf("copy the workspace: %v: %.300s: %w", err, out, errdefs.ErrUnavailable)
	}
	return nil
}

// forkOne makes fork id of session s, with its workspace made and the slot taken for it:
// a sandbox restored from the checkpoint in dir, registered as a new session. On failure
// the caller removes the workspace.
func (m *Manager) forkOne(ctx context.Context, s *Session, id, dir string, slot func()) (_ *Session, err error) {
	s.mu.Lock()
	src := s.box
	spec := src.boxSpec
	now := time.Now()
	f := &Session{id: id, tenant: s.tenant, language: s.language, idle: s.idle, idleAction: s.idleAction, created: now,
		lastActive: now, turn: newTurn(), slot: slot, metadata: maps.Clone(s.metadata), keep: slices.Clone(s.keep),
		network: s.network, policy: s.policy, ca: s.ca, tools: slices.Clone(s.tools), execCount: s.execCount,
		expires: s.expires}
	trusted := src.trusted.Load()
	s.mu.Unlock()
	ws, err := m.store.Dir(id)
	if err != nil {
		return nil, fmt.Errorf("the fork's workspace: %w", err)
	}
	sb, g, err := m.restoreBox(ctx, src, id, ws, dir)
	if err != nil {
		return nil, err
	}
	b := &box{boxSpec: spec, id: id, ws: ws, sb: sb, guest: g}
	b.trusted.Store(trusted)
	f.box = b
	defer func() {
		if err != nil {
			m.discard(ctx, b, false) // its sandbox, and the workspace
		}
	}()
	if err := m.trust(ctx, b, g, f.ca); err != nil { // one given while the source was paused
		return nil, err
	}
	res, err := g.ExecuteWith(ctx, api.ExecuteRequest{Code: reseed, TimeoutS: 10}, guestproto.ExecuteOptions{Quiet: true})
	if err != nil || res.Status != api.StatusOK {
		return nil, fmt.Errorf("reseed the fork's random generators: %v: %w", resultText(res), errors.Join(err, errdefs.ErrUnavailable))
	}
	m.net.gw.Set(id, f.tenant, f.policy, m.net.limitsFor(f.tenant), f.ca)
	if !m.register(f) {
		m.net.gw.End(id)
		return nil, errShuttingDown
	}
	m.save(f)
	m.metrics.sessionsCreated.WithLabelValues(f.tenant).Inc()
	return f, nil
}

// resultText describes an execution's result for a log.
func resultText(r *api.ExecuteResult) string {
	if r == nil {
		return "no result"
	}
	return "status " + r.Status
}

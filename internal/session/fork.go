package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
// image, policy and tools, of the same tenant. The session is paused for it (if it is not
// already), so that nothing writes its workspace while it is copied, and resumed after if
// it was running. Each fork's kernel then reseeds its random generators: forks never draw
// the same numbers.

// forksAtOnce bounds the forks restored at once.
const forksAtOnce = 2

// reseed is what a forked kernel runs first, quietly.
const reseed = "import random as _r; _r.seed()\n" +
	"import sys as _s\n" +
	"if 'numpy' in _s.modules: _s.modules['numpy'].random.seed()\n" +
	"del _r, _s"

// Fork makes req.Count new sessions from session id (see above).
func (m *Manager) Fork(ctx context.Context, id string, req api.ForkRequest) (*api.ForkResult, error) {
	n := req.Count
	if n == 0 {
		n = 1
	}
	if n < 0 || n > api.MaxForks {
		return nil, fmt.Errorf("count %d: want 1 to %d: %w", req.Count, api.MaxForks, errdefs.ErrInvalidArgument)
	}
	s, err := m.lookup(ctx, id)
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
	_, done, err := m.adm.admit(ctx, s.tenant, kindPause, s.turn)
	if err != nil {
		release()
		return nil, err
	}
	defer done()
	s.mu.Lock()
	wasPaused := !s.pausedAt.IsZero()
	s.mu.Unlock()
	// The wake lock is held until the forks are made: the session stays paused, its
	// checkpoint and workspace as they are.
	if err := lockWithin(ctx, &s.wake); err != nil {
		release()
		return nil, fmt.Errorf("fork: session %s: files are being read or written: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	if err := m.pauseLocked(ctx, s); err != nil {
		s.wake.Unlock()
		release()
		return nil, fmt.Errorf("fork: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseTimeout)
	defer cancel()
	start := time.Now()
	forks := make([]*Session, n)
	errs := make([]error, n)
	sem := make(chan struct{}, forksAtOnce)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			forks[i], errs[i] = m.forkOne(ctx, s, slots[i])
		}()
	}
	wg.Wait()
	s.wake.Unlock()
	if !wasPaused {
		if err := m.resume(ctx, s); err != nil {
			m.log.Warn("a forked session could not be resumed; it stays paused", "session_id", s.id, "err", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		for i, f := range forks {
			if f != nil {
				m.end(ctx, f.id, EndFailed)
			} else if errs[i] != nil {
				slots[i]()
			}
		}
		return nil, fmt.Errorf("fork session %s: %w", s.id, err)
	}
	out := &api.ForkResult{Sessions: make([]api.Session, n)}
	for i, f := range forks {
		out.Sessions[i] = f.view()
	}
	m.log.Info("session forked", "session_id", s.id, "tenant", s.tenant, "count", n, "took", time.Since(start).Round(time.Millisecond))
	return out, nil
}

// forkOne makes one fork of paused session s, with the slot taken for it: a workspace
// copied from s's, a sandbox restored from s's checkpoint, registered as a new session.
func (m *Manager) forkOne(ctx context.Context, s *Session, slot func()) (_ *Session, err error) {
	s.mu.Lock()
	src := s.box
	spec := src.boxSpec
	now := time.Now()
	f := &Session{tenant: s.tenant, language: s.language, idle: s.idle, idleAction: s.idleAction, created: now,
		lastActive: now, turn: newTurn(), slot: slot, metadata: maps.Clone(s.metadata), keep: slices.Clone(s.keep),
		network: s.network, policy: s.policy, ca: s.ca, tools: slices.Clone(s.tools), execCount: s.execCount}
	s.mu.Unlock()
	id := m.newSessionID()
	f.id = id
	ws, err := m.store.Create(ctx, id, spec.limits.DiskMB)
	if err != nil {
		return nil, fmt.Errorf("create a workspace: %w", err)
	}
	defer func() {
		if err != nil {
			m.store.Remove(context.WithoutCancel(ctx), id)
		}
	}()
	// Nothing writes the source meanwhile: its sandbox is checkpointed and stopped. Links
	// are copied as links (-a: never followed), owners and modes kept.
	if out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", "--", src.ws+"/.", ws+"/").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("copy the workspace: %v: %.300s: %w", err, out, errdefs.ErrUnavailable)
	}
	sb, g, err := m.restoreBox(ctx, src, id, ws, m.checkpointDir(s.id))
	if err != nil {
		return nil, err
	}
	b := &box{boxSpec: spec, id: id, ws: ws, sb: sb, guest: g}
	b.trusted.Store(src.trusted.Load())
	f.box = b
	if res, err := g.ExecuteWith(ctx, api.ExecuteRequest{Code: reseed, TimeoutS: 10}, guestproto.ExecuteOptions{Quiet: true}); err != nil || res.Status != api.StatusOK {
		m.discard(ctx, b, false)
		return nil, fmt.Errorf("reseed the fork's random generators: %+v, %v", res, err)
	}
	m.net.gw.Set(id, f.tenant, f.policy, m.net.limitsFor(f.tenant), f.ca)
	if !m.register(f) {
		m.net.gw.End(id)
		m.discard(ctx, b, false)
		return nil, errShuttingDown
	}
	m.save(f)
	m.metrics.sessionsCreated.WithLabelValues(f.tenant).Inc()
	return f, nil
}

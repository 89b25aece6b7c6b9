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
	// The wake lock is held until the forks are made: the session stays paused, its
	// checkpoint and workspace as they are.
	if err := lockWithin(rctx, &s.wake); err != nil {
		release()
		return nil, fmt.Errorf("fork: session %s: files are being read or written: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	s.mu.Lock()
	wasPaused := !s.pausedAt.IsZero()
	s.mu.Unlock()
	if err := m.pauseLocked(ctx, s); err != nil {
		s.wake.Unlock()
		release()
		return nil, fmt.Errorf("fork: %w", err)
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
				// Not kept for --retention: nobody saw it.
				m.end(ctx, f.id, EndFailed)
				m.store.Remove(ctx, f.id)
			} else if errs[i] != nil {
				slots[i]()
			}
		}
		m.log.Warn("a fork failed", "session_id", s.id, "err", err)
		return nil, opaque(fmt.Sprintf("session %s could not be forked", s.id), err)
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
		network: s.network, policy: s.policy, ca: s.ca, tools: slices.Clone(s.tools), execCount: s.execCount,
		expires: s.expires}
	s.mu.Unlock()
	id := m.newSessionID()
	f.id = id
	ws, err := m.store.Create(ctx, id, spec.limits.DiskMB)
	if err != nil {
		return nil, fmt.Errorf("create a workspace: %w", err)
	}
	var b *box // once restored
	defer func() {
		if err != nil {
			if b != nil {
				m.discard(ctx, b, false) // its sandbox, and the workspace
			} else {
				m.store.Remove(context.WithoutCancel(ctx), id)
			}
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
	b = &box{boxSpec: spec, id: id, ws: ws, sb: sb, guest: g}
	b.trusted.Store(src.trusted.Load())
	f.box = b
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

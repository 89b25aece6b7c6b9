package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/sandbox"
)

// Pause and resume (docs/ARCHITECTURE.md, "Pause, resume and fork"). A paused session's
// sandbox is written to disk by the backend (sandbox.Checkpointer) into
// <state>/checkpoints/<id> and stopped; the session stays in the registry, its box without
// a sandbox or guest, and holds no session slot. Any call that needs the sandbox resumes it
// first (use): the backend restores the checkpoint (sandbox.Restorer) and the guest is
// dialed again, its kernel as it was.
//
// Locking: Session.wake is held for reading by every call that uses the sandbox (use) and
// for writing by a pause and a resume, so a pause waits for file calls in flight, and a
// call that comes during a pause waits for it and then resumes. A pause also holds the
// session's turn, so no run is in flight; it is refused while a run or a spawned program
// goes on.

// pauseTimeout bounds a pause or a resume: the runtime writes or reads the sandbox's memory.
const pauseTimeout = 3 * time.Minute

// checkpointKind is how this server's backend checkpoints ("" cannot) and why not.
func (m *Manager) checkpointKind() (string, string) {
	c := m.backend.Capabilities()
	if c.Checkpoint != "" && m.cfg.StateDir == "" {
		return "", "the server keeps no state folder"
	}
	return c.Checkpoint, c.CheckpointMissing
}

// pausable says whether sessions of idle action a need a sandbox made checkpointable
// (boxSpec.checkpointable): under CRIU only, where such a sandbox costs more.
func (m *Manager) pausable(action string) bool {
	kind, _ := m.checkpointKind()
	return kind == "criu" && action == api.IdleActionPause
}

func (m *Manager) checkpointDir(id string) string {
	return filepath.Join(m.cfg.StateDir, "checkpoints", id)
}

// Pause pauses session id (see the top of this file). A paused session is left as it is.
func (m *Manager) Pause(ctx context.Context, id string) (*api.Session, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := m.checkPausable(s); err != nil {
		return nil, err
	}
	rctx, release, err := m.adm.admit(ctx, s.tenant, kindPause, s.turn)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := m.pauseHeld(rctx, s, true); err != nil {
		return nil, err
	}
	v := s.view()
	return &v, nil
}

// checkPausable refuses a pause that cannot be, before it waits for anything: a backend
// that does not checkpoint, a sandbox that was not made checkpointable, a run or a spawned
// program going on.
func (m *Manager) checkPausable(s *Session) error {
	kind, _ := m.checkpointKind()
	if kind == "" {
		return errCannotPause
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.pausedAt.IsZero():
		return nil
	case kind == "criu" && !s.box.checkpointable:
		return fmt.Errorf("session %s was not created pausable: its kernel is forked from a template shared with other sessions, "+
			"which a checkpoint cannot take along; create the session with idle_action \"pause\" to be able to pause it: %w",
			s.id, errdefs.ErrFailedPrecondition)
	case s.busy:
		return fmt.Errorf("session %s is running a cell or command: pause it once that ends, or interrupt it first: %w", s.id, errdefs.ErrFailedPrecondition)
	case s.turn.spawning() > 0:
		return fmt.Errorf("session %s has %d programs running in the background (commands started to run beside cells): "+
			"pause it once they end, or kill them first: %w", s.id, s.turn.spawning(), errdefs.ErrFailedPrecondition)
	}
	return nil
}

// pauseHeld pauses s, whose turn the caller holds. wait: wait for file calls in flight
// (until ctx ends); else a session with one is left alone (the idle reaper), reported as
// errBusy.
func (m *Manager) pauseHeld(ctx context.Context, s *Session, wait bool) error {
	if !wait {
		if !s.wake.TryLock() {
			return errBusy
		}
	} else if err := lockWithin(ctx, &s.wake); err != nil {
		return fmt.Errorf("session %s: files are being read or written: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	defer s.wake.Unlock()
	return m.pauseLocked(ctx, s)
}

// pauseLocked pauses s, whose turn the caller holds, and its wake lock for writing.
func (m *Manager) pauseLocked(ctx context.Context, s *Session) error {
	s.mu.Lock()
	b, closed, paused := s.box, s.closed, !s.pausedAt.IsZero()
	s.mu.Unlock()
	switch {
	case closed:
		return notFound(s.id)
	case paused:
		return nil
	}
	// A pause, once begun, goes to its end: a caller going away must not leave the guest
	// unlistening or a checkpoint half written.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseTimeout)
	defer cancel()
	start := time.Now()
	dir := m.checkpointDir(s.id)
	if _, err := m.checkpoint(ctx, s, b, dir, false); err != nil {
		return err
	}
	size := dirSize(dir)
	s.mu.Lock()
	if s.closed { // ended meanwhile: end found it running, and stopped nothing of this
		s.mu.Unlock()
		m.dropCheckpoint(s.id)
		return notFound(s.id)
	}
	b.sb, b.guest = nil, nil
	s.pausedAt, s.checkpointBytes = time.Now(), size
	slot := s.slot
	s.slot = func() {}
	s.mu.Unlock()
	slot() // a paused session takes no slot: resuming takes one again
	m.save(s)
	m.metrics.pauses.WithLabelValues("paused").Inc()
	m.metrics.pauseSeconds.Observe(time.Since(start).Seconds())
	m.log.Info("session paused", "session_id", s.id, "tenant", s.tenant, "checkpoint_mb", size>>20, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// checkpoint writes the sandbox of running session s (box b) into dir, s's turn and wake
// lock held, and stops it, or with keep keeps it frozen: the returned thaw lets it go on.
// One that fails leaves the session running. ctx must not end before the checkpoint does.
func (m *Manager) checkpoint(ctx context.Context, s *Session, b *box, dir string, keep bool) (thaw func(), _ error) {
	// Again, with the turn and the wake lock held: a spawned program may have started since
	// the caller's first look, and would be frozen mid-way.
	if err := m.checkPausable(s); err != nil {
		return nil, err
	}
	cp, ok := b.sb.(sandbox.Checkpointer)
	if !ok {
		return nil, fmt.Errorf("this server's sandboxes cannot be paused: %w", errdefs.ErrFailedPrecondition)
	}
	if m.pausedBytes() >= m.cfg.PausedQuotaMB<<20 {
		m.metrics.pauses.WithLabelValues("refused").Inc()
		return nil, fmt.Errorf("the disk this server keeps for paused sessions is full: end or resume a paused session first, or retry later: %w",
			errdefs.ErrResourceExhausted)
	}
	m.drainUploads(ctx, s.id)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("pause session %s: %w", s.id, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("pause session %s: %w", s.id, err)
	}
	failed := func(err error, abandon bool) error {
		os.RemoveAll(dir)
		m.metrics.pauses.WithLabelValues("failed").Inc()
		m.log.Warn("pause failed; the session runs on", "session_id", s.id, "err", err)
		var rerr error
		if abandon {
			rerr = cp.Abandon(ctx)
		}
		if rerr == nil {
			rerr = m.redial(ctx, s, b)
		}
		if rerr != nil {
			// Neither paused nor reachable: the next call replaces the sandbox.
			m.log.Error("after a failed pause the session's guest cannot be reached", "session_id", s.id, "err", rerr)
		}
		return opaque(fmt.Sprintf("session %s could not be paused: it runs on", s.id), err)
	}
	if err := b.guest.Checkpoint(ctx); err != nil {
		return nil, failed(err, true)
	}
	b.guest.Close()
	if err := cp.Checkpoint(ctx, dir, keep); err != nil {
		return nil, failed(err, false)
	}
	if !keep {
		return nil, nil
	}
	return func() {
		err := cp.Thaw(ctx)
		if err == nil {
			err = m.redial(ctx, s, b)
		}
		if err != nil {
			// Not reachable: the next call replaces the sandbox.
			m.log.Error("after a checkpoint that kept it the session's guest cannot be reached", "session_id", s.id, "err", err)
		}
	}, nil
}

// errCannotPause refuses a pause on a server whose runtime cannot checkpoint. Why (no CRIU,
// which one is installed) is in the server's log at start, for its operator, not here.
var errCannotPause = fmt.Errorf("this server cannot pause sessions: its sandboxes' runtime cannot checkpoint them: %w", errdefs.ErrFailedPrecondition)

// errBusy: the idle reaper found file calls in flight, and left the session alone.
var errBusy = errors.New("session busy")

// lockWithin takes mu's write lock, or gives up when ctx ends.
func lockWithin(ctx context.Context, mu interface{ TryLock() bool }) error {
	for delay := time.Millisecond; !mu.TryLock(); delay = min(2*delay, 50*time.Millisecond) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
	return nil
}

// redial dials b's guest again after a checkpoint that failed, which leaves the sandbox
// running with a new connection (sandbox.Checkpointer), unless s ended meanwhile.
func (m *Manager) redial(ctx context.Context, s *Session, b *box) error {
	g, err := guestproto.Dial(ctx, b.sb.Conn())
	if err != nil {
		return err
	}
	m.serveEgress(g, b.id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		g.Close()
		return notFound(s.id)
	}
	b.guest = g
	return nil
}

// opaque is err as a caller may see it: msg, of err's kind (failed_precondition,
// resource_exhausted, not_found; else unavailable), without err's details (a runtime's
// words, the host's paths), which the log has.
func opaque(msg string, err error) error {
	kind := errdefs.ErrUnavailable
	for _, k := range []error{errdefs.ErrFailedPrecondition, errdefs.ErrResourceExhausted, errdefs.ErrNotFound} {
		if errors.Is(err, k) {
			kind = k
			break
		}
	}
	return fmt.Errorf("%s: %w", msg, kind)
}

// Resume resumes session id if it is paused.
func (m *Manager) Resume(ctx context.Context, id string) (*api.Session, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	_, release, err := m.use(ctx, s)
	if err != nil {
		return nil, err
	}
	release()
	v := s.view()
	return &v, nil
}

// use returns the session's box for a call that uses its sandbox, resuming the session
// first when it is paused; release ends the use (see the top of this file). It does not
// count as activity.
func (m *Manager) use(ctx context.Context, s *Session) (*box, func(), error) {
	for {
		s.wake.RLock()
		s.mu.Lock()
		b, closed, paused, moving := s.box, s.closed, !s.pausedAt.IsZero(), s.moving
		s.mu.Unlock()
		switch {
		case closed:
			s.wake.RUnlock()
			return nil, nil, notFound(s.id)
		case moving:
			s.wake.RUnlock()
			return nil, nil, errMoving(s.id)
		case !paused:
			return b, s.wake.RUnlock, nil
		}
		s.wake.RUnlock()
		if err := m.resume(ctx, s); err != nil {
			return nil, nil, err
		}
	}
}

// resume brings a paused session back. A checkpoint that will not restore ends the
// session (its files are kept); a runtime that failed otherwise leaves it paused.
func (m *Manager) resume(ctx context.Context, s *Session) error {
	if err := lockWithin(ctx, &s.wake); err != nil {
		return fmt.Errorf("resume session %s: %w", s.id, err)
	}
	defer s.wake.Unlock()
	s.mu.Lock()
	b, closed, paused := s.box, s.closed, !s.pausedAt.IsZero()
	s.mu.Unlock()
	if closed {
		return notFound(s.id)
	}
	if !paused {
		return nil
	}
	slot, err := m.adm.takeSlot(s.tenant)
	if err != nil {
		return fmt.Errorf("resume session %s: %w", s.id, err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pauseTimeout)
	defer cancel()
	start := time.Now()
	dir := m.checkpointDir(s.id)
	sb, g, err := m.restoreBox(ctx, b, b.id, b.ws, dir)
	if err != nil {
		slot()
		m.metrics.resumes.WithLabelValues("failed").Inc()
		if !errors.Is(err, errdefs.ErrFailedPrecondition) {
			m.log.Warn("a paused session could not be resumed; it stays paused", "session_id", s.id, "err", err)
			return opaque(fmt.Sprintf("session %s could not be resumed now: it stays paused; retry later", s.id), err)
		}
		m.log.Error("a paused session did not restore (its checkpoint or its workspace); the session ended (its files are kept)", "session_id", s.id, "tenant", s.tenant, "err", err)
		m.end(context.WithoutCancel(ctx), s.id, EndFailed)
		return fmt.Errorf("session %s could not be resumed: its checkpoint or its workspace did not restore, so the session ended; its files are kept "+
			"(start a new session to use them): %w", s.id, errdefs.ErrNotFound)
	}
	s.mu.Lock()
	if s.closed { // ended (deleted) while it was being restored
		s.mu.Unlock()
		slot()
		g.Close()
		sb.Stop(ctx)
		return notFound(s.id)
	}
	b.sb, b.guest = sb, g
	s.pausedAt, s.checkpointBytes = time.Time{}, 0
	s.slot = slot
	s.lastActive = time.Now()
	ca := s.ca
	s.mu.Unlock()
	// Its checkpoint has the authority it trusted when paused; one given since a restart
	// of the server (a restored session's, whose box forgot it) is installed again.
	if err := m.trust(ctx, b, g, ca); err != nil {
		m.log.Warn("a resumed session's sandbox could not be made to trust its certificate authority", "session_id", s.id, "err", err)
	}
	m.save(s)
	if err := os.RemoveAll(dir); err != nil {
		m.log.Warn("remove a resumed session's checkpoint", "session_id", s.id, "err", err)
	}
	m.metrics.resumes.WithLabelValues("resumed").Inc()
	m.metrics.resumeSeconds.Observe(time.Since(start).Seconds())
	m.log.Info("session resumed", "session_id", s.id, "tenant", s.tenant, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// restoreBox restores the checkpoint in dir as sandbox id on workspace ws, with b's spec,
// and dials its guest.
func (m *Manager) restoreBox(ctx context.Context, b *box, id, ws, dir string) (sandbox.Sandbox, *guestproto.Client, error) {
	r, ok := m.backend.(sandbox.Restorer)
	if !ok {
		return nil, nil, fmt.Errorf("this server's backend restores no checkpoints: %w", errdefs.ErrFailedPrecondition)
	}
	if err := m.store.Remount(ctx, id); err != nil {
		return nil, nil, fmt.Errorf("the session's workspace: %w", err)
	}
	sb, err := r.Restore(ctx, sandbox.Spec{ID: id, Workspace: ws, Image: b.image, Limits: m.sandboxLimits(b.boxSpec),
		OrphanExit: m.cfg.MaxIdleTimeout, Checkpointable: true}, dir)
	if err != nil {
		return nil, nil, err
	}
	g, err := guestproto.Dial(ctx, sb.Conn())
	if err != nil {
		sb.Stop(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("the restored guest: %w", err)
	}
	m.serveEgress(g, id)
	return sb, g, nil
}

// pausedBytes is the disk the paused sessions' checkpoints take.
func (m *Manager) pausedBytes() int64 {
	var n int64
	for _, s := range m.live() {
		s.mu.Lock()
		n += s.checkpointBytes
		s.mu.Unlock()
	}
	return n
}

// dirSize is the bytes of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// dropCheckpoint removes session id's checkpoint, if it has one.
func (m *Manager) dropCheckpoint(id string) {
	if m.cfg.StateDir == "" {
		return
	}
	if err := os.RemoveAll(m.checkpointDir(id)); err != nil {
		m.log.Warn("remove a session's checkpoint", "session_id", id, "err", err)
	}
}

// restorePaused brings back the paused session of r, as restoreOne does the others: its
// checkpoint stays on disk until a call resumes it. A session whose workspace or checkpoint
// is gone ends. After a reboot of the host its workspace image is mounted again, checked
// first (workspace.Store.Remount); when that fails the session stays paused, told in the
// log, and its resume tries once more (an operator may have repaired the image meanwhile),
// or ends it as a checkpoint that does not restore would.
func (m *Manager) restorePaused(ctx context.Context, s *Session, r record) string {
	ws, err := m.store.Dir(r.ID)
	if err == nil {
		_, err = os.Stat(m.checkpointDir(r.ID))
	}
	if err == nil {
		if err = m.store.Remount(ctx, r.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			m.log.Error("a paused session's workspace could not be mounted again; its resume will try once more, and end the session if it fails",
				"session_id", r.ID, "tenant", r.Tenant, "err", err)
			err = nil
		}
	}
	if err != nil {
		m.dropCheckpoint(r.ID)
		return m.endUnrestored(ctx, r, err)
	}
	s.box = &box{boxSpec: r.spec(), id: r.ID, ws: ws}
	s.pausedAt, s.checkpointBytes = *r.PausedAt, r.CheckpointBytes
	s.slot = func() {} // a paused session holds none
	m.restoreTools(s, r)
	m.restoreNetwork(ctx, s, r)
	m.mu.Lock()
	m.sessions[s.id] = s
	m.mu.Unlock()
	m.save(s)
	m.log.Info("session restored", "session_id", s.id, "tenant", s.tenant, "how", "paused")
	return "paused"
}

// sweepCheckpoints removes the checkpoints that no paused session of keep owns: what an
// earlier process left of a pause or resume it did not finish, or of a session that ended.
func (m *Manager) sweepCheckpoints(keep func(id string) bool) {
	if m.cfg.StateDir == "" {
		return
	}
	dir := filepath.Join(m.cfg.StateDir, "checkpoints")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !keep(e.Name()) {
			m.log.Info("removing a checkpoint no paused session owns", "session_id", e.Name())
			m.dropCheckpoint(e.Name())
		}
	}
}

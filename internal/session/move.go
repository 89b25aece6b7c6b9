package session

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/egress"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/workspace"
)

// Moving sessions between the nodes of a cluster (docs/ARCHITECTURE.md, "Moving paused
// sessions between nodes"). The node that gives a session up pauses it (MoveOut) and sends
// its record, checkpoint and workspace; the node that takes it (MoveIn) makes a workspace
// of its own, writes them in, and resumes it there to be sure it runs (then pauses it again
// if it came paused); only then does the first node drop its copy (Outgoing.Finish). Until
// then calls on it are refused with "retry": the session is never in two places that
// answer, and a move that fails leaves it paused where it was.

// Outgoing is a session on its way to another node: paused, its calls refused until
// Finish.
type Outgoing struct {
	ID string
	// Record is the session's record as the receiving node takes it (MoveIn).
	Record []byte
	// Checkpoint and Workspace are the folders that go with it.
	Checkpoint, Workspace string
	// WasPaused: it was paused before the move; it should stay paused where it goes.
	WasPaused bool
	// Moves is how many times it will have moved once this move is done.
	Moves int

	m *Manager
	s *Session
}

// Movable lists the sessions that could move now: all of them where the backend
// checkpoints every sandbox (gVisor); under CRIU, those made pausable. Their ids, any
// tenant's, for the node's own drain; the others stay.
func (m *Manager) Movable() (movable, stuck []string) {
	kind, _ := m.checkpointKind()
	for _, s := range m.live() {
		s.mu.Lock()
		ok := kind != "" && !s.closed && !s.moving && (kind != "criu" || s.box.checkpointable)
		s.mu.Unlock()
		if ok {
			movable = append(movable, s.id)
		} else {
			stuck = append(stuck, s.id)
		}
	}
	return movable, stuck
}

// MovedIn lists the sessions here that moved from another node, with how many times each
// moved, for the cluster to publish.
func (m *Manager) MovedIn() map[string]int {
	in := map[string]int{}
	for _, s := range m.live() {
		s.mu.Lock()
		if s.moves > 0 && !s.moving {
			in[s.id] = s.moves
		}
		s.mu.Unlock()
	}
	return in
}

// MoveOut pauses session id (any tenant's: for the node's own drain) and holds it for a
// move. A session running a cell or a program is refused, as a pause is.
func (m *Manager) MoveOut(ctx context.Context, id string) (*Outgoing, error) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	m.mu.Unlock()
	if !ok {
		return nil, notFound(id)
	}
	if err := m.checkPausable(s); err != nil {
		return nil, err
	}
	// Its files go from the mounted workspace: after a reboot that left a paused
	// session's image unmounted, what would be walked is the empty mount point.
	if err := m.store.Remount(ctx, id); err != nil {
		return nil, fmt.Errorf("session %s's workspace: %w", id, err)
	}
	rctx, release, err := m.adm.admit(ctx, s.tenant, kindPause, s.turn)
	if err != nil {
		return nil, err
	}
	defer release()
	s.mu.Lock()
	wasPaused := !s.pausedAt.IsZero()
	s.mu.Unlock()
	if err := m.pauseHeld(rctx, s, true); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, notFound(id)
	case s.moving:
		return nil, fmt.Errorf("session %s is being moved already: %w", id, errdefs.ErrFailedPrecondition)
	}
	s.moving = true
	rec := s.recordLocked()
	rec.Moves++
	rec.Busy = false
	data, err := json.Marshal(rec)
	if err != nil {
		s.moving = false
		return nil, err
	}
	return &Outgoing{ID: id, Record: data, Checkpoint: m.checkpointDir(id), Workspace: s.box.ws,
		WasPaused: wasPaused, Moves: rec.Moves, m: m, s: s}, nil
}

// Finish ends the move: moved, the session is gone from here (record, checkpoint and
// workspace: the node it went to has them), and to (that node's name) is logged; not
// moved, it stays here, paused, and takes calls again.
func (o *Outgoing) Finish(ctx context.Context, moved bool, to string) {
	m, s := o.m, o.s
	if !moved {
		s.mu.Lock()
		s.moving = false
		s.mu.Unlock()
		return
	}
	// Detached: what the front doors keep beside it (conversations, files) is kept here.
	if m.unregister(o.ID, EndMoved, true) == nil {
		return
	}
	s.saveMu.Lock()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if err := m.records.remove(o.ID); err != nil {
		m.log.Warn("remove a moved session's record", "session_id", o.ID, "err", err)
	}
	s.saveMu.Unlock()
	m.dropCheckpoint(o.ID)
	if err := m.store.Remove(context.WithoutCancel(ctx), o.ID); err != nil {
		m.log.Warn("remove a moved session's workspace", "session_id", o.ID, "err", err)
	}
	m.metrics.moves.WithLabelValues("out").Inc()
	m.log.Info("session moved to another node", "session_id", o.ID, "tenant", s.tenant, "node", to, "moves", o.Moves)
}

// errMoving refuses a call on a session on its way to another node.
func errMoving(id string) error {
	return fmt.Errorf("session %s is being moved to another node of the cluster (this one is being drained): retry in a few seconds: %w",
		id, errdefs.ErrUnavailable)
}

// Incoming is a session another node gives up (Outgoing), as MoveIn takes it.
type Incoming struct {
	ID string
	// Record is its record as the other node sent it: checked as a request to create the
	// session here would be, against this node's settings.
	Record []byte
	// StayPaused: it was paused before it moved, and is paused again here once it has been
	// seen to resume.
	StayPaused bool
	// Tenant reports whether a tenant exists on this node (an API key's): a session of any
	// other is refused.
	Tenant func(name string) bool
	// Fill writes its checkpoint and workspace into the two folders it is given (the
	// workspace made here, with the session's disk quota), at most the sizes given; it
	// fails unless what it wrote is what the other node signed. Nothing of them is used
	// before it returns.
	Fill func(checkpoint, workspace string, maxCheckpoint, maxWorkspace int64) error
}

// MoveIn takes a session another node gives up. It is resumed here before MoveIn returns,
// so that a checkpoint this node cannot run is refused while the other node still has it;
// paused again when it came paused. On any failure nothing of it is left here.
func (m *Manager) MoveIn(ctx context.Context, in Incoming) (*api.Session, error) {
	r, spec, err := m.checkMoved(in)
	if err != nil {
		return nil, err
	}
	if kind, _ := m.checkpointKind(); kind == "" {
		return nil, errCannotPause
	}
	m.mu.Lock()
	have, exists := m.sessions[r.ID]
	m.mu.Unlock()
	if exists {
		// The same move again (its answer was lost on the way): it is here, done.
		have.mu.Lock()
		same := have.tenant == r.Tenant && have.moves == r.Moves && !have.closed
		have.mu.Unlock()
		if same {
			v := have.view()
			return &v, nil
		}
		return nil, fmt.Errorf("session %s is here already: %w", r.ID, errdefs.ErrFailedPrecondition)
	}
	// The checkpoint's disk counts against this node's paused quota, as a pause here would.
	if m.pausedBytes()+r.CheckpointBytes > m.cfg.PausedQuotaMB<<20 {
		return nil, fmt.Errorf("the disk this node keeps for paused sessions is full: %w", errdefs.ErrResourceExhausted)
	}
	ws, err := m.store.Create(ctx, r.ID, spec.limits.DiskMB)
	if err != nil {
		return nil, fmt.Errorf("a workspace for the moved session: %w", err)
	}
	dir := m.checkpointDir(r.ID)
	discard := func() {
		os.RemoveAll(dir)
		if err := m.store.Remove(context.WithoutCancel(ctx), r.ID); err != nil {
			m.log.Warn("remove the workspace of a session that did not move here", "session_id", r.ID, "err", err)
		}
	}
	err = os.RemoveAll(dir)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(dir), 0o700)
	}
	if err == nil {
		err = os.Mkdir(dir, 0o700)
	}
	if err == nil {
		// A checkpoint as large as the other node measured it (and its guest log's last
		// growth); the workspace's files as large as its quota lets them be.
		disk := int64(cmp.Or(spec.limits.DiskMB, workspace.DefaultDiskMB)) << 20
		err = in.Fill(dir, ws, r.CheckpointBytes+1<<20, disk)
	}
	if err != nil {
		discard()
		return nil, err
	}
	s := sessionOf(r)
	s.box = &box{boxSpec: spec, id: r.ID, ws: ws}
	s.pausedAt, s.checkpointBytes = *r.PausedAt, dirSize(dir)
	s.slot = func() {}
	m.restoreTools(s, r)
	m.restoreNetwork(ctx, s, r)
	if !m.register(s) {
		m.net.gw.End(r.ID)
		discard()
		return nil, fmt.Errorf("this node is shutting down: %w", errdefs.ErrUnavailable)
	}
	// Its record is written once it runs here: a crash before leaves no session here (the
	// sweep at start removes its checkpoint, the workspace is released), and the node it
	// came from still has it.
	failed := func(err error) (*api.Session, error) {
		m.log.Warn("a session moved here did not resume; it stays on the node it came from", "session_id", r.ID, "err", err)
		m.end(context.WithoutCancel(ctx), r.ID, EndFailed) // unless the failed resume ended it
		discard()
		// Whatever went wrong here (its details are in this node's log), the other node keeps it.
		return nil, fmt.Errorf("session %s could not be resumed on this node, which keeps nothing of it: %w", r.ID, errdefs.ErrFailedPrecondition)
	}
	if err := m.resume(ctx, s); err != nil {
		return failed(err)
	}
	if err := ctx.Err(); err != nil { // the other node gave up: it keeps the session
		return failed(err)
	}
	if in.StayPaused {
		tctx := WithTenant(ctx, r.Tenant)
		if _, err := m.Pause(tctx, r.ID); err != nil {
			return failed(err)
		}
	}
	m.save(s)
	m.metrics.moves.WithLabelValues("in").Inc()
	m.log.Info("session moved here from another node", "session_id", r.ID, "tenant", r.Tenant, "moves", r.Moves, "paused", in.StayPaused)
	v := s.view()
	return &v, nil
}

// checkMoved checks the record of a moved session as this node would check a request to
// create it (language, image, limits, env, idle timeout and action, lifetime, metadata,
// artifacts, network policy within its tenant's and this server's), and that its tenant
// exists here: whoever holds the cluster's secret (or replays a move) writes it. It
// returns the record and the sandbox's spec, with this node's defaults filled in.
func (m *Manager) checkMoved(in Incoming) (record, boxSpec, error) {
	var r record
	if err := json.Unmarshal(in.Record, &r); err != nil || r.ID != in.ID || !validID(r.ID) || r.PausedAt == nil || r.Moves < 1 {
		return r, boxSpec{}, fmt.Errorf("the moved session's record is not valid: %w", errdefs.ErrInvalidArgument)
	}
	bad := func(err error) (record, boxSpec, error) {
		return r, boxSpec{}, fmt.Errorf("the moved session's record: %w", err)
	}
	if in.Tenant == nil || !in.Tenant(r.Tenant) {
		return bad(fmt.Errorf("its tenant %.64q has no API key on this node: %w", r.Tenant, errdefs.ErrPermissionDenied))
	}
	lang, spec, err := m.checkSandbox(r.Language, r.Image, &r.Limits, r.Env)
	if err != nil {
		return bad(err)
	}
	if spec.image != r.Image {
		return bad(fmt.Errorf("it ran on image %.64q, and this node's sessions run on %.64q: %w", r.Image, spec.image, errdefs.ErrInvalidArgument))
	}
	r.Language, spec.checkpointable = lang, r.Checkpointable
	switch {
	case r.IdleTimeoutS < 0 || r.IdleTimeoutS > m.cfg.MaxIdleTimeout.Seconds():
		return bad(fmt.Errorf("idle_timeout_s %v is outside this server's 0 to %v: %w", r.IdleTimeoutS, m.cfg.MaxIdleTimeout.Seconds(), errdefs.ErrInvalidArgument))
	case r.IdleAction != "" && r.IdleAction != api.IdleActionEnd && r.IdleAction != api.IdleActionPause:
		return bad(fmt.Errorf("idle_action %.32q: %w", r.IdleAction, errdefs.ErrInvalidArgument))
	case r.ExpiresAt != nil && time.Until(*r.ExpiresAt) > m.cfg.MaxLifetime:
		return bad(m.tooLong(time.Until(*r.ExpiresAt).Seconds()))
	case r.CheckpointBytes < 0 || r.ExecutionCount < 0:
		return bad(fmt.Errorf("negative sizes or counts: %w", errdefs.ErrInvalidArgument))
	case len(r.Artifacts) > 0 && m.uploads == nil:
		return bad(fmt.Errorf("it keeps artifacts, and this node keeps no artifacts store: %w", errdefs.ErrFailedPrecondition))
	}
	if err := checkMetadata(r.Metadata); err != nil {
		return bad(err)
	}
	if err := checkArtifacts(r.Artifacts); err != nil {
		return bad(err)
	}
	if _, err := m.net.policy(r.Tenant, r.Network); err != nil {
		return bad(err)
	}
	if r.CA != "" {
		if _, err := egress.ParseCA(r.CA); err != nil {
			return bad(fmt.Errorf("its certificate authority does not parse: %w", errdefs.ErrInvalidArgument))
		}
	}
	return r, spec, nil
}

// sessionOf is the session of record r, without its box, slot and network.
func sessionOf(r record) *Session {
	s := &Session{id: r.ID, tenant: r.Tenant, language: r.Language,
		idle: time.Duration(r.IdleTimeoutS * float64(time.Second)), created: r.CreatedAt,
		lastActive: r.LastActiveAt, execCount: r.ExecutionCount, notice: r.Notice, turn: newTurn(),
		metadata: r.Metadata, keep: r.Artifacts, moves: r.Moves}
	if r.ExpiresAt != nil {
		s.expires = *r.ExpiresAt // the reaper's first round ends it if it passes meanwhile
	}
	s.idleAction = cmp.Or(r.IdleAction, api.IdleActionEnd)
	return s
}

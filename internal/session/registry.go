package session

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// The registry: the live sessions by id, each of its tenant. Sessions enter it through
// Create (and restore, at start) and leave it through end or detach, and the subscribers
// (events.go) hear of both.

// Create starts a new session.
func (m *Manager) Create(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error) {
	lang, spec, err := m.checkSandbox(req.Language, req.Image, req.Limits, req.Env)
	if err != nil {
		return nil, err
	}
	spec.language = kernelLanguage(lang)
	idle := m.cfg.IdleTimeout
	switch {
	case req.IdleTimeoutS < 0:
		return nil, fmt.Errorf("idle_timeout_s must not be negative: %w", errdefs.ErrInvalidArgument)
	case req.IdleTimeoutS > int(m.cfg.MaxIdleTimeout/time.Second): // before the multiplication overflows
		return nil, fmt.Errorf("idle_timeout_s %d is above this server's maximum %d: %w",
			req.IdleTimeoutS, int(m.cfg.MaxIdleTimeout.Seconds()), errdefs.ErrInvalidArgument)
	case req.IdleTimeoutS > 0:
		idle = time.Duration(req.IdleTimeoutS) * time.Second
	}
	lifetime, err := m.createLifetime(req.LifetimeS)
	if err != nil {
		return nil, err
	}
	if err := checkArtifacts(req.Artifacts); err != nil {
		return nil, err
	}
	if len(req.Artifacts) > 0 && m.uploads == nil {
		return nil, fmt.Errorf("artifacts: this server keeps no artifacts store (--artifacts-store), so no file would be kept: leave artifacts out: %w", errdefs.ErrFailedPrecondition)
	}
	if err := checkMetadata(req.Metadata); err != nil {
		return nil, err
	}
	action := req.IdleAction
	switch action {
	case "":
		action = m.cfg.IdleAction
	case api.IdleActionEnd, api.IdleActionPause:
	default:
		return nil, fmt.Errorf("idle_action %q: want %q or %q: %w", req.IdleAction, api.IdleActionEnd, api.IdleActionPause, errdefs.ErrInvalidArgument)
	}
	if kind, _ := m.checkpointKind(); action == api.IdleActionPause && kind == "" {
		if req.IdleAction != "" {
			return nil, fmt.Errorf("idle_action \"pause\": %w", errCannotPause)
		}
		action = api.IdleActionEnd // the server's default, which New warned of
	}
	spec.checkpointable = m.pausable(action)
	tenant := Tenant(ctx)
	policy, err := m.net.policy(tenant, req.Network)
	if err != nil {
		return nil, err
	}
	_, slot, err := m.adm.admit(ctx, tenant, kindCreate, nil)
	if err != nil {
		return nil, err
	}
	b, err := m.obtain(ctx, spec)
	if err != nil {
		slot()
		return nil, err
	}
	now := time.Now()
	s := &Session{id: b.id, tenant: tenant, language: lang, idle: idle, idleAction: action, created: now, lastActive: now, box: b, turn: newTurn(),
		slot: slot, metadata: maps.Clone(req.Metadata), network: req.Network, keep: slices.Clone(req.Artifacts)}
	if lifetime > 0 {
		s.expires = now.Add(lifetime)
	}
	if err := m.applyNetwork(ctx, s, policy); err != nil {
		slot()
		m.net.gw.End(s.id)
		m.discard(context.WithoutCancel(ctx), b, false)
		return nil, err
	}
	if !m.register(s) {
		slot()
		m.net.gw.End(s.id)
		m.discard(context.WithoutCancel(ctx), b, false)
		return nil, errShuttingDown
	}
	m.save(s)
	if lifetime > 0 {
		m.deadlineSet()
	}
	m.metrics.sessionsCreated.WithLabelValues(tenant).Inc()
	m.log.Info("session created", "session_id", s.id, "tenant", tenant, "image", spec.image, "memory_mb", spec.limits.MemoryMB, "cpus", spec.limits.CPUs)
	v := s.view()
	return &v, nil
}

func (s *Session) view() api.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	state := api.StateIdle
	if s.busy {
		state = api.StateBusy
	}
	var pausedAt *time.Time
	if !s.pausedAt.IsZero() {
		state = api.StatePaused
		t := s.pausedAt.UTC()
		pausedAt = &t
	}
	var expires *time.Time
	if !s.expires.IsZero() {
		t := s.expires.UTC()
		expires = &t
	}
	return api.Session{
		ID:              s.id,
		Language:        s.language,
		State:           state,
		Limits:          s.box.limits,
		IdleTimeoutS:    int(s.idle.Seconds()),
		ExecutionCount:  s.execCount,
		CreatedAt:       s.created.UTC(),
		LastActiveAt:    s.lastActive.UTC(),
		ExpiresAt:       expires,
		Metadata:        maps.Clone(s.metadata),
		Artifacts:       slices.Clone(s.keep),
		Image:           s.box.image,
		Network:         s.policy.View(),
		IdleAction:      s.idleAction,
		PausedAt:        pausedAt,
		CheckpointBytes: s.checkpointBytes,
	}
}

// register adds s to the registry and tells the subscribers, unless Shutdown began: in
// one step, so that Shutdown either finds s or s is not added, and a session's events are
// told in order.
func (m *Manager) register(s *Session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.adm.isClosed() {
		return false
	}
	m.sessions[s.id] = s
	m.events.publish(Event{Kind: SessionCreated, SessionID: s.id, Tenant: s.tenant})
	return true
}

// unregister removes session id from the registry, giving back its slot and telling the
// subscribers why it ended; nil when it was not there.
func (m *Manager) unregister(id string, why EndReason, detached bool) *Session {
	m.mu.Lock()
	s, ok := m.sessions[id]
	if ok {
		delete(m.sessions, id)
		m.events.publish(Event{Kind: SessionEnded, SessionID: id, Tenant: s.tenant, Reason: why, Detached: detached})
	}
	m.mu.Unlock()
	if !ok {
		return nil
	}
	s.mu.Lock()
	s.closed = true // a resume under way (pause.go) then takes no slot for it
	slot := s.slot
	s.mu.Unlock()
	slot()
	return s
}

// lookup finds a session of ctx's tenant. Another tenant's session is not found, with the
// same answer as one that never existed.
func (m *Manager) lookup(ctx context.Context, id string) (*Session, error) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	m.mu.Unlock()
	if !ok || s.tenant != Tenant(ctx) {
		return nil, notFound(id)
	}
	return s, nil
}

func notFound(id string) error {
	if len(id) > 64 {
		id = id[:64] + "..."
	}
	return fmt.Errorf("no session %q: it never existed, ended, or was idle too long: %w", id, errdefs.ErrNotFound)
}

// Get describes a session.
func (m *Manager) Get(ctx context.Context, id string) (*api.Session, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	v := s.view()
	return &v, nil
}

// live returns the sessions the manager holds now, for a loop that must not hold m.mu.
func (m *Manager) live() []*Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	return all
}

// List describes every live session of ctx's tenant, oldest first.
func (m *Manager) List(ctx context.Context) []api.Session {
	tenant := Tenant(ctx)
	m.mu.Lock()
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		if s.tenant == tenant {
			all = append(all, s)
		}
	}
	m.mu.Unlock()
	out := make([]api.Session, 0, len(all))
	for _, s := range all {
		out = append(out, s.view())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Delete ends a session: everything in its sandbox is killed; its workspace is kept for
// the retention period.
func (m *Manager) Delete(ctx context.Context, id string) error {
	if _, err := m.lookup(ctx, id); err != nil {
		return err
	}
	return m.end(ctx, id, EndDeleted)
}

// end is Delete for the manager itself (idle sessions, deadlines, Shutdown, a sandbox that
// could not be replaced): any tenant's session, ended for the reason why.
func (m *Manager) end(ctx context.Context, id string, why EndReason) error {
	// A session on its way to another node is not ended (it would be ended here while it
	// lives on there): decided under its lock, in one step with closing it.
	m.mu.Lock()
	s, ok := m.sessions[id]
	m.mu.Unlock()
	if ok {
		s.mu.Lock()
		moving := s.moving
		if !moving {
			s.closed = true
		}
		s.mu.Unlock()
		if moving {
			return errMoving(id)
		}
	}
	s = m.unregister(id, why, false)
	if s == nil {
		return notFound(id)
	}
	s.saveMu.Lock()
	s.mu.Lock()
	s.closed = true
	b, paused := s.box, !s.pausedAt.IsZero()
	s.mu.Unlock()
	if err := m.records.remove(id); err != nil {
		m.log.Warn("session ended", "session_id", id, "err", err)
	}
	s.saveMu.Unlock()
	m.log.Info("session ended", "session_id", id, "tenant", s.tenant)
	m.drainUploads(ctx, id)
	if paused {
		m.dropCheckpoint(id)
	}
	return m.discard(ctx, b, true)
}

// detach saves the session's record and lets go of its sandbox, which runs on, once its
// uploads have ended (within ctx).
func (m *Manager) detach(ctx context.Context, s *Session) {
	m.save(s)
	if m.unregister(s.id, EndServerExit, true) == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	b := s.box
	s.mu.Unlock()
	m.drainUploads(ctx, s.id)
	if b.sb == nil { // paused: its checkpoint and record are what lives on
		return
	}
	b.guest.Close()
	if err := b.sb.Detach(); err != nil {
		m.log.Warn("detach sandbox", "session_id", s.id, "err", err)
	}
	m.log.Debug("session detached; it lives on for the next server process", "session_id", s.id)
}

// Owners calls each with the id and tenant of every live session, until it returns false,
// for a front door that must find a session by a secret of its own (an E2B download link,
// which names no sandbox); not for answering a caller (see Owner).
func (m *Manager) Owners(each func(id, tenant string) bool) {
	for _, s := range m.live() {
		if !each(s.id, s.tenant) {
			return
		}
	}
}

// lookupStill is lookup for a call that changes the session: one on its way to another
// node is refused (the change would not go with it).
func (m *Manager) lookupStill(ctx context.Context, id string) (*Session, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	moving := s.moving
	s.mu.Unlock()
	if moving {
		return nil, errMoving(id)
	}
	return s, nil
}

// Has reports whether session id (any tenant's) is here; it tells the caller nothing else.
// For routing within a cluster, never to answer an API's caller.
func (m *Manager) Has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.sessions[id]
	return ok
}

// Owner returns the tenant of the live session id. It is only for a front door that
// authenticates a request by a credential of the session itself (a per-session token, as
// E2B's sandbox traffic carries) instead of by an API key: having checked that credential,
// it calls the Manager as the session's owner, with WithTenant(ctx, tenant). No call of the
// API (REST, MCP, the SDK) answers with it: it reveals nothing to the API's callers, who
// still find only their own tenant's sessions.
func (m *Manager) Owner(id string) (tenant string, ok bool) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	m.mu.Unlock()
	if !ok {
		return "", false
	}
	return s.tenant, true
}

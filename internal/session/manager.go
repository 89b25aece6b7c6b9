// Package session runs cellbox's sessions: it creates them (from a warm pool of ready
// sandboxes when it can), looks them up, serializes their executions, ends idle ones and
// those past their lifetime, cleans up after a crash and shuts down without leaving
// anything running.
//
// Every session belongs to the tenant that created it (see WithTenant): another tenant's
// calls do not find it.
//
// It speaks to sandboxes only through sandbox.Backend and the guest protocol client, and to
// workspaces only through workspace.Store. Not for: HTTP (package httpapi) or the LLM loop.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/workspace"
)

// Manager owns every session and the warm pools.
type Manager struct {
	cfg          config.Config
	defaultImage string // of sessions that name none (config.DefaultImage)
	backend      sandbox.Backend
	store        *workspace.Store
	log          *slog.Logger
	metrics      *metrics

	pools   map[string]*pool // by image: those with a warm pool (config.Pools)
	records records          // sessions that outlive the server process; zero: they end with it
	keep    bool             // sessions outlive the server process (see New)

	mu       sync.Mutex
	sessions map[string]*Session
	starting int // slots reserved by sessions and one-shots being set up or running
	runs     map[*run]bool
	closed   bool
	tenants  tenantUse

	deadlines chan struct{} // a session's deadline was set: the reaper looks again (lifetime.go)

	stopBg   context.CancelFunc
	bg       sync.WaitGroup
	running  sync.WaitGroup // runs: executions and commands, one-shots included
	saves    sync.WaitGroup // saveSoon's writers
	discards sync.WaitGroup // one-shot sandboxes being stopped
}

// Session is one live session. Its exported view is api.Session (Manager.Get).
type Session struct {
	id       string
	tenant   string // who created it; only calls of this tenant find it
	language string
	idle     time.Duration
	created  time.Time
	metadata map[string]string // the creator's labels; never changed
	turn     chan struct{}     // holds one token while an execution or command runs

	saveMu sync.Mutex // held while the session's record is written or removed

	mu         sync.Mutex
	box        *box
	run        *run // the execution or command holding the turn
	lastActive time.Time
	expires    time.Time // the session's deadline (lifetime.go); zero: none
	saved      time.Time // when the record was last written
	busy       bool
	execCount  int
	closed     bool
	dirty      bool   // activity not yet in the record (saveSoon)
	saving     bool   // saveSoon's writer runs
	notice     string // told on the next execution: what happened to the session meanwhile
	spawns     int    // programs Spawn runs beside the turn (spawn.go)
}

// New starts a Manager. Sessions outlive the server process when the backend can attach
// to sandboxes again and cfg.EndSessionsOnExit is off: New then finds the sessions an
// earlier process left (see restore) and ends those idle too long meanwhile. Everything
// else an earlier process left is cleaned up: sandboxes are stopped and workspaces
// released. New sweeps workspaces past retention, then fills a warm pool for each image
// that cfg.Pools gives a size, reaps idle sessions and sweeps again every 10 minutes in the
// background until Shutdown. Sessions that name no image get cfg.DefaultImage().
func New(ctx context.Context, cfg config.Config, backend sandbox.Backend, store *workspace.Store, log *slog.Logger, reg prometheus.Registerer) (*Manager, error) {
	m := &Manager{
		cfg:          cfg,
		defaultImage: cfg.DefaultImage(),
		backend:      backend,
		store:        store,
		log:          log,
		sessions:     map[string]*Session{},
		runs:         map[*run]bool{},
		tenants:      tenantUse{starting: map[string]int{}, running: map[string]int{}},
		keep:         backend.Capabilities().Reattach && !cfg.EndSessionsOnExit,

		deadlines: make(chan struct{}, 1),
	}
	// The records folder is read even when sessions end with the server: a record of an
	// earlier process that kept them is how its sessions get ended here.
	m.records = records{dir: filepath.Join(cfg.StateDir, "sessions")}
	recs, err := m.recover(ctx)
	if err != nil {
		return nil, err
	}
	if !m.keep {
		m.records = records{}
	}
	m.pools = map[string]*pool{}
	for name, size := range cfg.Pools() {
		if size > 0 {
			spec := boxSpec{image: name, limits: m.defaults()}
			m.pools[name] = newPool(size, func(ctx context.Context) (*box, error) {
				return m.startBox(ctx, m.newSessionID(), spec, "")
			}, func(b *box) { m.discard(context.Background(), b, false) }, log.With("image", name))
		}
	}
	m.metrics = newMetrics(reg, m)
	m.restore(ctx, recs)
	m.sweep(ctx) // a short-lived server (cellbox run) may never see its periodic sweep
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.stopBg = cancel
	m.bg.Add(1 + len(m.pools))
	for _, p := range m.pools {
		go func() {
			defer m.bg.Done()
			p.run(bg)
		}()
	}
	go m.reap(bg)
	return m, nil
}

// Backend is the name of the sandbox backend in use.
func (m *Manager) Backend() string { return m.backend.Name() }

// DefaultImage is the image of sessions that name none; "": the backend's own root (the
// host's, for runc with --rootfs host).
func (m *Manager) DefaultImage() string { return m.defaultImage }

// Stats returns the number of live sessions and of warm sandboxes, of every image.
func (m *Manager) Stats() (sessions, pool int) {
	m.mu.Lock()
	n := len(m.sessions)
	m.mu.Unlock()
	for _, p := range m.pools {
		pool += p.len()
	}
	return n, pool
}

// defaults are the limits a session gets when it asks for nothing.
func (m *Manager) defaults() api.Limits {
	return api.Limits{MemoryMB: m.cfg.MemoryMB, CPUs: m.cfg.CPUs, Pids: m.cfg.Pids, DiskMB: m.cfg.DiskMB}
}

// limits resolves requested limits against the defaults and the server's maxima.
func (m *Manager) limits(req *api.Limits) (api.Limits, error) {
	l := m.defaults()
	if req == nil {
		return l, nil
	}
	var errs []error
	set := func(name string, v, max float64, dst func()) {
		switch {
		case v < 0:
			errs = append(errs, fmt.Errorf("limits.%s must not be negative", name))
		case v > max:
			errs = append(errs, fmt.Errorf("limits.%s %v is above this server's maximum %v", name, v, max))
		case v > 0:
			dst()
		}
	}
	set("memory_mb", float64(req.MemoryMB), float64(m.cfg.MaxMemoryMB), func() { l.MemoryMB = req.MemoryMB })
	set("cpus", req.CPUs, m.cfg.MaxCPUs, func() { l.CPUs = req.CPUs })
	set("pids", float64(req.Pids), float64(m.cfg.MaxPids), func() { l.Pids = req.Pids })
	set("disk_mb", float64(req.DiskMB), float64(m.cfg.MaxDiskMB), func() { l.DiskMB = req.DiskMB })
	if req.MemoryMB > 0 && req.MemoryMB < 64 {
		errs = append(errs, errors.New("limits.memory_mb must be at least 64: a Python kernel needs it"))
	}
	if req.Pids > 0 && req.Pids < 16 {
		errs = append(errs, errors.New("limits.pids must be at least 16"))
	}
	if err := errors.Join(errs...); err != nil {
		return l, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	return l, nil
}

const (
	maxEnvVars  = 256
	maxEnvBytes = 64 << 10
)

func checkEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return fmt.Errorf("env has %d variables; at most %d: %w", len(env), maxEnvVars, errdefs.ErrInvalidArgument)
	}
	n := 0
	for k, v := range env {
		n += len(k) + len(v)
		if !validEnvName(k) {
			return fmt.Errorf("env name %q is not valid: use letters, digits and _, not starting with a digit: %w", k, errdefs.ErrInvalidArgument)
		}
		for _, c := range v {
			if c == 0 {
				return fmt.Errorf("env %s contains a NUL byte: %w", k, errdefs.ErrInvalidArgument)
			}
		}
	}
	if n > maxEnvBytes {
		return fmt.Errorf("env is %d bytes; at most %d: %w", n, maxEnvBytes, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validEnvName(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	for i, c := range k {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func checkLanguage(lang string) (string, error) {
	switch lang {
	case "", "python", "python3":
		return "python", nil
	}
	return "", fmt.Errorf("language %q is not supported; use \"python\": %w", lang, errdefs.ErrInvalidArgument)
}

// reserve takes a slot under the session limit and the tenant's.
func (m *Manager) reserve(tenant string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("the server is shutting down: %w", errdefs.ErrUnavailable)
	}
	if len(m.sessions)+m.starting >= m.cfg.MaxSessions {
		return fmt.Errorf("this server runs its maximum of %d sessions; end one (DELETE /v1/sessions/{id}) or retry later: %w",
			m.cfg.MaxSessions, errdefs.ErrResourceExhausted)
	}
	if err := m.tenantFull(tenant); err != nil {
		return err
	}
	m.starting++
	m.tenants.starting[tenant]++
	return nil
}

func (m *Manager) unreserve(tenant string) {
	m.mu.Lock()
	m.starting--
	decr(m.tenants.starting, tenant)
	m.mu.Unlock()
}

// obtain returns a ready box: from its image's warm pool, given the request's limits and
// env (adapt) when they are not the pool's, else a new one.
func (m *Manager) obtain(ctx context.Context, spec boxSpec) (*box, error) {
	// A warm sandbox has the default disk quota, which cannot change.
	if p := m.pools[spec.image]; p != nil && spec.limits.DiskMB == m.defaults().DiskMB {
		if b := p.take(); b != nil {
			changed, err := m.adapt(ctx, b, spec)
			if err == nil {
				m.metrics.poolHits.Inc()
				return b, nil
			}
			m.log.Debug("a warm sandbox could not take the request's limits or env: starting a new one", "sandbox_id", b.id, "error", err)
			if changed || !p.put(b) { // unchanged, it waits for the next request
				go p.discard(b)
			}
		}
		m.metrics.poolMisses.Inc()
	}
	return m.startBox(ctx, m.newSessionID(), spec, "")
}

// resolveImage returns the image a request's sandbox runs on: the one it names, or the
// server's default for "".
func (m *Manager) resolveImage(name string) (string, error) {
	switch {
	case name == "":
		return m.defaultImage, nil
	case m.defaultImage == "":
		return "", fmt.Errorf("image %.100q: this server runs sandboxes on the host's root filesystem; images need --rootfs image (runc) or --backend docker: %w",
			name, errdefs.ErrInvalidArgument)
	}
	return name, image.CheckName(name)
}

// checkSandbox checks what a request asks of its sandbox, Create's and OneShot's alike, and
// returns the language and the sandbox's spec: its image, and its limits with the server's
// defaults filled in.
func (m *Manager) checkSandbox(language, img string, req *api.Limits, env map[string]string) (string, boxSpec, error) {
	lang, err := checkLanguage(language)
	if err != nil {
		return "", boxSpec{}, err
	}
	if img, err = m.resolveImage(img); err != nil {
		return "", boxSpec{}, err
	}
	limits, err := m.limits(req)
	if err != nil {
		return "", boxSpec{}, err
	}
	return lang, boxSpec{image: img, limits: limits, env: env}, checkEnv(env)
}

// Create starts a new session.
func (m *Manager) Create(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error) {
	lang, spec, err := m.checkSandbox(req.Language, req.Image, req.Limits, req.Env)
	if err != nil {
		return nil, err
	}
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
	if err := checkMetadata(req.Metadata); err != nil {
		return nil, err
	}
	tenant := Tenant(ctx)
	if err := m.reserve(tenant); err != nil {
		return nil, err
	}
	defer m.unreserve(tenant)
	b, err := m.obtain(ctx, spec)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	s := &Session{id: b.id, tenant: tenant, language: lang, idle: idle, created: now, lastActive: now, box: b, turn: make(chan struct{}, 1),
		metadata: maps.Clone(req.Metadata)}
	if lifetime > 0 {
		s.expires = now.Add(lifetime)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.discard(context.WithoutCancel(ctx), b, false)
		return nil, fmt.Errorf("the server is shutting down: %w", errdefs.ErrUnavailable)
	}
	m.sessions[s.id] = s
	m.mu.Unlock()
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
	state := "idle"
	if s.busy {
		state = "busy"
	}
	var expires *time.Time
	if !s.expires.IsZero() {
		t := s.expires.UTC()
		expires = &t
	}
	return api.Session{
		ID:             s.id,
		Language:       s.language,
		State:          state,
		Limits:         s.box.limits,
		IdleTimeoutS:   int(s.idle.Seconds()),
		ExecutionCount: s.execCount,
		CreatedAt:      s.created.UTC(),
		LastActiveAt:   s.lastActive.UTC(),
		ExpiresAt:      expires,
		Metadata:       maps.Clone(s.metadata),
		Image:          s.box.image,
	}
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
	return m.end(ctx, id)
}

// end is Delete for the manager itself (idle sessions, Shutdown): any tenant's session.
func (m *Manager) end(ctx context.Context, id string) error {
	m.mu.Lock()
	s, ok := m.sessions[id]
	delete(m.sessions, id)
	m.mu.Unlock()
	if !ok {
		return notFound(id)
	}
	s.saveMu.Lock()
	s.mu.Lock()
	s.closed = true
	b := s.box
	s.mu.Unlock()
	if err := m.records.remove(id); err != nil {
		m.log.Warn("session ended", "session_id", id, "err", err)
	}
	s.saveMu.Unlock()
	m.log.Info("session ended", "session_id", id, "tenant", s.tenant)
	return m.discard(ctx, b, true)
}

// detach saves the session's record and lets go of its sandbox, which runs on.
func (m *Manager) detach(s *Session) {
	m.save(s)
	m.mu.Lock()
	delete(m.sessions, s.id)
	m.mu.Unlock()
	s.mu.Lock()
	s.closed = true
	b := s.box
	s.mu.Unlock()
	b.guest.Close()
	if err := b.sb.Detach(); err != nil {
		m.log.Warn("detach sandbox", "session_id", s.id, "err", err)
	}
	m.log.Debug("session detached; it lives on for the next server process", "session_id", s.id)
}

// discard stops a box and releases (keep) or removes its workspace.
func (m *Manager) discard(ctx context.Context, b *box, keep bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	err := b.stop(ctx)
	if err != nil {
		m.log.Warn("stop sandbox", "sandbox_id", b.id, "err", err)
	}
	var werr error
	if keep {
		werr = m.store.Release(ctx, b.id)
	} else {
		werr = m.store.Remove(ctx, b.id)
	}
	if werr != nil {
		m.log.Warn("release workspace", "session_id", b.id, "err", werr)
	}
	return errors.Join(err, werr)
}

// acquire waits for the session's turn and starts a run in it (see startRun): the returned
// context is the run's, which Interrupt ends; release ends the run and gives the turn back.
func (m *Manager) acquire(ctx context.Context, s *Session) (_ *box, _ context.Context, release func(), _ error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, nil, fmt.Errorf("waiting for the session's running execution to finish: %w", ctx.Err())
	}
	rctx, r, end, err := m.startRun(ctx)
	if err != nil {
		<-s.turn
		return nil, nil, nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		end()
		<-s.turn
		return nil, nil, nil, fmt.Errorf("session %s ended: %w", s.id, errdefs.ErrNotFound)
	}
	s.busy = true
	s.run = r
	s.lastActive = time.Now()
	b := s.box
	s.mu.Unlock()
	m.saveSoon(s)
	return b, rctx, func() {
		s.mu.Lock()
		s.busy = false
		s.run = nil
		s.lastActive = time.Now()
		s.mu.Unlock()
		m.saveSoon(s)
		end()
		<-s.turn
	}, nil
}

// current returns the session's box for a file call, which counts as activity.
func (m *Manager) current(s *Session) *box {
	s.mu.Lock()
	s.lastActive = time.Now()
	b := s.box
	stale := s.lastActive.Sub(s.saved) > saveEvery
	s.mu.Unlock()
	if stale {
		m.saveSoon(s)
	}
	return b
}

func (m *Manager) timeout(t float64) (float64, error) {
	switch {
	case t < 0:
		return 0, fmt.Errorf("timeout_s must not be negative: %w", errdefs.ErrInvalidArgument)
	case t == 0:
		return m.cfg.ExecTimeout.Seconds(), nil
	case t > m.cfg.MaxExecTimeout.Seconds():
		return 0, fmt.Errorf("timeout_s %v is above this server's maximum %v: %w", t, m.cfg.MaxExecTimeout.Seconds(), errdefs.ErrInvalidArgument)
	}
	return t, nil
}

// Execute runs code in a session, after any execution already running there. Outputs go
// to onOutput as they happen (may be nil).
func (m *Manager) Execute(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	s, done, err := m.lookupRun(ctx, id, "execute")
	if err != nil {
		return nil, err
	}
	defer done()
	if req.TimeoutS, err = m.timeout(req.TimeoutS); err != nil {
		return nil, err
	}
	if err := checkExecute(&req); err != nil {
		return nil, err
	}
	b, rctx, release, err := m.acquire(ctx, s)
	if err != nil {
		return nil, err
	}
	defer release()
	res, err := b.guest.Execute(rctx, req, onOutput)
	if err != nil {
		if res, err = m.afterGuestFailure(ctx, s, b, err); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.execCount = res.ExecutionCount
	notice := s.notice
	if notice != "" {
		res.Outputs = append([]api.Output{{Type: api.OutputStream, Name: "stderr", Text: notice}}, res.Outputs...)
		s.notice = ""
	}
	s.mu.Unlock()
	m.metrics.observe("execute", res.Status, time.Duration(res.DurationMS)*time.Millisecond)
	return res, nil
}

// afterGuestFailure handles a guest that stopped answering during an execution: unless the
// session was ended meanwhile, a new sandbox replaces it on the same workspace, and the
// execution is reported as crashed.
func (m *Manager) afterGuestFailure(ctx context.Context, s *Session, b *box, err error) (*api.ExecuteResult, error) {
	if b.alive() && !errors.Is(err, guestproto.ErrGuestGone) {
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("session %s ended while the code ran: %w", s.id, errdefs.ErrNotFound)
	}
	m.log.Warn("sandbox died; starting a new one on the same workspace", "session_id", s.id, "err", err)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	b.stop(cctx)
	cancel()
	nb, serr := m.startBox(context.WithoutCancel(ctx), s.id, b.boxSpec, b.ws)
	if serr != nil {
		m.end(context.WithoutCancel(ctx), s.id)
		return nil, fmt.Errorf("the sandbox stopped and could not be restarted, so the session ended (its files are kept): %w", serr)
	}
	s.mu.Lock()
	if s.closed { // ended while we restarted
		s.mu.Unlock()
		m.discard(ctx, nb, true)
		return nil, fmt.Errorf("session %s ended while the code ran: %w", s.id, errdefs.ErrNotFound)
	}
	s.box = nb
	s.mu.Unlock()
	return &api.ExecuteResult{
		Status:  api.StatusCrashed,
		Outputs: []api.Output{},
		Files:   []api.FileChange{},
		Message: "the sandbox stopped unexpectedly and was restarted: variables are lost, files in /mnt/data are kept",
	}, nil
}

// Interrupt stops what runs in the session, if anything: a cell is interrupted (its state
// kept), a command killed with everything it started. The run's caller gets its result.
func (m *Manager) Interrupt(ctx context.Context, id string) error {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return err
	}
	s.interrupt()
	return nil
}

// interrupt ends the session's run, if any.
func (s *Session) interrupt() {
	s.mu.Lock()
	r := s.run
	s.lastActive = time.Now()
	s.mu.Unlock()
	if r != nil {
		r.cancel()
	}
}

// Restart interrupts whatever runs and gives the session a fresh kernel; files stay.
func (m *Manager) Restart(ctx context.Context, id string) error {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return err
	}
	s.interrupt()
	b, rctx, release, err := m.acquire(ctx, s)
	if err != nil {
		return err
	}
	defer release()
	err = b.guest.Restart(rctx)
	if err != nil && !b.alive() {
		_, err = m.afterGuestFailure(ctx, s, b, err)
	}
	if err == nil {
		s.mu.Lock()
		s.execCount = 0
		s.mu.Unlock()
	}
	return err
}

func checkCommand(req *api.CommandRequest) error {
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return fmt.Errorf("cmd must name a program, e.g. [\"ls\", \"-l\"]: %w", errdefs.ErrInvalidArgument)
	}
	for _, a := range req.Cmd {
		for _, c := range a {
			if c == 0 {
				return fmt.Errorf("cmd arguments must not contain NUL bytes: %w", errdefs.ErrInvalidArgument)
			}
		}
	}
	if req.Cwd != "" {
		if _, err := workspace.Clean(req.Cwd); err != nil {
			return fmt.Errorf("cwd: %w", err)
		}
	}
	return checkEnv(req.Env)
}

// commandRun finds the session of a command (Command, Spawn) and takes the tenant's run
// for it, after checking the request and filling in its timeout; done gives the run back.
func (m *Manager) commandRun(ctx context.Context, id string, req *api.CommandRequest) (_ *Session, done func(), err error) {
	s, done, err := m.lookupRun(ctx, id, "command")
	if err != nil {
		return nil, nil, err
	}
	if err = checkCommand(req); err == nil {
		req.TimeoutS, err = m.timeout(req.TimeoutS)
	}
	if err != nil {
		done()
		return nil, nil, err
	}
	return s, done, nil
}

// Command runs a program in a session, after any execution already running there.
func (m *Manager) Command(ctx context.Context, id string, req api.CommandRequest) (*api.CommandResult, error) {
	s, done, err := m.commandRun(ctx, id, &req)
	if err != nil {
		return nil, err
	}
	defer done()
	b, rctx, release, err := m.acquire(ctx, s)
	if err != nil {
		return nil, err
	}
	defer release()
	res, err := b.guest.Command(rctx, req)
	if err != nil {
		if _, ferr := m.afterGuestFailure(ctx, s, b, err); ferr != nil {
			return nil, ferr
		}
		return &api.CommandResult{Status: api.StatusCrashed, ExitCode: -1, Files: []api.FileChange{},
			Message: "the sandbox stopped unexpectedly and was restarted: files in /mnt/data are kept"}, nil
	}
	m.metrics.observe("command", res.Status, time.Duration(res.DurationMS)*time.Millisecond)
	return res, nil
}

// fileTarget finds the session's guest and cleans a workspace path for it. whole is the
// refusal when the workspace itself (".") is not a valid target; "" when it is.
func (m *Manager) fileTarget(ctx context.Context, id, path, whole string) (*guestproto.Client, string, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, "", err
	}
	rel, err := workspace.Clean(path)
	if err != nil {
		return nil, "", err
	}
	if rel == "." && whole != "" {
		return nil, "", fmt.Errorf("%s: %w", whole, errdefs.ErrInvalidArgument)
	}
	return m.current(s).guest, rel, nil
}

// PutFile writes a workspace file from r.
func (m *Manager) PutFile(ctx context.Context, id, path string, r io.Reader) (*api.FileInfo, error) {
	g, rel, err := m.fileTarget(ctx, id, path, "give a file name to upload to")
	if err != nil {
		return nil, err
	}
	return g.PutFile(ctx, rel, r)
}

// GetFile opens a workspace file; the caller closes the reader.
func (m *Manager) GetFile(ctx context.Context, id, path string) (*api.FileInfo, io.ReadCloser, error) {
	g, rel, err := m.fileTarget(ctx, id, path, "")
	if err != nil {
		return nil, nil, err
	}
	return g.GetFile(ctx, rel)
}

// ListFiles lists a workspace folder.
func (m *Manager) ListFiles(ctx context.Context, id, path string) (*api.FileList, error) {
	g, rel, err := m.fileTarget(ctx, id, path, "")
	if err != nil {
		return nil, err
	}
	return g.ListFiles(ctx, rel)
}

// DeleteFile removes a workspace file or empty folder.
func (m *Manager) DeleteFile(ctx context.Context, id, path string) error {
	g, rel, err := m.fileTarget(ctx, id, path, "the workspace itself cannot be deleted")
	if err != nil {
		return err
	}
	return g.DeleteFile(ctx, rel)
}

// Shutdown refuses new work, ends every run (cells are interrupted, commands killed; their
// callers get their results) and waits for them until ctx ends. Then, when sessions
// outlive the server (see New), it lets go of their sandboxes, which run on for the next
// server process; else it ends every session, keeping its workspace. Warm sandboxes are
// stopped either way. The Manager is unusable afterwards.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	runs := make([]*run, 0, len(m.runs))
	for r := range m.runs {
		runs = append(runs, r)
	}
	m.mu.Unlock()
	m.stopBg()
	m.bg.Wait()
	for _, r := range runs {
		r.cancel()
	}
	ended := make(chan struct{})
	go func() {
		m.running.Wait()
		m.saves.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-ctx.Done():
		m.log.Warn("shutdown: runs still going when time ran out; going on without them")
	}

	// The sessions left now: the reaper (idle, deadlines) may have ended some until it
	// stopped, and no session starts once closed is set.
	all := m.live()

	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.keep {
				m.detach(s)
				return
			}
			if err := m.end(ctx, s.id); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	for _, p := range m.pools {
		for _, b := range p.close() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.discard(ctx, b, false)
			}()
		}
	}
	wg.Wait()
	m.discards.Wait()
	return errors.Join(errs...)
}

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
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/egress"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/workspace"
)

// Manager owns every session and the warm pools.
type Manager struct {
	uploads      *uploader // the artifacts store's; nil: none (artifacts.go)
	cfg          config.Config
	defaultImage string // of sessions that name none (config.DefaultImage)
	backend      sandbox.Backend
	store        *workspace.Store
	log          *slog.Logger
	metrics      *metrics

	pools   map[poolKey]*pool // by image and language: those with a warm pool (config.Pools, LanguagePoolSizes)
	starts  *starts           // bounds the sandbox starts at once, of requests and pools
	records records           // sessions that outlive the server process; zero: they end with it
	keep    bool              // sessions outlive the server process (see New)

	adm    *admission // every kind of work passes it (admission.go)
	net    *network   // egress policies and the gateway (network.go)
	events *events    // told when sessions are created and end (events.go)
	lib    *library   // each tenant's saved tools (library.go)

	mu       sync.Mutex
	sessions map[string]*Session // the registry (registry.go)

	deadlines chan struct{} // a session's deadline was set: the reaper looks again (lifetime.go)
	pausing   chan struct{} // a place for each idle session being paused (reap.go)

	stopBg context.CancelFunc
	bg     sync.WaitGroup // the reaper and the pools' fill loops
}

// Session is one live session. Its exported view is api.Session (Manager.Get).
type Session struct {
	id       string
	tenant   string // who created it; only calls of this tenant find it
	language string
	idle     time.Duration
	created  time.Time
	metadata map[string]string // the creator's labels; never changed
	keep     []string          // patterns of the files kept in the artifacts store; none: all
	turn     *turn             // one execution, command, ... at a time, and spawns beside it
	slot     func()            // gives back the session's slot (admission) when it ends

	idleAction string // api.IdleActionEnd or Pause: what the idle timeout does

	saveMu sync.Mutex   // held while the session's record is written or removed
	wake   sync.RWMutex // read: a call uses the sandbox; write: a pause or resume (pause.go)
	netMu  sync.Mutex   // held while the session's network policy changes (SetNetwork)

	mu         sync.Mutex
	box        *box
	lastActive time.Time
	expires    time.Time // the session's deadline (lifetime.go); zero: none
	saved      time.Time // when the record was last written
	// What the record last written holds of busy, notice and the execution count (mustSave).
	savedBusy   bool
	savedNotice string
	savedCount  int
	busy        bool
	execCount   int
	closed      bool
	dirty       bool           // activity not yet in the record (saveSoon)
	saving      bool           // saveSoon's writer runs
	notice      string         // told on the next execution: what happened to the session meanwhile
	network     *api.Network   // the policy as asked for (nil: the default), for the record
	policy      *egress.Policy // the policy as enforced
	ca          *egress.CA     // the session's certificate authority; nil until a secret needs it
	tools       []*sessionTool // the kernel's tools as last reported and checked, by name (tools.go)
	// pausedAt is when the session was paused (its box has no sandbox then); zero: it is
	// not. checkpointBytes is the disk its checkpoint takes.
	pausedAt        time.Time
	checkpointBytes int64
	// moving: it is paused and on its way to another node (move.go): calls are refused.
	// moves: how many times it moved between nodes.
	moving bool
	moves  int
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
		events:       newEvents(),
		lib:          &library{},
		keep:         backend.Capabilities().Reattach && !cfg.EndSessionsOnExit,

		deadlines: make(chan struct{}, 1),
		pausing:   make(chan struct{}, pausesAtOnce),
	}
	var err error
	if m.net, err = newNetwork(cfg, backend.Capabilities().NoNetwork, log, reg); err != nil {
		return nil, err
	}
	// The gateway's side of a session ends with it.
	m.events.subscribe(func(e Event) {
		if e.Kind == SessionEnded {
			m.net.gw.End(e.SessionID)
		}
	})
	// The records folder is read even when sessions end with the server: a record of an
	// earlier process that kept them is how its sessions get ended here.
	m.records = records{dir: filepath.Join(cfg.StateDir, "sessions")}
	if cfg.StateDir != "" {
		m.lib.dir = filepath.Join(cfg.StateDir, "tools")
	}
	recs, err := m.recover(ctx)
	if err != nil {
		return nil, err
	}
	if !m.keep {
		m.records = records{}
	}
	m.starts = newStarts(startsAtOnce)
	m.pools = map[poolKey]*pool{}
	addPool := func(k poolKey, size int) {
		if size <= 0 {
			return
		}
		spec := boxSpec{image: k.image, limits: m.defaults(), checkpointable: m.poolCheckpointable(), language: k.language}
		// No pool outgrows what the server admits at once.
		hi := cfg.PoolMax
		if cfg.MaxSessions > 0 {
			hi = min(hi, cfg.MaxSessions)
		}
		p := newPool(size, hi, func(ctx context.Context) (*box, error) {
			release, err := m.starts.acquire(ctx, false)
			if err != nil {
				return nil, err
			}
			defer release()
			// A refill holds a slot that requests wait for: a start that hangs (the runtime,
			// the guest, a pre-import) gives it back.
			ctx, cancel := context.WithTimeout(ctx, poolStartTimeout)
			defer cancel()
			b, err := m.startBox(ctx, m.newSessionID(), spec, "")
			if err == nil && k.language != "" {
				if err = m.warmLanguage(ctx, b); err != nil {
					m.discard(ctx, b, false)
					b = nil
				}
			}
			return b, err
		}, func(b *box) { m.discard(context.Background(), b, false) }, log.With("image", k.image, "language", k.language))
		p.room, p.parallel = hostMemoryRoom, startsAtOnce
		m.pools[k] = p
	}
	for name, size := range cfg.Pools() {
		addPool(poolKey{image: name}, size)
	}
	for lang, size := range cfg.LanguagePoolSizes() {
		addPool(poolKey{image: cfg.DefaultImage(), language: lang}, size)
	}
	m.metrics = newMetrics(reg, m)
	m.adm = newAdmission(caps{sessions: cfg.MaxSessions, tenantSessions: cfg.TenantMaxSessions, tenantRuns: cfg.TenantMaxExecutions},
		func(tenant, kind string) { m.metrics.runs.WithLabelValues(tenant, kind).Inc() })
	if kind, missing := m.checkpointKind(); cfg.IdleAction == api.IdleActionPause && kind == "" {
		log.Warn("--idle-action pause: this server cannot pause sessions, so idle sessions end", "why", missing)
	}
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

// poolStartTimeout bounds a warm pool's start of one box.
const poolStartTimeout = 2 * time.Minute

// poolCheckpointable: the warm sandboxes are made checkpointable, as the sessions of the
// server's default idle action are (pause.go).
func (m *Manager) poolCheckpointable() bool { return m.pausable(m.cfg.IdleAction) }

// Backend is the name of the sandbox backend in use.
func (m *Manager) Backend() string { return m.backend.Name() }

// DefaultImage is the image of sessions that name none; "": the backend's own root (the
// host's, for runc with --rootfs host).
func (m *Manager) DefaultImage() string { return m.defaultImage }

// poolTarget is how many warm sandboxes the pools fill to, together.
func (m *Manager) poolTarget() int {
	n := 0
	for _, p := range m.pools {
		n += p.size()
	}
	return n
}

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

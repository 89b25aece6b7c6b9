package egress

import (
	"bufio"
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/cellbox/cellbox/api"
)

// Defaults of Config and Limits.
const (
	DefaultMaxConns      = 32
	defaultDialTimeout   = 10 * time.Second
	defaultHeaderTimeout = 30 * time.Second
	defaultIdleTimeout   = 5 * time.Minute
	// recentFlows is how many connections a session's log keeps.
	recentFlows = 200
	// maxHeaderBytes caps a request's or a response's header.
	maxHeaderBytes = 64 << 10
)

// Config is the operator's side of the gateway.
type Config struct {
	// Ranges says which addresses are never dialed.
	Ranges Ranges
	// Resolver resolves names; nil: the system's.
	Resolver *net.Resolver
	// RootCAs verify the upstreams of intercepted TLS; nil: the system's roots.
	RootCAs *x509.CertPool
	// DialTimeout, HeaderTimeout (a client's request, an upstream's response headers) and
	// IdleTimeout (a connection quiet both ways); zero: 10 s, 30 s, 5 min.
	DialTimeout, HeaderTimeout, IdleTimeout time.Duration
	Log                                     *slog.Logger
	Registerer                              prometheus.Registerer
}

// Limits bound one session's egress.
type Limits struct {
	// MaxConns caps the connections open at once (the client's to the proxy); 0:
	// DefaultMaxConns.
	MaxConns int
	// QuotaBytes caps the bytes both ways over the session's life; 0: none.
	QuotaBytes int64
	// RateBytesPerSec caps the bandwidth, both ways together; 0: none.
	RateBytesPerSec int64
}

// Gateway serves the egress proxies of every session: each connection code in a sandbox
// makes to its proxy arrives here (Serve), and is decided, dialed, relayed and recorded.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	// dial connects to an address the policy allowed: a net.Dialer whose Control checks
	// the address once more. Tests replace it to see that nothing is dialed.
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	// newBucket makes a session's bandwidth cap of bytesPerSec: a rate.Limiter. Tests
	// replace it to count what passes through it.
	newBucket func(bytesPerSec int64) bucket

	mu       sync.Mutex
	sessions map[string]*sess
}

// New makes a gateway.
func New(cfg Config) *Gateway {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = defaultHeaderTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = defaultIdleTimeout
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, log: log, metrics: newMetrics(cfg.Registerer), sessions: map[string]*sess{}}
	g.dial = (&net.Dialer{Timeout: cfg.DialTimeout, Control: g.control}).DialContext
	g.newBucket = func(r int64) bucket { return rate.NewLimiter(rate.Limit(r), burst(r)) }
	return g
}

// bucket is a session's bandwidth cap: a token bucket of bytes.
type bucket interface {
	WaitN(ctx context.Context, n int) error
	Burst() int
}

// sess is one session's egress: its policy, what it used, its open and recent flows.
type sess struct {
	id, tenant string

	mu      sync.Mutex
	policy  *Policy
	limits  Limits
	ca      *CA
	limiter bucket // nil: no bandwidth cap
	clients int    // connections to the proxy open now
	flows   map[*flow]struct{}
	used    int64 // bytes both ways
	recent  []*flow
	next    int // where the next flow goes in recent, once it is full
	ended   bool
	logs    *rate.Limiter // refusals logged (all are recorded)
}

func newSess(id, tenant string) *sess {
	return &sess{id: id, tenant: tenant, flows: map[*flow]struct{}{}, logs: rate.NewLimiter(5, 20)}
}

// Set installs session id's policy, limits and authority (nil: none), or replaces them:
// open connections the new policy refuses are closed, and so are intercepted ones whose
// secret changed.
func (g *Gateway) Set(id, tenant string, p *Policy, l Limits, ca *CA) {
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	g.mu.Lock()
	s := g.sessions[id]
	if s == nil {
		s = newSess(id, tenant)
		g.sessions[id] = s
	}
	g.mu.Unlock()
	s.mu.Lock()
	s.policy, s.ca = p, ca
	if l != s.limits {
		s.limits = l
		s.limiter = nil
		if l.RateBytesPerSec > 0 {
			s.limiter = g.newBucket(l.RateBytesPerSec)
		}
	}
	var kill []*flow
	for f := range s.flows {
		if !f.stillAllowed(g.cfg.Ranges, p) {
			kill = append(kill, f)
		}
	}
	s.mu.Unlock()
	for _, f := range kill {
		f.kill("the session's network policy changed and no longer allows it")
	}
}

// burst is the limiter's bucket for a rate: a tenth of a second, at least one copy buffer.
func burst(r int64) int {
	return int(max(r/10, 64<<10))
}

// End forgets session id and closes its connections.
func (g *Gateway) End(id string) {
	g.mu.Lock()
	s := g.sessions[id]
	delete(g.sessions, id)
	g.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	s.ended = true
	var kill []*flow
	for f := range s.flows {
		kill = append(kill, f)
	}
	s.mu.Unlock()
	for _, f := range kill {
		f.kill("the session ended")
	}
}

// Log is session id's policy, use and recent connections, newest first.
func (g *Gateway) Log(id string) (api.EgressLog, bool) {
	g.mu.Lock()
	s := g.sessions[id]
	g.mu.Unlock()
	if s == nil {
		return api.EgressLog{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := api.EgressLog{Network: s.policy.View(), Open: len(s.flows), BytesUsed: s.used, QuotaBytes: s.limits.QuotaBytes,
		Connections: make([]api.EgressConnection, 0, len(s.recent))}
	n := len(s.recent)
	for i := range n {
		j := n - 1 - i // not yet a ring: newest last
		if n == recentFlows {
			j = (s.next - 1 - i + 2*n) % n // a ring: s.next is the oldest
		}
		out.Connections = append(out.Connections, s.recent[j].view())
	}
	return out, true
}

// Serve serves one connection that code in session id made to its proxy, until it ends.
// It owns c.
func (g *Gateway) Serve(id string, c net.Conn) {
	defer c.Close()
	g.mu.Lock()
	s := g.sessions[id]
	g.mu.Unlock()
	if s == nil {
		// A sandbox not (or no longer) a session's: nothing leaves it.
		s = newSess(id, "")
		s.policy, s.ended = &Policy{Mode: api.EgressNone}, true
	}
	s.mu.Lock()
	over := s.clients >= s.limits.MaxConns && s.limits.MaxConns > 0
	if !over {
		s.clients++
	}
	s.mu.Unlock()
	if !over {
		defer func() {
			s.mu.Lock()
			s.clients--
			s.mu.Unlock()
		}()
	}
	lc := &limitConn{Conn: c, N: -1}
	br := bufio.NewReaderSize(lc, 32<<10)
	c.SetReadDeadline(time.Now().Add(g.cfg.HeaderTimeout))
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	cl := &client{Conn: c, br: br, lim: lc}
	if first[0] == socksVersion {
		g.serveSOCKS(s, cl, over)
		return
	}
	g.serveHTTP(s, cl, over)
}

// client is a connection from the sandbox, read through br.
type client struct {
	net.Conn
	br  *bufio.Reader
	lim *limitConn
}

func (c *client) Read(p []byte) (int, error) { return c.br.Read(p) }

// limitConn caps what may be read through it while N >= 0 (a request's header); N < 0:
// no cap.
type limitConn struct {
	net.Conn
	N int64
}

func (l *limitConn) Read(p []byte) (int, error) {
	if l.N < 0 {
		return l.Conn.Read(p)
	}
	if l.N == 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > l.N {
		p = p[:l.N]
	}
	n, err := l.Conn.Read(p)
	l.N -= int64(n)
	return n, err
}

// admitFlow counts a new flow of s, decided under policy p, or says why it may not start.
func (s *sess) admitFlow(f *flow, p *Policy) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended:
		return "the session has ended"
	case s.policy != p:
		// Set ran since the decision: a flow it did not see must not slip past it.
		return "the session's network policy changed while the connection was decided; try again"
	case s.limits.QuotaBytes > 0 && s.used >= s.limits.QuotaBytes:
		return "this session has used its egress quota of " + formatBytes(s.limits.QuotaBytes)
	}
	s.flows[f] = struct{}{}
	s.addRecent(f)
	return ""
}

// record adds a flow that never started (a refusal) to the recent ones.
func (s *sess) record(f *flow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addRecent(f)
}

// addRecent adds f to the recent flows; s.mu is held.
func (s *sess) addRecent(f *flow) {
	if len(s.recent) < recentFlows {
		s.recent = append(s.recent, f)
	} else {
		s.recent[s.next] = f
		s.next = (s.next + 1) % recentFlows
	}
}

// use counts n bytes against the quota: false when it is used up (and the quota).
func (s *sess) use(n int) (bool, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used += int64(n)
	return s.limits.QuotaBytes <= 0 || s.used <= s.limits.QuotaBytes, s.limits.QuotaBytes
}

// wait waits for the bandwidth cap to allow n bytes.
func (s *sess) wait(ctx context.Context, n int) error {
	s.mu.Lock()
	l := s.limiter
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	for n > 0 {
		k := min(n, l.Burst())
		if err := l.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func (s *sess) snapshot() (*Policy, *CA) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy, s.ca
}

var _ io.Reader = (*client)(nil)

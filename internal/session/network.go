package session

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/egress"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/listen"
)

// Network access: each session has a policy (api.Network) that the egress gateway
// enforces on the connections its sandbox's proxy hands over (package egress). The manager
// decides the policy (the request's, within the tenant's and the server's widest), keeps
// it in the session's record, gives it to the gateway, and ends the gateway's side of a
// session when the session ends.

// network is the manager's side of egress.
type network struct {
	gw       *egress.Gateway
	def, max *egress.Policy           // the server's default and widest
	tenants  map[string]egress.Tenant // the operator's per-tenant settings
	limits   egress.Limits            // the server's per-session limits
	confined bool                     // the backend's sandboxes reach nothing but through the proxy
	// streams caps the streams of a guest's connection when egress streams are accepted:
	// twice the most connections a session may have open (those closing linger), and room
	// for the server's own calls.
	streams int
}

// newNetwork reads the egress settings of cfg.
func newNetwork(cfg config.Config, confined bool, log *slog.Logger, reg prometheus.Registerer) (*network, error) {
	bad := func(flag string, err error) error {
		return fmt.Errorf("--%s: %w", flag, err)
	}
	n := &network{confined: confined, limits: egress.Limits{MaxConns: cfg.EgressMaxConns,
		QuotaBytes: int64(cfg.EgressQuotaMB) << 20, RateBytesPerSec: int64(cfg.EgressRateKiB) << 10},
		streams: 2*cfg.EgressMaxConns + 16}
	maxNet, err := parsePolicyFlag(cfg.EgressMax)
	if err != nil {
		return nil, bad("egress-max", err)
	}
	maxNet.Deny = config.SplitList(cfg.EgressDeny)
	if n.max, err = egress.Compile(maxNet, nil); err != nil {
		return nil, bad("egress-max or --egress-deny", err)
	}
	defNet, err := parsePolicyFlag(cfg.Egress)
	if err != nil {
		return nil, bad("egress", err)
	}
	def, err := egress.Compile(defNet, nil)
	if err != nil {
		return nil, bad("egress", err)
	}
	if n.def, err = egress.Narrow(def, n.max); err != nil {
		return nil, bad("egress", err)
	}
	if n.def.Mode != api.EgressNone && !confined {
		return nil, bad("egress", fmt.Errorf("this backend's sandboxes share the host's network: no policy but none can be enforced"))
	}
	if cfg.EgressTenants != "" {
		data, err := os.ReadFile(cfg.EgressTenants)
		if err != nil {
			return nil, bad("egress-tenants", err)
		}
		if n.tenants, err = egress.LoadTenants(data); err != nil {
			return nil, bad("egress-tenants", err)
		}
		for name, t := range n.tenants {
			// A tenant's sessions that ask for nothing get its default, else the server's:
			// either must be within its widest and the server's.
			if _, err := n.policy(name, nil); err != nil {
				return nil, bad("egress-tenants", fmt.Errorf("tenant %q: its default (or the server's --egress) is not within its max or --egress-max: give it a default: %w", name, err))
			}
			n.streams = max(n.streams, 2*t.MaxConnections+16)
		}
	}
	var allow []netip.Prefix
	for _, s := range config.SplitList(cfg.EgressPrivateAllow) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, bad("egress-private-allow", fmt.Errorf("%q is not a CIDR or an address", s))
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		allow = append(allow, p.Masked())
	}
	var allowServer []netip.AddrPort
	for _, s := range config.SplitList(cfg.EgressAllowServer) {
		ap, err := netip.ParseAddrPort(s)
		if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() || ap.Addr().Zone() != "" {
			return nil, bad("egress-allow-server", fmt.Errorf("%q: name the address and port sessions would dial, e.g. 127.0.0.1:8080 or [::1]:8080", s))
		}
		allowServer = append(allowServer, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	}
	gcfg := egress.Config{Ranges: egress.Ranges{PrivateAllow: allow, Own: ownAddrs(), Listeners: listeners, AllowServer: allowServer},
		Log: log, Registerer: reg}
	if cfg.EgressRoots != "" {
		pem, err := os.ReadFile(cfg.EgressRoots)
		if err != nil {
			return nil, bad("egress-roots", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, bad("egress-roots", fmt.Errorf("no PEM certificate in %s", cfg.EgressRoots))
		}
		gcfg.RootCAs = roots
	}
	if cfg.EgressDNS != "" {
		addr := cfg.EgressDNS
		if _, _, err := net.SplitHostPort(addr); err != nil {
			addr = net.JoinHostPort(addr, "53")
		}
		gcfg.Resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
	}
	n.gw = egress.New(gcfg)
	return n, nil
}

// parsePolicyFlag reads none | public | allowlist:ENTRY,...
func parsePolicyFlag(s string) (api.Network, error) {
	mode, list, _ := strings.Cut(strings.TrimSpace(s), ":")
	switch mode {
	case "", api.EgressNone, api.EgressPublic:
		if list != "" {
			return api.Network{}, fmt.Errorf("%q: entries go with allowlist only (allowlist:ENTRY,...); use --egress-deny to refuse destinations", s)
		}
		return api.Network{Egress: mode}, nil
	case api.EgressAllowlist:
		return api.Network{Egress: mode, Allow: config.SplitList(list)}, nil
	}
	return api.Network{}, fmt.Errorf("%q: want none, public or allowlist:ENTRY,ENTRY", s)
}

// listeners are the server's listeners (package listen): the gateway never dials them, but
// for those --egress-allow-server names.
func listeners() []egress.Listener {
	ss := listen.Sockets()
	out := make([]egress.Listener, len(ss))
	for i, s := range ss {
		out[i] = egress.Listener{Addr: s.Addr, Name: s.Name}
	}
	return out
}

// ownAddrs lists the machine's addresses, looked up again at most every few seconds: the
// gateway never dials one (the server's API and anything else listening on the host).
func ownAddrs() func() []netip.Addr {
	var mu sync.Mutex
	var addrs []netip.Addr
	var at time.Time
	return func() []netip.Addr {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) < 5*time.Second {
			return addrs
		}
		ifs, err := net.InterfaceAddrs()
		if err != nil {
			return addrs
		}
		addrs = addrs[:0:0]
		for _, a := range ifs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				addrs = append(addrs, p.Addr().Unmap())
			}
		}
		at = time.Now()
		return addrs
	}
}

// policy is the policy a session of tenant gets for req (nil: the default): req within
// the tenant's widest and the server's.
func (n *network) policy(tenant string, req *api.Network) (*egress.Policy, error) {
	t, hasTenant := n.tenants[tenant]
	if req == nil {
		p := n.def
		if hasTenant && t.Default != nil {
			p = t.Default
		}
		var err error
		if hasTenant && t.Max != nil {
			if p, err = egress.Narrow(p, t.Max); err != nil {
				return nil, fmt.Errorf("network: the default policy: %w", err)
			}
		}
		return egress.Narrow(p, n.max)
	}
	p, err := egress.Compile(*req, t.Secrets)
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if hasTenant && t.Max != nil {
		if p, err = egress.Narrow(p, t.Max); err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
	}
	if p, err = egress.Narrow(p, n.max); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if p.Mode != api.EgressNone && !n.confined {
		return nil, fmt.Errorf("network: this server's sandboxes (the local-unsafe backend) share the host's network, so no egress policy can be enforced; ask for egress \"none\" or use an isolated backend: %w", errdefs.ErrFailedPrecondition)
	}
	return p, nil
}

// limitsFor is the per-session limits of tenant's sessions.
func (n *network) limitsFor(tenant string) egress.Limits {
	l := n.limits
	if t, ok := n.tenants[tenant]; ok {
		if t.MaxConnections > 0 {
			l.MaxConns = t.MaxConnections
		}
		if t.QuotaBytes > 0 {
			l.QuotaBytes = t.QuotaBytes
		}
		if t.RateBytesPerSec > 0 {
			l.RateBytesPerSec = t.RateBytesPerSec
		}
	}
	return l
}

// applyNetwork gives session s's policy p to the gateway, after making the session's
// certificate authority and having its sandbox trust it when p carries secrets.
func (m *Manager) applyNetwork(ctx context.Context, s *Session, p *egress.Policy) error {
	s.mu.Lock()
	ca, b, g := s.ca, s.box, s.box.guest
	s.mu.Unlock()
	if len(p.Secrets) > 0 && ca == nil {
		var err error
		if ca, err = egress.NewCA(s.id); err != nil {
			return fmt.Errorf("make the session's certificate authority: %w", err)
		}
	}
	if err := m.trust(ctx, b, g, ca); err != nil {
		return err
	}
	s.mu.Lock()
	s.ca, s.policy = ca, p
	s.mu.Unlock()
	m.net.gw.Set(s.id, s.tenant, p, m.net.limitsFor(s.tenant), ca)
	return nil
}

// trust has box b's sandbox trust ca, once.
// g is b's guest as the caller read it (under the session's lock); nil: b is paused, and
// resume has the restored sandbox trust ca.
func (m *Manager) trust(ctx context.Context, b *box, g *guestproto.Client, ca *egress.CA) error {
	if ca == nil || b.trusted.Load() == ca || g == nil {
		return nil
	}
	if err := g.Trust(ctx, ca.CertPEM()); err != nil {
		return err
	}
	b.trusted.Store(ca)
	return nil
}

// serveEgress has guest g hand box id's egress connections to the gateway.
func (m *Manager) serveEgress(g *guestproto.Client, id string) {
	g.ServeEgress(func(c net.Conn) { m.net.gw.Serve(id, c) }, m.net.streams)
}

// SetNetwork replaces session id's egress policy: open connections the new one refuses
// are closed.
func (m *Manager) SetNetwork(ctx context.Context, id string, req api.Network) (*api.Session, error) {
	s, err := m.lookupStill(ctx, id)
	if err != nil {
		return nil, err
	}
	p, err := m.net.policy(s.tenant, &req)
	if err != nil {
		return nil, err
	}
	// One change at a time, so that the record and the gateway end up with the same one.
	s.netMu.Lock()
	defer s.netMu.Unlock()
	if err := m.applyNetwork(ctx, s, p); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.network = &req
	closed := s.closed
	s.mu.Unlock()
	if closed {
		// The session ended meanwhile, and the gateway heard of it before this Set.
		m.net.gw.End(s.id)
		return nil, notFound(id)
	}
	m.save(s)
	m.log.Info("session network changed", "session_id", s.id, "tenant", s.tenant, "egress", p.Mode)
	v := s.view()
	return &v, nil
}

// Egress is session id's egress log: its policy, use and recent connections.
func (m *Manager) Egress(ctx context.Context, id string) (*api.EgressLog, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	l, ok := m.net.gw.Log(s.id)
	if !ok {
		return nil, notFound(id)
	}
	return &l, nil
}

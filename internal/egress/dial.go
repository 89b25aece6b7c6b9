package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// failKind is why a destination was not reached: how the proxy tells its client.
type failKind int

const (
	failRefused     failKind = iota // the policy refused it (HTTP 403, SOCKS "not allowed by ruleset")
	failLimit                       // a limit of the session (HTTP 429)
	failUnreachable                 // no such name, or the dial failed (HTTP 502)
	failTimeout                     // the dial or the upstream took too long (HTTP 504)
)

// failure is a destination not reached, with a sentence for the client.
type failure struct {
	kind failKind
	msg  string
}

// open decides whether code in s may reach h:port, resolves h with the gateway's own
// resolver, and dials the first address the policy allows. The flow it returns is
// admitted and open; the caller finishes it.
func (g *Gateway) open(ctx context.Context, s *sess, h Host, port int, protocol string) (*flow, net.Conn, *failure) {
	f := g.newFlow(s, h, port, protocol)
	p, _ := s.snapshot()
	refuse := func(d Decision) (*flow, net.Conn, *failure) {
		f.refuse(d)
		return nil, nil, &failure{kind: failRefused, msg: d.Reason}
	}
	if port < 1 || port > 65535 {
		return refuse(Decision{Reason: fmt.Sprintf("port %d is not a TCP port", port)})
	}
	var addrs []netip.Addr
	if h.Name != "" {
		f.byName = p.DecideName(h.Name, port)
		if f.byName.Refused {
			return refuse(f.byName)
		}
		if !f.byName.Allowed && !addrRuleFor(p, port) {
			// Only an address rule could allow it, and none is for this port: refused
			// without a DNS query, or names would carry data out through the resolver.
			return refuse(Decision{Refused: true, Reason: f.byName.Reason})
		}
		rctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
		found, err := g.cfg.Resolver.LookupNetIP(rctx, "ip", h.Name)
		cancel()
		if err != nil || len(found) == 0 {
			d := Decision{Reason: fmt.Sprintf("%s does not resolve", h.Name)}
			f.refuse(d)
			return nil, nil, &failure{kind: failUnreachable, msg: d.Reason}
		}
		addrs = found
	} else {
		addrs = []netip.Addr{h.Addr}
	}
	var allowed []netip.Addr
	var first Decision
	for _, a := range addrs {
		a = a.Unmap()
		d := p.DecideAddr(g.cfg.Ranges, h.Name, f.byName, a, port)
		if d.Allowed {
			if len(allowed) == 0 {
				first = d
			}
			allowed = append(allowed, a)
		} else if first.Reason == "" && len(allowed) == 0 {
			first = d
		}
	}
	if len(allowed) == 0 {
		f.refuse(first)
		msg := first.Reason
		if h.Name != "" {
			// The client is told the name was refused, not what the server's resolver
			// answered for it: the record keeps that, the sandbox needs no map of the
			// server's network (split-horizon names and their private addresses).
			for _, a := range addrs {
				msg = strings.ReplaceAll(msg, " ("+a.Unmap().String()+")", "")
			}
		}
		return nil, nil, &failure{kind: failRefused, msg: msg}
	}
	f.rec.Decision, f.rec.Rule, f.rec.Open = "allowed", first.Rule, true
	if why := s.admitFlow(f, p); why != "" {
		f.rec.Decision, f.rec.Open = "refused", false
		d := Decision{Reason: why}
		f.refuse(d)
		return nil, nil, &failure{kind: failLimit, msg: why}
	}
	g.metrics.conns.WithLabelValues(s.tenant, "allowed").Inc()
	var err error
	for _, a := range allowed {
		var c net.Conn
		c, err = g.dial(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			f.mu.Lock()
			f.addr = a
			f.rec.Address = a.String()
			f.mu.Unlock()
			up := &upConn{Conn: c, f: f, idle: g.cfg.IdleTimeout, ctx: f.ctx,
				in: g.metrics.bytes.WithLabelValues(s.tenant, "in"), out: g.metrics.bytes.WithLabelValues(s.tenant, "out")}
			f.onKill(func() { c.Close() })
			// A Set between the admission and the dial decided this flow without its
			// address: decide it again now that it has one.
			if now, _ := s.snapshot(); now != p && !f.stillAllowed(g.cfg.Ranges, now) {
				f.kill("the session's network policy changed and no longer allows it")
				f.finish()
				return nil, nil, &failure{kind: failRefused, msg: "the session's network policy changed and no longer allows it"}
			}
			return f, up, nil
		}
	}
	fail := &failure{kind: failUnreachable, msg: fmt.Sprintf("could not connect to %s port %d: %s", h, port, dialReason(err))}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		fail.kind = failTimeout
	}
	f.setReason(fail.msg)
	f.finish()
	return nil, nil, fail
}

// addrRuleFor reports whether p has an allow rule for an address (not a name) on port.
func addrRuleFor(p *Policy, port int) bool {
	for _, r := range p.Allow {
		if r.Domain == "" && (r.Port == 0 || r.Port == port) {
			return true
		}
	}
	return false
}

// tooMany is why a connection past its session's MaxConns is refused.
const tooMany = "this session has too many egress connections open; close some and try again"

// refuseOver records a destination refused because its session has too many connections
// open: a refusal is on the record like any other.
func (g *Gateway) refuseOver(s *sess, h Host, port int, protocol string) {
	g.newFlow(s, h, port, protocol).refuse(Decision{Reason: tooMany})
}

// control checks, as the socket is about to connect, that the address is one the gateway
// may dial: a second look, after the policy's, at exactly what the kernel is given.
func (g *Gateway) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return err
	}
	if why := g.cfg.Ranges.Blocked(ap.Addr().Unmap(), int(ap.Port())); why != "" {
		return fmt.Errorf("refused to dial %s: %s", ap.Addr(), why)
	}
	return nil
}

// dialReason is a dial error as a client may read it: no addresses of the server's side.
func dialReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host"
	case errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	}
	return "connection failed"
}

// deadline is now plus d.
func deadline(d time.Duration) time.Time { return time.Now().Add(d) }

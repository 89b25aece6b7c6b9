package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellbox/cellbox/api"
)

var (
	errHeaderTooLarge = errors.New("request header too large")
	errQuota          = errors.New("egress quota used up")
)

// flow is one upstream connection (for a plain HTTP request, that request's): its record,
// and what kill closes.
type flow struct {
	g     *Gateway
	s     *sess
	start time.Time

	host     Host
	port     int
	protocol string
	byName   Decision // the name's decision, kept to decide again when the policy changes

	mu      sync.Mutex
	rec     api.EgressConnection
	addr    netip.Addr
	secret  http.Header // the headers added, when intercepted or plain HTTP
	closers []func()    // run when the flow ends, however
	killers []func()    // run only when it is killed (the client's connection, for plain requests)
	done    bool
	killed  bool

	// ctx ends with the flow: a wait for the bandwidth cap does not outlive it.
	ctx    context.Context
	cancel context.CancelFunc

	out, in atomic.Int64
}

func (g *Gateway) newFlow(s *sess, h Host, port int, protocol string) *flow {
	f := &flow{g: g, s: s, start: time.Now(), host: h, port: port, protocol: protocol}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.rec = api.EgressConnection{Time: f.start.UTC(), Host: h.String(), Port: port, Protocol: protocol}
	return f
}

// onKillOnly adds something kill closes, and the flow's normal end does not.
func (f *flow) onKillOnly(c func()) {
	f.mu.Lock()
	killed := f.killed
	if !f.done {
		f.killers = append(f.killers, c)
	}
	f.mu.Unlock()
	if killed {
		c()
	}
}

// onKill adds something kill closes.
func (f *flow) onKill(c func()) {
	f.mu.Lock()
	done := f.done
	if !done {
		f.closers = append(f.closers, c)
	}
	f.mu.Unlock()
	if done {
		c()
	}
}

// kill closes the flow's connections, noting why (kept if the flow has a reason already).
func (f *flow) kill(why string) {
	f.mu.Lock()
	if f.rec.Reason == "" {
		f.rec.Reason = why
	}
	cs := append(f.closers, f.killers...)
	f.closers, f.killers = nil, nil
	f.done, f.killed = true, true
	f.mu.Unlock()
	f.cancel()
	for _, c := range cs {
		c()
	}
}

// refuse records a refusal; the flow never started.
func (f *flow) refuse(d Decision) {
	f.mu.Lock()
	f.rec.Decision, f.rec.Rule, f.rec.Reason = "refused", d.Rule, d.Reason
	f.rec.DurationMS = time.Since(f.start).Milliseconds()
	f.done = true
	f.mu.Unlock()
	f.cancel()
	f.s.record(f)
	f.g.metrics.conns.WithLabelValues(f.s.tenant, "refused").Inc()
	// Code can be refused as fast as it connects: the log gets a sample, the record
	// and the metric all of them.
	if f.s.logs.Allow() {
		f.g.log.Info("egress refused", "session_id", f.s.id, "tenant", f.s.tenant, "host", f.rec.Host, "port", f.port,
			"protocol", f.protocol, "rule", d.Rule, "reason", d.Reason)
	}
}

// finish records the end of an allowed flow.
func (f *flow) finish() {
	f.mu.Lock()
	if f.rec.Open {
		f.rec.Open = false
		f.rec.DurationMS = time.Since(f.start).Milliseconds()
	}
	f.done = true
	cs := f.closers
	f.closers, f.killers = nil, nil
	rec := f.rec
	f.mu.Unlock()
	f.cancel()
	for _, c := range cs {
		c()
	}
	s := f.s
	s.mu.Lock()
	delete(s.flows, f)
	s.mu.Unlock()
	out, in := f.out.Load(), f.in.Load()
	f.g.log.Info("egress", "session_id", s.id, "tenant", s.tenant, "host", rec.Host, "address", rec.Address, "port", f.port,
		"protocol", f.protocol, "decision", "allowed", "rule", rec.Rule, "intercepted", rec.Intercepted, "status", rec.Status,
		"bytes_out", out, "bytes_in", in, "duration_ms", rec.DurationMS, "reason", rec.Reason)
}

// setStatus notes an HTTP status (plain or intercepted requests).
func (f *flow) setStatus(code int) {
	f.mu.Lock()
	f.rec.Status = code
	f.mu.Unlock()
}

// setReason notes why a flow ended early, unless it has a reason already.
func (f *flow) setReason(why string) {
	f.mu.Lock()
	if f.rec.Reason == "" {
		f.rec.Reason = why
	}
	f.mu.Unlock()
}

func (f *flow) view() api.EgressConnection {
	f.mu.Lock()
	r := f.rec
	if r.Open {
		r.DurationMS = time.Since(f.start).Milliseconds()
	}
	f.mu.Unlock()
	r.BytesOut, r.BytesIn = f.out.Load(), f.in.Load()
	return r
}

// stillAllowed decides the flow again under p: its name, the address it dialed, and for
// an intercepted or plain HTTP flow, the secret it adds.
func (f *flow) stillAllowed(r Ranges, p *Policy) bool {
	f.mu.Lock()
	addr, secret, intercepted := f.addr, f.secret, f.rec.Intercepted
	f.mu.Unlock()
	byName := Decision{}
	if f.host.Name != "" {
		byName = p.DecideName(f.host.Name, f.port)
		if byName.Refused {
			return false
		}
	}
	if addr.IsValid() && !p.DecideAddr(r, f.host.Name, byName, addr, f.port).Allowed {
		return false
	}
	if intercepted || secret != nil {
		return headersEqual(secret, p.SecretFor(f.host.Name))
	}
	return true
}

func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w := b[k]
		if len(v) != len(w) {
			return false
		}
		for i := range v {
			if v[i] != w[i] {
				return false
			}
		}
	}
	return true
}

// upConn is the upstream side of a flow: it counts bytes, applies the quota, the
// bandwidth cap and the idle timeout.
type upConn struct {
	net.Conn
	f    *flow
	idle time.Duration
	ctx  context.Context

	in, out prometheus.Counter // the tenant's byte counters
}

func (c *upConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.f.in.Add(int64(n))
		c.in.Add(float64(n))
		if ok, quota := c.f.s.use(n); !ok {
			c.f.setReason("this session has used its egress quota of " + formatBytes(quota))
			return n, errQuota
		}
		if werr := c.f.s.wait(c.ctx, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}

func (c *upConn) Write(p []byte) (int, error) {
	if err := c.f.s.wait(c.ctx, len(p)); err != nil {
		return 0, err
	}
	if ok, quota := c.f.s.use(len(p)); !ok {
		c.f.setReason("this session has used its egress quota of " + formatBytes(quota))
		return 0, errQuota
	}
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	// Counted before the write: the upstream may answer, and the answer reach the
	// client, before this goroutine runs again; a record read then has these bytes.
	c.f.out.Add(int64(len(p)))
	n, err := c.Conn.Write(p)
	if n < len(p) {
		c.f.out.Add(int64(n - len(p)))
	}
	c.out.Add(float64(n))
	return n, err
}

type metrics struct {
	conns *prometheus.CounterVec // by tenant and decision
	bytes *prometheus.CounterVec // by tenant and direction
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cellbox_egress_connections_total",
			Help: "Connections code in sandboxes asked the egress proxy for, by tenant and decision (allowed, refused)."}, []string{"tenant", "decision"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cellbox_egress_bytes_total",
			Help: "Bytes through the egress proxy, by tenant and direction (out: toward the destination; in: back)."}, []string{"tenant", "direction"}),
	}
	if reg != nil {
		reg.MustRegister(m.conns, m.bytes)
	}
	return m
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

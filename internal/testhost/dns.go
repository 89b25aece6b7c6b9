package testhost

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS is an authoritative DNS server for the names a test sets: A and AAAA records, NXDOMAIN
// for every other name, no answer records for other types of a known name. It refuses nothing.
type DNS struct {
	mu    sync.Mutex
	names map[string][]netip.Addr // by lowercase name without the final dot
}

func newDNS() *DNS { return &DNS{names: map[string][]netip.Addr{}} }

// Set makes name (any case, with or without the final dot) resolve to addrs, IPv4 as A
// records and IPv6 as AAAA, replacing what it had; with no addrs the name exists but has none.
func (d *DNS) Set(name string, addrs ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names[dnsKey(name)] = append([]netip.Addr(nil), addrs...)
}

func dnsKey(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// ttl is short so that a test's change is seen at once by a resolver that caches.
const ttl = 1

// answer makes the response to the query req, or nil when req is not worth one (not even
// a header to answer to). max is the largest response the transport takes: past it, the
// answers are left out and the response is marked truncated.
func (d *DNS) answer(req []byte, max int) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil || h.Response {
		return nil
	}
	resp := dnsmessage.Message{Header: dnsmessage.Header{
		ID: h.ID, Response: true, OpCode: h.OpCode, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true,
	}}
	qs, err := p.AllQuestions()
	switch {
	case err != nil || len(qs) != 1:
		resp.RCode = dnsmessage.RCodeFormatError
	case h.OpCode != 0:
		resp.RCode = dnsmessage.RCodeNotImplemented
		resp.Questions = qs
	default:
		q := qs[0]
		resp.Questions = qs
		d.mu.Lock()
		addrs, ok := d.names[dnsKey(q.Name.String())]
		d.mu.Unlock()
		if !ok {
			resp.RCode = dnsmessage.RCodeNameError
			break
		}
		for _, a := range addrs {
			rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: ttl}
			switch {
			case q.Class != dnsmessage.ClassINET && q.Class != dnsmessage.ClassANY:
			case a.Is4() && (q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeALL):
				rh.Type = dnsmessage.TypeA
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: a.As4()}})
			case a.Is6() && (q.Type == dnsmessage.TypeAAAA || q.Type == dnsmessage.TypeALL):
				rh.Type = dnsmessage.TypeAAAA
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		}
	}
	out, err := resp.Pack()
	if err == nil && len(out) > max {
		resp.Answers, resp.Truncated = nil, true
		out, err = resp.Pack()
	}
	if err != nil {
		return nil
	}
	return out
}

// serve answers at addr in h over UDP and TCP until t ends.
func (d *DNS) serve(t testing.TB, h *Host, addr netip.AddrPort) {
	pc := h.ListenPacket(t, "udp", addr.String())
	l := h.Listen(t, "tcp", addr.String())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
		ended bool
	)
	wg.Go(func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := d.answer(buf[:n], 512); out != nil {
				pc.WriteTo(out, from)
			}
		}
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			if ended {
				c.Close()
			}
			mu.Unlock()
			wg.Go(func() {
				d.serveConn(c)
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		pc.Close()
		l.Close()
		mu.Lock()
		ended = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// serveConn answers the queries on one TCP connection, each with its two-byte length, until
// the client closes it or stays idle for a while.
func (d *DNS) serveConn(c net.Conn) {
	defer c.Close()
	for {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		req := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		out := d.answer(req, 65535)
		if out == nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
			return
		}
	}
}

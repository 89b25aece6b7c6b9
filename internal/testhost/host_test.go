package testhost

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// resolver asks only the Host's DNS server, over the transport network names ("udp" or
// "tcp": Go's resolver frames by the kind of connection it gets).
func resolver(h *Host, network string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, h.DNSAddr())
	}}
}

// TestHost resolves a name through the Host's DNS server and fetches it over HTTPS from
// the Host, from each of its addresses: traffic goes from the host into the namespace.
func TestHost(t *testing.T) {
	h := New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tests := []struct {
		name, ask string // as set and as asked: names are case-insensitive
		addr      netip.Addr
	}{
		{"api.test.example", "API.Test.Example", h.Addr(0)},
		{"one.test.example", "one.test.example", h.Addr(1)},
		{"two.test.example", "two.test.example.", h.Addr(2)},
		{"v6.test.example", "v6.test.example", h.Addr6()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, addr := tt.ask, tt.addr
			h.DNS.Set(tt.name, addr)
			h.ServeTLS(t, netip.AddrPortFrom(addr, 443), []string{tt.name}, Echo())
			for _, network := range []string{"udp", "tcp"} {
				got, err := resolver(h, network).LookupNetIP(ctx, "ip", name)
				if err != nil || len(got) != 1 || got[0] != addr {
					t.Fatalf("resolve %s over %s: %v, %v; want %v", name, network, got, err, addr)
				}
			}
			c := &http.Client{Transport: &http.Transport{
				DialContext:       (&net.Dialer{Resolver: resolver(h, "udp")}).DialContext,
				TLSClientConfig:   &tls.Config{RootCAs: h.CA.Pool()},
				ForceAttemptHTTP2: true,
			}}
			defer c.CloseIdleConnections()
			resp, err := c.Get("https://" + name + "/hello")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var echo EchoReply
			if err := json.NewDecoder(resp.Body).Decode(&echo); err != nil {
				t.Fatal(err)
			}
			from, err := netip.ParseAddrPort(echo.RemoteAddr)
			if err != nil {
				t.Fatal(err)
			}
			wantFrom := h.HostAddr()
			if addr.Is6() {
				wantFrom = h.hostAddr6()
			}
			if echo.Host != name || echo.Path != "/hello" || !echo.TLS || echo.Proto != "HTTP/2.0" || from.Addr() != wantFrom {
				t.Errorf("echo %+v; want from %v", echo, wantFrom)
			}
		})
	}
	if _, err := resolver(h, "udp").LookupNetIP(ctx, "ip", "unknown.test.example"); !isNotFound(err) {
		t.Errorf("an unknown name: %v, want not found", err)
	}
	for _, f := range []string{h.CAFile(), h.BundleFile()} {
		if b, err := os.ReadFile(f); err != nil || len(b) == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func isNotFound(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr) && dnsErr.IsNotFound
}

// TestHostUDP: a datagram from the host reaches a socket in the namespace and back.
func TestHostUDP(t *testing.T) {
	h := New(t)
	pc := h.ListenPacket(t, "udp", netip.AddrPortFrom(h.Addr(1), 0).String())
	go func() {
		buf := make([]byte, 100)
		n, from, err := pc.ReadFrom(buf)
		if err == nil {
			pc.WriteTo(buf[:n], from)
		}
	}()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("%q, %v", buf[:n], err)
	}
}

// TestHostSilent: the connection is accepted and nothing ever comes back.
func TestHostSilent(t *testing.T) {
	h := New(t)
	addr := h.ListenSilent(t, netip.AddrPortFrom(h.Addr(2), 0))
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want a timeout", n, err)
	}
}

// TestHostsTwo: two Hosts at once have their own slots, addresses and servers.
func TestHostsTwo(t *testing.T) {
	a, b := New(t), New(t)
	if a.Slot() == b.Slot() || a.Addr(0) == b.Addr(0) || a.Addr6() == b.Addr6() {
		t.Fatalf("slots %d and %d, %v and %v", a.Slot(), b.Slot(), a.Addr(0), b.Addr(0))
	}
	a.DNS.Set("x.example", a.Addr(0))
	b.DNS.Set("x.example", b.Addr(0))
	for _, h := range []*Host{a, b} {
		got, err := resolver(h, "udp").LookupNetIP(context.Background(), "ip4", "x.example")
		if err != nil || len(got) != 1 || got[0] != h.Addr(0) {
			t.Errorf("slot %d: %v, %v", h.Slot(), got, err)
		}
	}
}

// TestRootsEnv: a Go process given RootsEnv trusts the test root and no other, and one given
// only SSL_CERT_FILE trusts the host's roots too.
func TestRootsEnv(t *testing.T) {
	if os.Getenv("TESTHOST_COUNT_ROOTS") != "" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			t.Fatal(err)
		}
		//lint:ignore SA1019 counting the roots of the system pool, which it is not
		fmt.Printf("roots=%d\n", len(pool.Subjects()))
		return
	}
	h := New(t)
	count := func(env ...string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRootsEnv$")
		cmd.Env = append(os.Environ(), append(env, "TESTHOST_COUNT_ROOTS=1")...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return regexp.MustCompile(`roots=\d+`).FindString(string(out))
	}
	if got := count(h.RootsEnv()...); got != "roots=1" {
		t.Errorf("with RootsEnv: %s, want roots=1", got)
	}
	if _, err := os.Stat("/etc/ssl/certs"); err == nil {
		if got := count("SSL_CERT_FILE=" + h.CAFile()); got == "roots=1" {
			t.Errorf("with SSL_CERT_FILE only: %s, want the host's roots too", got)
		}
	}
}

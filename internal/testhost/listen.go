package testhost

import (
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
)

// Listen listens on network ("tcp", "tcp4", "tcp6") at addr (an address of the Host, or a
// wildcard; port 0 picks one) inside the Host's namespace, and closes the listener when t ends.
func (h *Host) Listen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	var l net.Listener
	err := inNetns(h.nsfd, func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		t.Fatalf("testhost: listen on %s %s in the test host: %v", network, addr, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// ListenPacket is Listen for "udp", "udp4" and "udp6".
func (h *Host) ListenPacket(t testing.TB, network, addr string) net.PacketConn {
	t.Helper()
	var c net.PacketConn
	err := inNetns(h.nsfd, func() (err error) {
		c, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		t.Fatalf("testhost: listen on %s %s in the test host: %v", network, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ListenSilent accepts TCP connections at addr and never reads or writes on them, until t
// ends. It returns the address it listens on.
func (h *Host) ListenSilent(t testing.TB, addr netip.AddrPort) netip.AddrPort {
	t.Helper()
	l := h.Listen(t, "tcp", addr.String())
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return addrPort(l)
}

// ServeHTTP serves handler over plain HTTP at addr in the Host until t ends, and returns the
// address it listens on.
func (h *Host) ServeHTTP(t testing.TB, addr netip.AddrPort, handler http.Handler) netip.AddrPort {
	t.Helper()
	l := h.Listen(t, "tcp", addr.String())
	serve(t, l, handler, nil)
	return addrPort(l)
}

// ServeTLS serves handler over HTTPS (HTTP/1.1 and h2) at addr in the Host until t ends, with
// a certificate for names (DNS names or IP addresses) issued by h.CA, and returns the
// address it listens on.
func (h *Host) ServeTLS(t testing.TB, addr netip.AddrPort, names []string, handler http.Handler) netip.AddrPort {
	t.Helper()
	cert, err := h.CA.Issue(names...)
	if err != nil {
		t.Fatal(err)
	}
	l := h.Listen(t, "tcp", addr.String())
	serve(t, l, handler, &tls.Config{Certificates: []tls.Certificate{cert}})
	return addrPort(l)
}

func serve(t testing.TB, l net.Listener, handler http.Handler, tlsConfig *tls.Config) {
	tl := &testLog{t: t}
	srv := &http.Server{Handler: handler, TLSConfig: tlsConfig, ErrorLog: log.New(tl, "", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		if tlsConfig != nil {
			err = srv.ServeTLS(l, "", "")
		} else {
			err = srv.Serve(l)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			tl.Write([]byte("testhost: serve: " + err.Error()))
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
		tl.stop()
	})
}

// testLog sends a server's log (a TLS handshake a client refused, say) to the test's log
// while the test runs, and drops what comes after: t.Log after a test ends panics.
type testLog struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Logf("%s", p)
	}
	return len(p), nil
}

func (l *testLog) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}

func addrPort(l net.Listener) netip.AddrPort {
	ap := l.Addr().(*net.TCPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

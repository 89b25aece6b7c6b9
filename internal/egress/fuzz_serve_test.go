package egress

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
)

// syncBuffer is a bytes.Buffer for a logger that goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FuzzServe: whatever code in a sandbox sends its proxy, Serve answers or closes, and
// returns: no panic, no hang. The session has no internet, so nothing it sends is allowed:
// no record and no log line says "allowed", and nothing is dialed (the dialer fails the
// test; the resolver fails too, so nothing leaves this machine even through DNS).
func FuzzServe(f *testing.F) {
	var logged syncBuffer
	g := New(Config{
		Resolver: &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("no DNS in this test")
		}},
		HeaderTimeout: time.Second, DialTimeout: time.Second, IdleTimeout: time.Second,
		Log: slog.New(slog.NewTextHandler(&logged, nil)),
	})
	var dialed syncBuffer
	g.dial = func(_ context.Context, _, address string) (net.Conn, error) {
		dialed.Write([]byte(address + " "))
		return nil, errors.New("this test dials nothing")
	}
	g.Set("fuzz", "tenant", &Policy{Mode: api.EgressNone}, Limits{}, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })

	for _, s := range []string{
		"CONNECT echo.example:443 HTTP/1.1\r\nHost: echo.example:443\r\n\r\n",
		"CONNECT [::1]:80 HTTP/1.1\r\n\r\n",
		"CONNECT 2130706433:80 HTTP/1.1\r\n\r\n",
		"CONNECT :0 HTTP/1.1\r\n\r\n",
		"CONNECT 192.0.2.1:443 HTTP/1.1\r\n\r\n",
		"GET http://echo.example/ HTTP/1.1\r\nHost: other.example\r\n\r\nGET http://a/ HTTP/1.1\r\n\r\n",
		"GET http://198.51.100.7/ HTTP/1.1\r\n\r\nGET http://[2001:db8::7]:8080/ HTTP/1.1\r\n\r\n",
		"POST http://echo.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: echo.example\r\n\r\n",
		"GET ftp://x/ HTTP/1.1\r\n\r\n",
		"\x05\x01\x00\x05\x01\x00\x03\x0cecho.example\x00\x50",
		"\x05\x01\x00\x05\x01\x00\x01\xa9\xfe\xa9\xfe\x00\x50",
		"\x05\x01\x00\x05\x01\x00\x01\xcb\x00\x71\x09\x00\x50",
		"\x05\x01\x00\x05\x01\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x50",
		"\x05\x01\x00\x05\x02\x00\x01\x00\x00\x00\x00\x00\x00",
		"\x05\xff",
		"\x05\x01\x02",
		"\x16\x03\x01\x00\x05hello",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() {
			defer close(served)
			g.Serve("fuzz", s)
		}()
		go func() {
			c.Write(in)
			c.(*net.TCPConn).CloseWrite()
		}()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); isTimeout(err) {
			t.Fatalf("the proxy neither answered nor closed within 10 s")
		}
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return within 10 s of closing")
		}
		if d := dialed.String(); d != "" {
			t.Fatalf("a session without internet had %s dialed", d)
		}
		log, _ := g.Log("fuzz")
		for _, r := range log.Connections {
			if r.Decision != "refused" {
				t.Fatalf("a session without internet has a record %+v", r)
			}
		}
		if out := logged.String(); strings.Contains(out, "decision=allowed") || strings.Contains(out, "msg=egress ") {
			t.Fatalf("a session without internet had a connection logged as allowed:\n%s", out)
		}
	})
}

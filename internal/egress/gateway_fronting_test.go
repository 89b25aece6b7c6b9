package egress

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
)

// clientHello is the first TLS record a Go client sends for sni.
func clientHello(t *testing.T, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	b.SetDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// split is a TLS record of handshake messages cut in two records at k bytes of its body.
func split(rec []byte, k int) []byte {
	body := rec[5:]
	out := []byte{rec[0], rec[1], rec[2], byte(k >> 8), byte(k)}
	out = append(out, body[:k]...)
	out = append(out, rec[0], rec[1], rec[2], byte((len(body)-k)>>8), byte(len(body)-k))
	return append(out, body[k:]...)
}

// cut reads c to its end and fails unless the proxy sent nothing more and closed it.
func cut(t *testing.T, c net.Conn, r io.Reader) {
	t.Helper()
	b, err := io.ReadAll(r)
	if len(b) != 0 {
		t.Errorf("read %q after the cut", b)
	}
	if err != nil && !isReset(err) {
		t.Errorf("read: %v; want the end or a reset", err)
	}
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe")
}

// TestGatewayFronting: a tunnel carries what its host asked for, under that host's name;
// a TLS server name or a Host header naming another is cut, and so is a request that hides
// its name where the gateway does not look.
func TestGatewayFronting(t *testing.T) {
	e := newEnv(t, nil)
	allow := api.Network{Egress: "allowlist", Allow: []string{"echo.example", e.h.Addr(0).String()}}
	const fronting = "(domain fronting is refused)"

	t.Run("SNI of the tunnel's host", func(t *testing.T) {
		sb := e.session(t, allow, Limits{})
		code, _, c, _ := sb.connect("echo.example:443")
		if code != 200 {
			t.Fatalf("CONNECT: %d", code)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "echo.example", RootCAs: e.h.CA.Pool()})
		fmt.Fprintf(tc, "GET /ok HTTP/1.1\r\nHost: echo.example\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("through the tunnel: %v, %v", resp, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if echo := echoOf(t, string(b)); echo.Host != "echo.example" || !echo.TLS {
			t.Errorf("echo %+v", echo)
		}
		io.Copy(io.Discard, tc) // the server closes first: nothing is left in flight
		// Closed without TLS's close_notify: that alert would reach a server that has
		// closed its socket, whose kernel answers it with a reset, which may come before
		// the gateway has read the server's end: the record would say it broke.
		c.Close()
		r := sb.done()
		wantRecord(t, r, "allowed", "echo.example", "")
	})

	snis := []struct {
		name, target, sni, rule, reason string
	}{
		{"SNI of another name", "echo.example:443", "other.example", "echo.example",
			"the TLS server name other.example is not the tunnel's host echo.example " + fronting},
		{"SNI of another name, other case", "echo.example:443", "Echo.Example.Evil", "echo.example",
			"the TLS server name echo.example.evil is not the tunnel's host echo.example " + fronting},
		{"SNI of a name not allowed, to an allowed address", e.h.Addr(0).String() + ":443", "other.example", e.h.Addr(0).String(),
			"the TLS server name other.example is not allowed by this session's policy"},
	}
	for _, tt := range snis {
		t.Run(tt.name, func(t *testing.T) {
			sb := e.session(t, allow, Limits{})
			code, _, c, _ := sb.connect(tt.target)
			if code != 200 {
				t.Fatalf("CONNECT: %d", code)
			}
			tc := tls.Client(c, &tls.Config{ServerName: tt.sni, RootCAs: e.h.CA.Pool()})
			if err := tc.Handshake(); err == nil {
				t.Fatalf("the handshake with SNI %s went through", tt.sni)
			}
			r := sb.done()
			wantRecord(t, r, "allowed", tt.rule, tt.reason)
			if r.BytesOut != 0 {
				t.Errorf("record %+v: %d bytes went upstream", r, r.BytesOut)
			}
		})
	}

	// A ClientHello split over two records: the name may be in the second; the gateway
	// reads the first only, and refuses what it cannot read.
	t.Run("ClientHello split over two records", func(t *testing.T) {
		sb := e.session(t, allow, Limits{})
		code, _, c, br := sb.connect("echo.example:443")
		if code != 200 {
			t.Fatalf("CONNECT: %d", code)
		}
		hello := clientHello(t, "other.example")
		if _, err := c.Write(split(hello, 40)); err != nil {
			t.Fatal(err)
		}
		cut(t, c, br)
		r := sb.done()
		wantRecord(t, r, "allowed", "echo.example", "the client's first TLS record is not a ClientHello the proxy can read")
		if r.BytesOut != 0 {
			t.Errorf("record %+v: %d bytes went upstream", r, r.BytesOut)
		}
	})

	// Plain HTTP in a tunnel: each request names the tunnel's host.
	t.Run("plain HTTP over CONNECT with another Host", func(t *testing.T) {
		sb := e.session(t, allow, Limits{})
		code, _, c, br := sb.connect("echo.example:80")
		if code != 200 {
			t.Fatalf("CONNECT: %d", code)
		}
		fmt.Fprintf(c, "GET /first HTTP/1.1\r\nHost: echo.example\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("first request: %v, %v", resp, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if echo := echoOf(t, string(b)); echo.Host != "echo.example" || echo.Path != "/first" {
			t.Errorf("echo %+v", echo)
		}
		sent := sb.last().BytesOut
		fmt.Fprintf(c, "GET /second HTTP/1.1\r\nHost: other.example\r\n\r\n")
		cut(t, c, br)
		r := sb.done()
		wantRecord(t, r, "allowed", "echo.example", "a request's Host other.example is not the tunnel's host echo.example "+fronting)
		if r.BytesOut != sent {
			t.Errorf("record %+v: %d bytes went upstream after the first request's %d", r, r.BytesOut, sent)
		}
	})

	// An absolute-form request whose Host is not the URL's host, as curl sends it with
	// -H "Host: ...": the URL decides, and the upstream gets the URL's host in Host (RFC 9112
	// 3.2.2: a proxy ignores the Host header of an absolute-form request and replaces it).
	t.Run("absolute form with another Host", func(t *testing.T) {
		sb := e.session(t, allow, Limits{})
		for _, host := range []string{"other.example", "echo.example:8080", "ECHO.example"} {
			out, err := curl(t, "-x", "http://"+sb.addr, "-H", "Host: "+host, "-w", "\n%{http_code}", "http://echo.example/")
			body, code := lastLine(out)
			if err != nil || code != "200" || echoOf(t, body).Host != "echo.example" {
				t.Errorf("Host %s: %s %q, %v; want the echo of Host echo.example", host, code, body, err)
			}
			if r := sb.done(); r.Host != "echo.example" || r.Port != 80 || r.Address != e.h.Addr(0).String() {
				t.Errorf("Host %s: record %+v; want echo.example:80", host, r)
			}
		}
		out, err := curl(t, "-x", "http://"+sb.addr, "-H", "Host: echo.example", "-w", "\n%{http_code}", "http://other.example/")
		body, code := lastLine(out)
		if err != nil || code != "403" {
			t.Errorf("URL of a refused host: %s %q, %v; want 403", code, body, err)
		}
		wantRefusal(t, 403, body, 403, "other.example:80 ("+e.h.Addr(2).String()+") is not in this session's allowlist")
		wantRecord(t, sb.last(), "refused", "", "other.example:80")
	})

	// A header past 64 KiB, in a proxy request and inside a tunnel.
	t.Run("100 KiB header", func(t *testing.T) {
		sb := e.session(t, allow, Limits{})
		big := strings.Repeat("a", 100<<10)
		c := sb.dial()
		go fmt.Fprintf(c, "GET http://echo.example/ HTTP/1.1\r\nHost: echo.example\r\nX-Big: %s\r\n\r\n", big)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		wantRefusal(t, resp.StatusCode, string(b), http.StatusRequestHeaderFieldsTooLarge, "the request's header is larger than 64 KiB")

		code, _, c, br := sb.connect("echo.example:80")
		if code != 200 {
			t.Fatalf("CONNECT: %d", code)
		}
		go fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: echo.example\r\nX-Big: %s\r\n\r\n", big)
		cut(t, c, br)
		r := sb.done()
		wantRecord(t, r, "allowed", "echo.example", "the client sent a request the proxy could not read")
		if r.BytesOut != 0 {
			t.Errorf("record %+v: bytes went upstream", r)
		}
	})

	// The client follows a redirect to a host its policy refuses: the second request is
	// refused, and both are on the record.
	t.Run("redirect to a refused host", func(t *testing.T) {
		sb := e.session(t, api.Network{Egress: "allowlist", Allow: []string{"redir.example"}}, Limits{})
		code, body := get(t, sb.client(nil), "http://redir.example:82/")
		wantRefusal(t, code, body, http.StatusForbidden, "other.example:80 is not in this session's allowlist")
		log, _ := e.g.Log(sb.id)
		if len(log.Connections) != 2 {
			t.Fatalf("records %+v; want 2", log.Connections)
		}
		wantRecord(t, log.Connections[0], "refused", "", "other.example:80")
		first := log.Connections[1]
		wantRecord(t, first, "allowed", "redir.example", "")
		if first.Host != "redir.example" || first.Port != 82 || first.Status != http.StatusFound {
			t.Errorf("first record %+v; want redir.example:82 answered 302", first)
		}
	})
}

package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/testhost"
)

// upgrader is an upstream that takes a websocket upgrade (101, then echoes what it gets;
// with ?big=1, a 101 whose header is 100 KiB), refuses one with the status in ?code= (the
// connection stays HTTP), and answers anything else as Echo does.
func upgrader() http.Handler {
	echo := testhost.Echo()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := r.URL.Query().Get("code"); c != "" {
			code, _ := strconv.Atoi(c)
			w.WriteHeader(code)
			fmt.Fprint(w, "no upgrade")
			return
		}
		if r.Header.Get("Upgrade") != "websocket" {
			echo.ServeHTTP(w, r)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		big := ""
		if r.URL.Query().Get("big") != "" {
			big = "X-Big: " + strings.Repeat("a", 100<<10) + "\r\n"
		}
		fmt.Fprint(rw, "HTTP/1.1 101 Switching Protocols\r\n"+big+"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		io.Copy(conn, rw) // echoes until the client closes
	})
}

// TestGatewayUpgrade: inside a tunnel, plain or intercepted, an upgrade the upstream refuses
// leaves the connection HTTP: the next request is read, and one naming another host is cut
// (domain fronting behind a refused upgrade); an upgrade the upstream takes (101) carries
// the new protocol both ways.
func TestGatewayUpgrade(t *testing.T) {
	e := newEnv(t, nil)
	e.h.DNS.Set("ws.example", e.h.Addr(2))
	e.h.ServeHTTP(t, netip.AddrPortFrom(e.h.Addr(2), 84), upgrader())
	e.h.ServeTLS(t, netip.AddrPortFrom(e.h.Addr(0), 8443), []string{"secret.example"}, upgrader())
	n := api.Network{Egress: "allowlist", Allow: []string{"ws.example", "secret.example", "other.example"},
		Secrets: []api.EgressSecret{{Domain: "secret.example", Headers: map[string]string{"Authorization": "Bearer s3cret"}}}}

	paths := []struct {
		name        string
		tunnel      string // the tunnel's host name, and the rule that allows it
		host        string // as a request's Host says it
		intercepted bool
	}{
		{"plain", "ws.example", "ws.example:84", false},
		{"intercepted", "secret.example", "secret.example:8443", true},
	}
	// open makes a tunnel to target: the connection, as TLS to the gateway when the
	// tunnel is intercepted.
	open := func(t *testing.T, sb *sbox, target string, intercepted bool) (net.Conn, *bufio.Reader) {
		t.Helper()
		code, _, c, br := sb.connect(target)
		if code != 200 {
			t.Fatalf("CONNECT %s: %d", target, code)
		}
		if !intercepted {
			return c, br
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM([]byte(sb.ca.CertPEM()))
		tc := tls.Client(c, &tls.Config{ServerName: "secret.example", RootCAs: roots, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS through the gateway: %v", err)
		}
		return tc, bufio.NewReader(tc)
	}
	request := func(t *testing.T, c net.Conn, br *bufio.Reader, head string) *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		return resp
	}

	for _, p := range paths {
		for _, code := range []int{200, 400, 426} {
			t.Run(p.name+"/refused with "+strconv.Itoa(code), func(t *testing.T) {
				sb := e.session(t, n, Limits{})
				c, br := open(t, sb, p.host, p.intercepted)
				resp := request(t, c, br, "GET /chat?code="+strconv.Itoa(code)+" HTTP/1.1\r\nHost: "+p.host+
					"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != code || string(b) != "no upgrade" {
					t.Fatalf("the upgrade: %d %q; want %d", resp.StatusCode, b, code)
				}
				// Still HTTP: a request for the tunnel's host goes through, read and checked.
				resp = request(t, c, br, "GET /after HTTP/1.1\r\nHost: "+p.host+"\r\n\r\n")
				b, _ = io.ReadAll(resp.Body)
				if echo := echoOf(t, string(b)); resp.StatusCode != 200 || echo.Path != "/after" {
					t.Fatalf("the next request: %d %+v", resp.StatusCode, echo)
				}
				sent := sb.last().BytesOut
				// Another host behind the same front: cut, nothing of it sent.
				fmt.Fprintf(c, "GET /fronted HTTP/1.1\r\nHost: other.example\r\n\r\n")
				cut(t, c, br)
				r := sb.done()
				wantRecord(t, r, "allowed", p.tunnel, "a request's Host other.example is not the tunnel's host "+p.tunnel+" (domain fronting is refused)")
				if r.BytesOut != sent {
					t.Errorf("record %+v: %d bytes went upstream after the first requests' %d", r, r.BytesOut, sent)
				}
			})
		}
		// h2c would carry HTTP/2 with each request's host where the gateway does not read
		// it: the offer is not passed on, and the connection stays HTTP/1.1.
		t.Run(p.name+"/h2c not offered", func(t *testing.T) {
			sb := e.session(t, n, Limits{})
			c, br := open(t, sb, p.host, p.intercepted)
			resp := request(t, c, br, "GET /h2c HTTP/1.1\r\nHost: "+p.host+
				"\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
			b, _ := io.ReadAll(resp.Body)
			echo := echoOf(t, string(b))
			if resp.StatusCode != 200 || len(echo.Header["Upgrade"]) != 0 || len(echo.Header["Http2-Settings"]) != 0 {
				t.Fatalf("the upstream got %d %+v; want no Upgrade, no HTTP2-Settings", resp.StatusCode, echo)
			}
			fmt.Fprintf(c, "GET /fronted HTTP/1.1\r\nHost: other.example\r\n\r\n")
			cut(t, c, br)
			wantRecord(t, sb.done(), "allowed", p.tunnel, "a request's Host other.example is not the tunnel's host "+p.tunnel)
		})
		// An answer the gateway cannot read (a header past 64 KiB) switches nothing: the
		// tunnel is cut.
		t.Run(p.name+"/101 with a 100 KiB header", func(t *testing.T) {
			sb := e.session(t, n, Limits{})
			c, br := open(t, sb, p.host, p.intercepted)
			fmt.Fprintf(c, "GET /chat?big=1 HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", p.host)
			io.Copy(io.Discard, br) // what the upstream sent, then the cut
			wantRecord(t, sb.done(), "allowed", p.tunnel, "the server did not answer the upgrade with a response the proxy could read")
		})
		t.Run(p.name+"/switched", func(t *testing.T) {
			sb := e.session(t, n, Limits{})
			c, br := open(t, sb, p.host, p.intercepted)
			resp := request(t, c, br, "GET /chat HTTP/1.1\r\nHost: "+p.host+
				"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
			if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "websocket" {
				t.Fatalf("the upgrade: %d %v", resp.StatusCode, resp.Header)
			}
			// The new protocol, both ways (the upstream echoes): whatever it carries, even
			// what looks like a request for another host, is the websocket's.
			for _, msg := range []string{"\x81\x05hello", "GET / HTTP/1.1\r\nHost: other.example\r\n\r\n"} {
				if _, err := io.WriteString(c, msg); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
					t.Fatalf("echo of %q: %q, %v", msg, got, err)
				}
			}
			c.Close()
			r := sb.done()
			wantRecord(t, r, "allowed", p.tunnel, "")
			if p.intercepted && (!r.Intercepted || r.Status != http.StatusSwitchingProtocols) {
				t.Errorf("record %+v: want intercepted, status 101", r)
			}
		})
	}
}

// TestGatewayUpgradeAfterBanner: in a tunnel whose upstream spoke before the client (a
// banner), the gateway does not read the upstream's answers, so an upgrade there is cut:
// nothing would tell it whether the upstream switched.
func TestGatewayUpgradeAfterBanner(t *testing.T) {
	e := newEnv(t, nil)
	l := e.h.Listen(t, "tcp", netip.AddrPortFrom(e.h.Addr(2), 85).String())
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "220 ready\r\n")
				io.Copy(io.Discard, c)
			}()
		}
	}()
	e.h.DNS.Set("banner.example", e.h.Addr(2))
	sb := e.session(t, api.Network{Egress: "allowlist", Allow: []string{"banner.example"}}, Limits{})
	code, _, c, br := sb.connect("banner.example:85")
	if code != 200 {
		t.Fatalf("CONNECT: %d", code)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "220 ready\r\n" {
		t.Fatalf("the banner: %q, %v", line, err)
	}
	fmt.Fprintf(c, "GET /chat HTTP/1.1\r\nHost: banner.example:85\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	cut(t, c, br)
	wantRecord(t, sb.done(), "allowed", "banner.example", "an upgrade is refused where the proxy cannot read the server's answer")
}

func TestUpgradeOf(t *testing.T) {
	for in, want := range map[string]string{
		"websocket":          "websocket",
		"h2c":                "",
		"H2C":                "",
		"h2c/1.0, websocket": "websocket",
		"websocket, h2c":     "websocket",
		"TLS/1.0":            "TLS/1.0",
		"":                   "",
	} {
		h := http.Header{}
		if in != "" {
			h.Set("Upgrade", in)
		}
		if got := upgradeOf(h); got != want {
			t.Errorf("upgradeOf(%q) = %q, want %q", in, got, want)
		}
	}
}

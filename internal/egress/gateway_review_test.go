package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
)

// rawUpstream serves each connection at addr in the test host with answer, after reading
// the request's header.
func rawUpstream(t *testing.T, e *env, port uint16, answer func(c net.Conn)) string {
	l := e.h.Listen(t, "tcp", netip.AddrPortFrom(e.h.Addr(2), port).String())
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				answer(c)
			}()
		}
	}()
	return netip.AddrPortFrom(e.h.Addr(2), port).String()
}

// Found by a review: the plain proxy's answers, and what a tunnel may carry.
func TestGatewayResponses(t *testing.T) {
	e := newEnv(t, nil)

	t.Run("attack/response_header_too_large", func(t *testing.T) {
		addr := rawUpstream(t, e, 84, func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\n")
			pad := "X-Pad: " + strings.Repeat("x", 1000) + "\r\n"
			for range 8 << 10 { // 8 MiB of header, were it read
				if _, err := io.WriteString(c, pad); err != nil {
					return
				}
			}
		})
		sb := e.session(t, api.Network{Egress: "public"}, Limits{})
		code, body := get(t, sb.client(nil), "http://"+addr+"/")
		wantRefusal(t, code, body, http.StatusBadGateway, "sent a response header larger than 64 KiB")
		if r := sb.done(); r.BytesIn > 1<<20 {
			t.Errorf("the gateway read %d bytes of header", r.BytesIn)
		}
	})
	t.Run("informational_then_final", func(t *testing.T) {
		addr := rawUpstream(t, e, 85, func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
			io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone")
		})
		sb := e.session(t, api.Network{Egress: "public"}, Limits{})
		code, body := get(t, sb.client(nil), "http://"+addr+"/")
		if code != http.StatusCreated || body != "done" {
			t.Errorf("%d %q; want the final 201", code, body)
		}
		if r := sb.done(); r.Status != http.StatusCreated {
			t.Errorf("record %+v", r)
		}
	})
	t.Run("keep_alive", func(t *testing.T) {
		sb := e.session(t, api.Network{Egress: "public"}, Limits{})
		c := sb.dial()
		br := bufio.NewReader(c)
		for i := range 3 {
			fmt.Fprintf(c, "GET http://echo.example/%d HTTP/1.1\r\nHost: echo.example\r\n\r\n", i)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d on one connection: %v", i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || echoOf(t, string(b)).Path != fmt.Sprintf("/%d", i) || resp.Close {
				t.Errorf("request %d: %d %q close=%v", i, resp.StatusCode, b, resp.Close)
			}
		}
	})
	t.Run("half_close", func(t *testing.T) {
		sb := e.session(t, api.Network{Egress: "public"}, Limits{})
		c := sb.dial()
		fmt.Fprintf(c, "GET http://blob.example/ HTTP/1.1\r\nHost: blob.example\r\n\r\n")
		c.(*net.TCPConn).CloseWrite() // as `nc -N` and shutdown(SHUT_WR) do
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || n != blobSize {
			t.Errorf("after a half-close: %d of %d bytes, %v", n, blobSize, err)
		}
	})
	t.Run("attack/trace_with_a_secret", func(t *testing.T) {
		sb := e.session(t, api.Network{Egress: "public", Secrets: []api.EgressSecret{
			{Domain: "echo.example", Headers: map[string]string{"Authorization": "Bearer s3cret"}}}}, Limits{})
		c := sb.dial()
		fmt.Fprintf(c, "TRACE http://echo.example/ HTTP/1.1\r\nHost: echo.example\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		wantRefusal(t, resp.StatusCode, string(b), http.StatusForbidden, "TRACE to a domain with a secret is refused")
		if strings.Contains(string(b), "s3cret") {
			t.Errorf("the secret came back: %q", b)
		}
	})
	// Fronting by Host in a tunnel, behind what a first look would take for another protocol.
	for name, first := range map[string]string{
		"long_method":   "PROPFIND / HTTP/1.1\r\nHost: echo.example\r\n\r\nGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
		"leading_crlf":  "\r\nGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
		"lower_method":  "get / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
		"second_fronts": "GET / HTTP/1.1\r\nHost: echo.example\r\n\r\nGET / HTTP/1.1\r\nHost: evil.example\r\n\r\n",
	} {
		t.Run("attack/tunnel_"+name, func(t *testing.T) {
			sb := e.session(t, api.Network{Egress: "public"}, Limits{})
			code, _, c, br := sb.connect("echo.example:80")
			if code != 200 {
				t.Fatalf("CONNECT: %d", code)
			}
			io.WriteString(c, first)
			got, _ := io.ReadAll(br) // the tunnel is cut: EOF after what came back
			if strings.Contains(string(got), `"Host":"evil.example"`) || strings.Contains(string(got), "evil.example") {
				t.Errorf("a request for evil.example reached the upstream: %q", got)
			}
			if r := sb.done(); r.Reason == "" {
				t.Errorf("record %+v: want the reason it was cut", r)
			}
		})
	}
}

// A tunnel whose client and upstream are both silent ends at the idle timeout.
func TestGatewayIdleTunnel(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	sb := e.session(t, api.Network{Egress: "public"}, Limits{})
	code, _, c, br := sb.connect("silent.example:83")
	if code != 200 {
		t.Fatalf("CONNECT: %d", code)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Error("a silent tunnel sent something")
	}
	r := sb.done()
	if !strings.Contains(r.Reason, "idle") {
		t.Errorf("record %+v: want it ended as idle", r)
	}
}

// An answer's header reaches the client in one write: a flow killed mid-header leaves the
// client no header at all (an error it reports), never a status line alone, which curl
// takes for a whole answer.
func TestResponseHeaderInOneWrite(t *testing.T) {
	var writes [][]byte
	w := &headerFirst{w: writerFunc(func(p []byte) (int, error) {
		writes = append(writes, append([]byte(nil), p...))
		return len(p), nil
	})}
	resp := &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, ContentLength: -1, TransferEncoding: []string{"chunked"},
		Header: http.Header{"Content-Type": {"text/plain"}, "X-Many": {"a", "b", "c"}}, Body: io.NopCloser(strings.NewReader("."))}
	if err := resp.Write(w); err != nil {
		t.Fatal(err)
	}
	if len(writes) < 2 || !bytes.HasPrefix(writes[0], []byte("HTTP/1.1 200 OK\r\n")) || !bytes.HasSuffix(writes[0], []byte("\r\n\r\n")) ||
		!bytes.Contains(writes[0], []byte("X-Many: c\r\n")) {
		t.Errorf("writes %q; want the whole header first, in one", writes)
	}
}

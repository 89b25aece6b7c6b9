package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// A tunnel (CONNECT, SOCKS5) carries what the client sends to the destination it named.
// The gateway looks at the client's first bytes: a TLS ClientHello must name the tunnel's
// host (or, for an address, a name the policy allows), and plain HTTP requests must carry
// it in Host, each of them: no fronting of another domain behind an allowed one. An
// upgrade (a websocket) ends that reading only once the upstream has answered it 101
// Switching Protocols; any other answer leaves the connection HTTP, read request by
// request. For a domain that carries a secret, TLS is terminated with the session's
// authority, and the requests inside get the secret's headers. Anything else is relayed as
// it is.

const (
	tlsHandshake = 0x16
	// maxHelloRecord bounds the first TLS record the gateway reads to find the SNI.
	maxHelloRecord = 16384 + 2048
)

var errStop = errors.New("stop")

// tunnel relays between cl and up until both sides end, or the flow is killed.
func (g *Gateway) tunnel(ctx context.Context, f *flow, cl *client, up net.Conn) {
	p, ca := f.s.snapshot()
	var secret http.Header
	if f.host.Name != "" {
		secret = p.SecretFor(f.host.Name)
	}
	if secret != nil {
		// Noted at once: a policy change that takes the secret away or changes it ends
		// this tunnel, whatever it turns out to carry.
		f.mu.Lock()
		f.secret = secret
		f.mu.Unlock()
	}
	if secret != nil && ca != nil {
		// A client speaks first to a web server: wait for its first byte.
		cl.SetReadDeadline(deadline(g.cfg.HeaderTimeout))
		b, err := cl.br.Peek(1)
		cl.SetReadDeadline(time.Time{})
		if err != nil {
			return
		}
		if b[0] == tlsHandshake {
			g.intercept(ctx, f, cl, up, secret, ca)
			return
		}
	}
	d := &down{f: f}
	downErr := make(chan error, 1)
	go func() {
		err := d.run(cl.Conn, up)
		if err == nil {
			closeWrite(cl.Conn)
		} else {
			// Silence past the idle timeout, or a broken upstream: the client's side,
			// which may be waiting on a silent client, ends too.
			f.kill("the connection broke or was idle too long")
		}
		downErr <- err
	}()
	err := g.fromClient(f, cl.br, cl.lim, up, secret, false, d)
	if err != nil {
		f.kill(err.Error())
	} else {
		closeWrite(up)
	}
	if derr := <-downErr; derr != nil {
		f.kill("the connection broke")
	}
}

// fromClient carries the client's bytes (read through br) to up, looking at the first
// ones: see the comment above. lim caps a request header while it is read (nil: none); d
// carries the upstream's answers. A nil error is the client's end; an error says why the
// flow is cut.
func (g *Gateway) fromClient(f *flow, br *bufio.Reader, lim *limitConn, up net.Conn, secret http.Header, intercepted bool, d *down) error {
	b, err := br.Peek(1)
	if err != nil {
		return nil
	}
	switch {
	case b[0] == tlsHandshake && !intercepted:
		sni, err := readSNI(br)
		if err != nil {
			return err
		}
		if why := g.checkSNI(f, sni); why != "" {
			return errors.New(why)
		}
	case looksHTTP(br):
		d.speaksHTTP()
		return g.requests(f, br, lim, up, secret, d)
	}
	_, err = relay(up, br)
	if errors.Is(err, errQuota) {
		return err
	}
	return nil
}

// checkSNI says why a tunnel's TLS server name is refused, or "".
func (g *Gateway) checkSNI(f *flow, sni string) string {
	if sni == "" {
		return ""
	}
	h, err := ParseHost(sni)
	if err != nil || h.Name == "" {
		return fmt.Sprintf("the TLS server name %q is not a host name", sni)
	}
	if f.host.Name != "" {
		if h.Name != f.host.Name {
			return fmt.Sprintf("the TLS server name %s is not the tunnel's host %s (domain fronting is refused)", h.Name, f.host.Name)
		}
		return ""
	}
	// A tunnel to an address: the name it asks the server for must be allowed by name too.
	p, _ := f.s.snapshot()
	if d := p.DecideName(h.Name, f.port); !d.Allowed {
		return fmt.Sprintf("the TLS server name %s is not allowed by this session's policy", h.Name)
	}
	return ""
}

// requests carries plain HTTP requests from br to up, each with the tunnel's host in Host
// and the secret's headers set. The answers flow back beside it, as they are, through d.
// After a request to upgrade, it waits for the answer's status: 101, and the client's bytes
// are relayed unread from then on; anything else, and the next request is read and checked.
func (g *Gateway) requests(f *flow, br *bufio.Reader, lim *limitConn, up net.Conn, secret http.Header, d *down) error {
	for {
		if lim != nil {
			lim.N = maxHeaderBytes
		}
		req, err := http.ReadRequest(br)
		if lim != nil {
			lim.N = -1
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errors.New("the client sent a request the proxy could not read")
		}
		if req.Method == http.MethodConnect {
			return errors.New("CONNECT inside a tunnel is refused")
		}
		host := req.Host
		if host == "" {
			return errors.New("a request without a Host header")
		}
		h, port, err := splitHostPort(hostPortOf(host, f.port))
		if err != nil || h != f.host || port != f.port {
			return fmt.Errorf("a request's Host %s is not the tunnel's host %s (domain fronting is refused)", trimHost(host), f.host)
		}
		out := outgoing(req, secret)
		out.Close = req.Close
		upgrade := upgradeOf(req.Header)
		answer, read := d.send(req.Method, upgrade != "")
		if upgrade != "" {
			if !read {
				return errors.New("an upgrade is refused where the proxy cannot read the server's answer (it spoke first, or not HTTP)")
			}
			out.Header.Set("Connection", "Upgrade")
			out.Header.Set("Upgrade", upgrade)
		}
		if err := out.Write(up); err != nil {
			if errors.Is(err, errQuota) {
				return err
			}
			return errors.New("the connection broke")
		}
		if upgrade == "" {
			continue
		}
		code, ok := <-answer
		if !ok {
			return errors.New("the server did not answer the upgrade with a response the proxy could read")
		}
		if code != http.StatusSwitchingProtocols {
			continue // not switched: the next request is HTTP, and checked
		}
		_, err = relay(up, br)
		if errors.Is(err, errQuota) {
			return err
		}
		return nil
	}
}

// upgradeOf is the Upgrade header of a request, without h2c: HTTP/2 inside the tunnel would
// carry each request's host where the proxy does not read it, and a client that offers h2c
// goes on in HTTP/1.1 when the server does not take it.
func upgradeOf(h http.Header) string {
	var keep []string
	for _, v := range h.Values("Upgrade") {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			name, _, _ := strings.Cut(p, "/")
			if p != "" && !strings.EqualFold(name, "h2c") {
				keep = append(keep, p)
			}
		}
	}
	return strings.Join(keep, ", ")
}

// intercept terminates TLS on both sides, with a certificate of the session's authority
// toward the client and the host's roots toward the upstream, and carries the requests
// between them with the secret's headers.
func (g *Gateway) intercept(ctx context.Context, f *flow, cl *client, up net.Conn, secret http.Header, ca *CA) {
	leaf, err := ca.leaf(f.host.Name)
	if err != nil {
		f.kill("could not make a certificate")
		return
	}
	tcl := tls.Server(cl, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	tcl.SetDeadline(deadline(g.cfg.HeaderTimeout))
	if err := tcl.HandshakeContext(ctx); err != nil {
		f.kill("the client's TLS handshake failed")
		return
	}
	tcl.SetDeadline(time.Time{})
	if sni := tcl.ConnectionState().ServerName; sni != "" && !strings.EqualFold(sni, f.host.Name) {
		f.kill(fmt.Sprintf("the TLS server name %s is not the tunnel's host %s (domain fronting is refused)", sni, f.host.Name))
		return
	}
	tup := tls.Client(up, &tls.Config{ServerName: f.host.Name, RootCAs: g.cfg.RootCAs, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	hctx, cancel := context.WithTimeout(ctx, g.cfg.HeaderTimeout)
	err = tup.HandshakeContext(hctx)
	cancel()
	if err != nil {
		why := fmt.Sprintf("TLS with %s failed", f.host.Name)
		var ve *tls.CertificateVerificationError
		if errors.As(err, &ve) {
			why = fmt.Sprintf("%s's certificate did not verify against the server's roots", f.host.Name)
		}
		f.kill(why)
		return
	}
	f.mu.Lock()
	f.rec.Intercepted = true
	f.secret = secret
	f.mu.Unlock()
	d := &down{f: f, status: true}
	downErr := make(chan error, 1)
	go func() {
		err := d.run(tcl, tup)
		if err == nil {
			closeWrite(tcl)
		} else {
			f.kill("the connection broke or was idle too long")
		}
		downErr <- err
	}()
	lt := &limitConn{Conn: tcl, N: -1} // caps the requests' headers, in plain text
	err = g.fromClient(f, bufio.NewReaderSize(lt, 32<<10), lt, tup, secret, true, d)
	if err != nil {
		f.kill(err.Error())
	} else {
		closeWrite(tup)
	}
	if derr := <-downErr; derr != nil {
		f.kill("the connection broke")
	}
}

// closeWrite ends c's sending side, leaving its receiving side open.
func closeWrite(c net.Conn) {
	switch c := c.(type) {
	case *tls.Conn:
		c.CloseWrite()
		closeWrite(c.NetConn())
	case *client:
		closeWrite(c.Conn)
	case *limitConn:
		closeWrite(c.Conn)
	case *upConn:
		closeWrite(c.Conn)
	case *yamux.Stream:
		c.Close() // a yamux stream's Close is a half-close
	case interface{ CloseWrite() error }:
		c.CloseWrite()
	default:
		c.Close()
	}
}

// looksHTTP reports whether br starts like an HTTP request: a method (any token, up to 32
// bytes) and a space, or an empty line (which servers skip and http.ReadRequest refuses,
// so the tunnel is cut rather than relayed unread). It reads no further than the first
// byte that settles it.
func looksHTTP(br *bufio.Reader) bool {
	for n := 1; n <= 32; n++ {
		b, err := br.Peek(n)
		if err != nil {
			return false
		}
		switch c := b[n-1]; {
		case n == 1 && (c == '\r' || c == '\n'):
			return true
		case c == ' ':
			return n > 1
		case !isToken(c):
			return false
		}
	}
	return false
}

// isToken: a byte of an HTTP token (RFC 9110 5.6.2).
func isToken(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// readSNI reads the server name of the ClientHello at the head of br (one TLS record),
// consuming nothing: crypto/tls parses it.
func readSNI(br *bufio.Reader) (string, error) {
	hdr, err := br.Peek(5)
	if err != nil {
		return "", errors.New("the client's TLS record ended early")
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if n > maxHelloRecord {
		return "", errors.New("the client's TLS record is too large")
	}
	rec, err := br.Peek(5 + n)
	if err != nil {
		return "", errors.New("the client's TLS record ended early")
	}
	var sni string
	seen := false
	srv := tls.Server(&replayConn{r: bytes.NewReader(rec)}, &tls.Config{GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		sni, seen = hi.ServerName, true
		return nil, errStop
	}})
	srv.Handshake()
	if !seen {
		return "", errors.New("the client's first TLS record is not a ClientHello the proxy can read")
	}
	return sni, nil
}

// replayConn reads from r and throws writes away: a net.Conn for crypto/tls to parse a
// ClientHello from.
type replayConn struct{ r io.Reader }

func (c *replayConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }

// trimHost caps a host a client sent before it goes into a message.
func trimHost(h string) string {
	if len(h) > 80 {
		return h[:80] + "..."
	}
	return h
}

// relayBuffer is the size of the buffers relay copies through: a large one means fewer
// reads, writes and yamux frames per byte (measured: docs/benchmarks.md, egress).
const relayBuffer = 256 << 10

var relayBuffers = sync.Pool{New: func() any { b := make([]byte, relayBuffer); return &b }}

// relay copies src to dst through a pooled buffer of relayBuffer bytes, never through the
// smaller ones of dst's ReadFrom or src's WriteTo.
func relay(dst io.Writer, src io.Reader) (int64, error) {
	b := relayBuffers.Get().(*[]byte)
	defer relayBuffers.Put(b)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *b)
}

// down carries what the upstream sends to the client, as it comes. Once the client's first
// bytes showed HTTP, and the upstream had sent nothing before them, it also reads the
// responses in what it carries, in order, each paired with its request: requests learns
// the status of the answer to an upgrade before it lets the client's bytes through unread.
type down struct {
	f      *flow
	status bool // note the first response's status in f (an intercepted connection)

	mu      sync.Mutex
	http    bool    // the answers are read
	decided bool    // the upstream has spoken: whether they are read is settled
	sent    []*sent // requests sent whose final answer has not been read, oldest first
}

// sent is a request gone upstream.
type sent struct {
	method string
	status chan int // an upgrade's: its answer's status; closed without one if none is read
}

// speaksHTTP says the client's first bytes are an HTTP request: the answers are read,
// unless the upstream spoke first.
func (d *down) speaksHTTP() {
	d.mu.Lock()
	if !d.decided {
		d.http = true
	}
	d.mu.Unlock()
}

// send notes a request about to go upstream, and for an upgrade returns where its answer's
// status comes; false when the answers are not read.
func (d *down) send(method string, upgrade bool) (<-chan int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.http {
		return nil, false
	}
	s := &sent{method: method}
	if upgrade {
		s.status = make(chan int, 1)
	}
	d.sent = append(d.sent, s)
	return s.status, true
}

// oldest is the oldest request whose final answer has not been read; nil: none (an answer
// nobody asked for, as a server's 408 before it closes).
func (d *down) oldest() *sent {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.sent) == 0 {
		return nil
	}
	return d.sent[0]
}

// answered takes s, answered with code, off the requests sent.
func (d *down) answered(s *sent, code int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.sent) == 0 || d.sent[0] != s {
		return
	}
	d.sent = d.sent[1:]
	if s.status != nil {
		s.status <- code
	}
}

// stop ends the reading of answers: an upgrade waiting for its answer gets none.
func (d *down) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.http, d.decided = false, true
	for _, s := range d.sent {
		if s.status != nil {
			close(s.status)
		}
	}
	d.sent = nil
}

// run carries up to w until up ends (nil) or a read or a write fails.
func (d *down) run(w io.Writer, up io.Reader) error {
	// Settled before the client can see a byte: a client that answers the upstream's
	// first bytes with a request is not read as one that spoke first.
	tr := &teeReader{r: up, w: w, first: func() {
		d.mu.Lock()
		d.decided = true
		d.mu.Unlock()
	}}
	lim := &capReader{r: tr, n: -1}
	br := bufio.NewReaderSize(lim, 32<<10)
	if _, err := br.Peek(1); err == nil {
		d.mu.Lock()
		read := d.http
		d.mu.Unlock()
		if read {
			d.read(br, lim)
		}
	}
	d.stop()
	// The rest is carried unread: after a switch of protocols, after what could not be
	// read as HTTP, or all of a stream that is not HTTP. What br holds was carried already.
	br.Discard(br.Buffered())
	if tr.err == nil {
		relay(io.Discard, tr)
	}
	return tr.err
}

// read reads the answers in br, each to its end, until a switch of protocols or what it
// cannot read (a header past 64 KiB among it: lim caps what a header may take).
func (d *down) read(br *bufio.Reader, lim *capReader) {
	first := d.status
	for {
		s := d.oldest()
		req := &http.Request{Method: http.MethodGet}
		if s != nil {
			req.Method = s.method
		}
		lim.n = maxHeaderBytes
		resp, err := http.ReadResponse(br, req)
		lim.n = -1
		if err != nil {
			return
		}
		if first {
			d.f.setStatus(resp.StatusCode)
			first = false
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			d.answered(s, resp.StatusCode)
			return // what follows is another protocol
		case resp.StatusCode < 200:
			continue // informational (100, 103): the final answer follows, without a body
		}
		d.answered(s, resp.StatusCode)
		_, err = relay(io.Discard, resp.Body) // carried to the client as it is read
		resp.Body.Close()
		if err != nil {
			return
		}
	}
}

// teeReader writes to w what it reads from r, and keeps the first error of either that is
// not r's end. first, if set, runs before the first write.
type teeReader struct {
	r     io.Reader
	w     io.Writer
	err   error
	first func()
}

func (t *teeReader) Read(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	n, err := t.r.Read(p)
	if n > 0 {
		if t.first != nil {
			t.first()
			t.first = nil
		}
		if _, werr := t.w.Write(p[:n]); werr != nil {
			t.err = werr
			return n, werr
		}
	}
	if err != nil && err != io.EOF {
		t.err = err
	}
	return n, err
}

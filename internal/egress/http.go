package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The HTTP proxy: CONNECT tunnels, and plain http:// requests in absolute form, each
// decided and forwarded on its own.

// hopHeaders are a connection's, not the request's: they are not forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// serveHTTP reads requests from cl until it closes or one fails.
func (g *Gateway) serveHTTP(s *sess, cl *client, over bool) {
	ctx := context.Background()
	for {
		cl.SetReadDeadline(deadline(g.cfg.HeaderTimeout))
		cl.lim.N = maxHeaderBytes
		req, err := http.ReadRequest(cl.br)
		cl.lim.N = -1
		if err != nil {
			switch {
			case errors.Is(err, errHeaderTooLarge):
				writeStatus(cl, http.StatusRequestHeaderFieldsTooLarge, "the request's header is larger than 64 KiB")
			case errors.Is(err, io.EOF), isTimeout(err), errors.Is(err, net.ErrClosed):
			default:
				writeStatus(cl, http.StatusBadRequest, "the proxy could not read the request: send an HTTP/1.1 request in absolute form, or CONNECT")
			}
			return
		}
		cl.SetReadDeadline(time.Time{})
		if over {
			target, protocol := hostPortOf(req.URL.Host, 80), "http"
			if req.Method == http.MethodConnect {
				target, protocol = req.RequestURI, "connect"
			}
			if h, port, err := splitHostPort(target); err == nil {
				g.refuseOver(s, h, port, protocol)
			}
			writeStatus(cl, http.StatusTooManyRequests, tooMany)
			return
		}
		if req.Method == http.MethodConnect {
			g.connect(ctx, s, cl, req)
			return
		}
		if !g.plain(ctx, s, cl, req) {
			return
		}
	}
}

// connect answers a CONNECT request and runs its tunnel.
func (g *Gateway) connect(ctx context.Context, s *sess, cl *client, req *http.Request) {
	host, port, err := splitHostPort(req.RequestURI)
	if err != nil {
		writeStatus(cl, http.StatusBadRequest, "CONNECT wants host:port: "+err.Error())
		return
	}
	f, up, fail := g.open(ctx, s, host, port, "connect")
	if fail != nil {
		writeFailure(cl, fail)
		return
	}
	defer f.finish()
	f.onKillOnly(func() { cl.Close() })
	if _, err := io.WriteString(cl, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	g.tunnel(ctx, f, cl, up)
}

// plain forwards one absolute-form request to its own upstream connection, and reports
// whether the client connection may carry another.
func (g *Gateway) plain(ctx context.Context, s *sess, cl *client, req *http.Request) bool {
	if !req.URL.IsAbs() || req.URL.Host == "" {
		writeStatus(cl, http.StatusBadRequest, "this is a proxy: send the whole URL (http://host/path), or CONNECT host:port")
		return false
	}
	if req.URL.Scheme != "http" {
		writeStatus(cl, http.StatusBadRequest, fmt.Sprintf("the proxy forwards http:// URLs; for %s:// use CONNECT", req.URL.Scheme))
		return false
	}
	host, port, err := splitHostPort(hostPortOf(req.URL.Host, 80))
	if err != nil {
		writeStatus(cl, http.StatusBadRequest, "the URL's host: "+err.Error())
		return false
	}
	// The URL names the destination. http.ReadRequest has already dropped the client's Host
	// header of an absolute-form request for the URL's host (RFC 9112 3.2.2), and outgoing
	// sends that: no request reaches one host under another's name.
	f, up, fail := g.open(ctx, s, host, port, "http")
	if fail != nil {
		writeFailure(cl, fail)
		return !req.Close && drainBody(req)
	}
	defer f.finish()
	// A kill (a policy change, the session's end) ends the client's connection too; the
	// flow's own end leaves it open for the next request.
	f.onKillOnly(func() { cl.Close() })
	p, _ := s.snapshot()
	secret := p.SecretFor(host.Name)
	if secret != nil && isTrace(req.Method) {
		f.setReason("TRACE to a domain with a secret is refused: it would echo the secret back")
		writeStatus(cl, http.StatusForbidden, "TRACE to a domain with a secret is refused: it would echo the secret back")
		return false
	}
	out := outgoing(req, secret)
	f.mu.Lock()
	f.secret = secret
	f.mu.Unlock()
	out.Close = true // one request a connection upstream: each is decided alone
	if err := out.Write(up); err != nil {
		f.setReason("sending the request failed")
		writeStatus(cl, http.StatusBadGateway, fmt.Sprintf("sending the request to %s failed", host))
		return false
	}
	resp, err := g.readResponse(up, req, cl)
	if err != nil {
		why := fmt.Sprintf("%s sent no valid HTTP response", host)
		code := http.StatusBadGateway
		switch {
		case isTimeout(err):
			why, code = fmt.Sprintf("%s did not answer within %s", host, g.cfg.HeaderTimeout), http.StatusGatewayTimeout
		case errors.Is(err, errHeaderTooLarge):
			why = fmt.Sprintf("%s sent a response header larger than 64 KiB", host)
		}
		f.setReason(why)
		writeStatus(cl, code, why)
		return false
	}
	defer resp.Body.Close()
	f.setStatus(resp.StatusCode)
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	resp.Close = req.Close
	if err := respond(cl, up, resp); err != nil {
		if errors.Is(err, errClientGone) {
			f.setReason("the client left before the answer ended")
		}
		return false
	}
	return !req.Close
}

// readResponse reads the upstream's answer to req, its header capped at maxHeaderBytes and
// due within the header timeout. Informational answers (100 Continue, 103 Early Hints) go
// to the client as they come; the final one is returned.
func (g *Gateway) readResponse(up net.Conn, req *http.Request, cl *client) (*http.Response, error) {
	u := up.(*upConn)
	lim := &capReader{r: up}
	br := bufio.NewReader(lim)
	for range 16 {
		lim.n = maxHeaderBytes
		u.idle = g.cfg.HeaderTimeout
		resp, err := http.ReadResponse(br, req)
		u.idle = g.cfg.IdleTimeout
		lim.n = -1
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if err := resp.Write(cl); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("too many informational responses")
}

// capReader reads from r at most n bytes while n >= 0 (a header), then errHeaderTooLarge;
// n < 0: no cap.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n < 0 {
		return c.r.Read(p)
	}
	if c.n == 0 {
		return 0, errHeaderTooLarge
	}
	p = p[:min(int64(len(p)), c.n)]
	k, err := c.r.Read(p)
	c.n -= int64(k)
	return k, err
}

// isTrace: a method whose answer carries the request's headers back.
func isTrace(m string) bool { return strings.EqualFold(m, "TRACE") || strings.EqualFold(m, "TRACK") }

// errClientGone: the client's connection broke while its answer was being written.
var errClientGone = errors.New("the client left")

// respond writes resp to the client. The upstream is closed as soon as the client goes (its
// side of the connection ends, or a write to it fails): else a response that never ends, or
// drips, would be read (resp.Write drains the body when a write fails) for a client that
// left, holding the flow, its share of MaxConns and its bytes of the quota. It returns
// errClientGone when that is why the answer ended.
func respond(cl *client, up net.Conn, resp *http.Response) error {
	stop, watched := make(chan struct{}), make(chan struct{})
	var gone atomic.Bool
	go func() {
		defer close(watched)
		// The request was sent whole: what the client sends now is its next request
		// (left in cl.br for the next ReadRequest), or its end. Its end may be a
		// half-close (it still reads): only a broken connection stops the answer.
		_, err := cl.br.Peek(1)
		select {
		case <-stop:
		default:
			if err != nil && !errors.Is(err, io.EOF) {
				gone.Store(true)
				up.Close()
			}
		}
	}()
	err := resp.Write(&headerFirst{w: writerFunc(func(p []byte) (int, error) {
		n, err := cl.Write(p)
		if err != nil {
			gone.Store(true)
			up.Close()
		}
		return n, err
	})})
	close(stop)
	cl.SetReadDeadline(time.Unix(1, 0)) // ends the Peek
	<-watched
	cl.SetReadDeadline(time.Time{})
	if err != nil && gone.Load() {
		return errClientGone
	}
	return err
}

// headerFirst holds what is written to it until the end of a response's header, and
// writes that in one write; then it writes through. resp.Write writes the status line and
// each header line apart: a flow killed between them (a policy change) left the client a
// status line alone, which curl takes for a whole, empty answer (exit 0), where a header
// that never came, or a body cut short, is an error it reports.
type headerFirst struct {
	w    io.Writer
	buf  []byte
	done bool
}

func (h *headerFirst) Write(p []byte) (int, error) {
	if h.done {
		return h.w.Write(p)
	}
	h.buf = append(h.buf, p...)
	end := bytes.Index(h.buf, []byte("\r\n\r\n"))
	if end < 0 {
		return len(p), nil
	}
	h.done = true
	if _, err := h.w.Write(h.buf); err != nil {
		return 0, err
	}
	h.buf = nil
	return len(p), nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// outgoing is req as it goes upstream: in origin form, without the connection's headers,
// with the secret's headers set.
func outgoing(req *http.Request, secret http.Header) *http.Request {
	out := req.Clone(req.Context())
	out.Body = req.Body
	out.RequestURI = ""
	if out.URL.IsAbs() {
		out.Host = out.URL.Host
	}
	if c := req.Header.Get("Connection"); c != "" {
		for _, h := range strings.Split(c, ",") {
			out.Header.Del(strings.TrimSpace(h))
		}
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	for k, v := range secret {
		out.Header[k] = append([]string(nil), v...)
	}
	return out
}

// drainBody reads what is left of a refused request's body (up to a bound), so that the
// connection can carry the next request; false when it cannot.
func drainBody(req *http.Request) bool {
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(req.Body, 1<<20+1))
	return n <= 1<<20
}

// splitHostPort parses host:port as a CONNECT line or SOCKS request names them.
func splitHostPort(hp string) (Host, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return Host{}, 0, errors.New("not host:port")
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return Host{}, 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	host, err := ParseHost(h)
	if err != nil {
		return Host{}, 0, err
	}
	return host, port, nil
}

// hostPortOf adds the default port to a URL's host if it has none.
func hostPortOf(h string, port int) string {
	if _, _, err := net.SplitHostPort(h); err == nil {
		return h
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		return h + ":" + strconv.Itoa(port)
	}
	return net.JoinHostPort(h, strconv.Itoa(port))
}

// writeStatus answers with code and a one-line explanation, and tells the client the
// answer is the proxy's own (X-Cellbox-Egress).
//
// The sentence is in the status line's reason phrase too: a client that fails a CONNECT
// shows only that line (Python: "Tunnel connection failed: 403 Forbidden (cellbox egress:
// example.com:443 is not in this session's allowlist)"), and a model reads it there.
func writeStatus(w io.Writer, code int, msg string) {
	body := "cellbox egress: " + msg + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s (%s)\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nX-Cellbox-Egress: %s\r\n\r\n%s",
		code, http.StatusText(code), reasonPhrase("cellbox egress: "+msg), len(body),
		strings.ToLower(strings.ReplaceAll(http.StatusText(code), " ", "-")), body)
}

// reasonPhrase is s as a status line may carry it: printable ASCII (and spaces), at most
// 300 bytes.
func reasonPhrase(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < ' ' || c > '~' {
			b[i] = '?'
		}
	}
	if len(b) > 300 {
		b = append(b[:297], "..."...)
	}
	return string(b)
}

func writeFailure(w io.Writer, f *failure) {
	code := map[failKind]int{failRefused: http.StatusForbidden, failLimit: http.StatusTooManyRequests,
		failUnreachable: http.StatusBadGateway, failTimeout: http.StatusGatewayTimeout}[f.kind]
	writeStatus(w, code, f.msg)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

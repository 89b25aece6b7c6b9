package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testhost"
)

// The gateway's tests: real upstream servers on a test host (a network namespace with
// "public" addresses and a DNS server), real clients (Go's net/http, x/net/proxy's SOCKS5,
// curl) on the sandbox's side. Each session gets a listener on 127.0.0.1 whose connections
// go to g.Serve, as the guest's proxy streams do, without a sandbox.

// blobSize is what blob.example serves.
const blobSize = 1 << 20

// env is a test host with its servers and names, and a gateway pointed at it.
type env struct {
	h   *testhost.Host
	cfg Config
	g   *Gateway

	otherCA *testhost.CA // issued badcert.example's certificate: not a root the gateway trusts
}

// newEnv sets up the test host:
//
//	Addr(0): DNS; :80 and :443 Echo (echo.example, secret.example, *.wild.example, its address)
//	Addr(1): :80 Blob, :81 Slow, :82 a redirect to http://other.example/, :83 silent,
//	         :443 Echo with a certificate of another CA (badcert.example)
//	Addr(2), Addr6(): :80 Echo (other.example, v6.example)
//
// and names that resolve to addresses the gateway must not dial. mod changes the gateway's
// Config before it is made.
func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	h := testhost.New(t)
	e := &env{h: h}
	a0, a1, a2 := h.Addr(0), h.Addr(1), h.Addr(2)
	for name, addrs := range map[string][]netip.Addr{
		"echo.example": {a0}, "secret.example": {a0}, "a.wild.example": {a0}, "bad.wild.example": {a0}, "wild.example": {a0},
		"blob.example": {a1}, "slow.example": {a1}, "redir.example": {a1}, "silent.example": {a1}, "badcert.example": {a1},
		"other.example": {a2}, "v6.example": {h.Addr6()},
		"meta.example":    {netip.MustParseAddr("169.254.169.254")},
		"meta6.example":   {netip.MustParseAddr("fd00:ec2::254")},
		"rebind.example":  {netip.MustParseAddr("10.0.0.5")},
		"loop.example":    {netip.MustParseAddr("127.0.0.1")},
		"cgnat.example":   {netip.MustParseAddr("100.64.0.1")},
		"mixed.example":   {netip.MustParseAddr("10.0.0.7"), a2},
		"myself.example":  {h.HostAddr()},
		"mapped6.example": {netip.MustParseAddr("::ffff:127.0.0.1")},
	} {
		h.DNS.Set(name, addrs...)
	}
	h.ServeHTTP(t, netip.AddrPortFrom(a0, 80), testhost.Echo())
	h.ServeTLS(t, netip.AddrPortFrom(a0, 443), []string{"echo.example", "secret.example", "*.wild.example", a0.String()}, testhost.Echo())
	h.ServeHTTP(t, netip.AddrPortFrom(a1, 80), testhost.Blob(blobSize))
	h.ServeHTTP(t, netip.AddrPortFrom(a1, 81), testhost.Slow())
	h.ServeHTTP(t, netip.AddrPortFrom(a1, 82), testhost.Redirect("http://other.example/"))
	h.ListenSilent(t, netip.AddrPortFrom(a1, 83))
	h.ServeHTTP(t, netip.AddrPortFrom(a2, 80), testhost.Echo())
	h.ServeHTTP(t, netip.AddrPortFrom(h.Addr6(), 80), testhost.Echo())

	other, err := testhost.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	e.otherCA = other
	cert, err := other.Issue("badcert.example")
	if err != nil {
		t.Fatal(err)
	}
	l := tls.NewListener(h.Listen(t, "tcp", netip.AddrPortFrom(a1, 443).String()), &tls.Config{Certificates: []tls.Certificate{cert}})
	srv := &http.Server{Handler: testhost.Echo(), ErrorLog: discardLog}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	e.cfg = Config{
		Ranges: Ranges{Own: func() []netip.Addr { return ownAddrs(t, h) }},
		Resolver: &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, h.DNSAddr())
		}},
		RootCAs:     h.CA.Pool(),
		DialTimeout: 5 * time.Second,
	}
	if mod != nil {
		mod(&e.cfg)
	}
	e.g = New(e.cfg)
	return e
}

// ownAddrs are this machine's addresses, as the server gives its gateway: those of its
// interfaces, the test host's end of the veth pair among them.
func ownAddrs(t *testing.T, h *testhost.Host) []netip.Addr {
	out := []netip.Addr{h.HostAddr()}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		t.Errorf("interface addresses: %v", err)
	}
	for _, a := range ifs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

// sbox is one session's proxy, as the guest gives it to code in the sandbox.
type sbox struct {
	t    *testing.T
	e    *env
	id   string
	addr string // the proxy's host:port on 127.0.0.1
	ca   *CA
}

// session sets session id (the subtest's name) on the gateway with n (compiled), l and an
// authority (when n has secrets), and serves its proxy until t ends.
func (e *env) session(t *testing.T, n api.Network, l Limits) *sbox {
	t.Helper()
	p, err := Compile(n, nil)
	if err != nil {
		t.Fatalf("compile %+v: %v", n, err)
	}
	sb := &sbox{t: t, e: e, id: t.Name()}
	if len(n.Secrets) > 0 {
		if sb.ca, err = NewCA(sb.id); err != nil {
			t.Fatal(err)
		}
	}
	e.g.Set(sb.id, "tenant", p, l, sb.ca)
	sb.addr = e.serve(t, sb.id)
	return sb
}

// serve listens on 127.0.0.1 and serves each connection as session id's, until t ends and
// every Serve has returned.
func (e *env) serve(t *testing.T, id string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.g.Serve(id, c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		e.g.End(id) // closes what is still open, so that every Serve returns
		wg.Wait()
	})
	return l.Addr().String()
}

// client is Go's HTTP client using the proxy as http://user:pass@proxy (CONNECT for https,
// absolute form for http), trusting roots.
func (sb *sbox) client(roots *x509.CertPool) *http.Client {
	u := &url.URL{Scheme: "http", Host: sb.addr, User: url.UserPassword("user", "pass")}
	tr := &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}
	sb.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// socksClient is Go's HTTP client dialing through the proxy as SOCKS5 (x/net/proxy: names
// as names, addresses as addresses), trusting roots.
func (sb *sbox) socksClient(roots *x509.CertPool) *http.Client {
	d, err := proxy.SOCKS5("tcp", sb.addr, nil, proxy.Direct)
	if err != nil {
		sb.t.Fatal(err)
	}
	tr := &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext, TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}
	sb.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// get fetches u with c and returns the status and body; a transport error fails the test.
func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", u, err)
	}
	return resp.StatusCode, string(b)
}

// echoOf decodes an Echo reply.
func echoOf(t *testing.T, body string) testhost.EchoReply {
	t.Helper()
	var r testhost.EchoReply
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("not an echo: %v: %q", err, body)
	}
	return r
}

// dial connects to the proxy as code in the sandbox does.
func (sb *sbox) dial() net.Conn {
	c, err := net.DialTimeout("tcp", sb.addr, 5*time.Second)
	if err != nil {
		sb.t.Fatal(err)
	}
	sb.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// connect sends CONNECT target as curl and Go do, and returns the proxy's answer (its
// body read when it is not 200) and the connection, a tunnel after a 200.
func (sb *sbox) connect(target string) (int, string, net.Conn, *bufio.Reader) {
	sb.t.Helper()
	c := sb.dial()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: test\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		sb.t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, "", c, br
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), c, br
}

// last is the session's newest record.
func (sb *sbox) last() api.EgressConnection {
	sb.t.Helper()
	log, ok := sb.e.g.Log(sb.id)
	if !ok || len(log.Connections) == 0 {
		sb.t.Fatalf("no records: %+v, %v", log, ok)
	}
	return log.Connections[0]
}

// done waits for the session's newest record to be closed and returns it.
func (sb *sbox) done() api.EgressConnection {
	sb.t.Helper()
	var r api.EgressConnection
	testbin.WaitFor(sb.t, 10*time.Second, "the connection's record to close", func() error {
		r = sb.last()
		if r.Open {
			return fmt.Errorf("still open: %+v", r)
		}
		return nil
	})
	return r
}

// records is the number of the session's records.
func (sb *sbox) records() int {
	log, _ := sb.e.g.Log(sb.id)
	return len(log.Connections)
}

// curl runs curl with args, without the environment's proxies, and returns its stdout.
func curl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	testbin.NeedProgram(t, "curl", "curl")
	cmd := exec.Command("curl", append([]string{"-sS", "--max-time", "20"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("curl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// lastLine splits what curl wrote into what came before its last line, and that line (what
// -w "\n..." added).
func lastLine(out string) (string, string) {
	i := strings.LastIndexByte(out, '\n')
	if i < 0 {
		return "", out
	}
	return out[:i], out[i+1:]
}

// writePEM writes pem to a file of t's and returns its path.
func writePEM(t *testing.T, pem []byte) string {
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantRecord checks a record's decision, rule and a part of its reason ("" wants none).
func wantRecord(t *testing.T, r api.EgressConnection, decision, rule, reason string) {
	t.Helper()
	if r.Decision != decision || r.Rule != rule || (reason == "" && r.Reason != "") || !strings.Contains(r.Reason, reason) {
		t.Errorf("record %+v; want decision %q, rule %q, reason with %q", r, decision, rule, reason)
	}
}

// wantRefusal checks a proxy's answer: status and a sentence in its body.
func wantRefusal(t *testing.T, code int, body string, wantCode int, sentence string) {
	t.Helper()
	// The client is not told what a name resolved to (the record is): a sentence's
	// "(address)" after a name is not in the answer.
	sentence = resolvedAddr.ReplaceAllString(sentence, "")
	if code != wantCode || !strings.HasPrefix(body, "cellbox egress: ") || !strings.Contains(body, sentence) {
		t.Errorf("answer %d %q; want %d with %q", code, body, wantCode, sentence)
	}
	if resolvedAddr.MatchString(body) {
		t.Errorf("answer %q tells the client a resolved address", body)
	}
}

var resolvedAddr = regexp.MustCompile(` \([0-9a-f.:]+\)`)

var discardLog = log.New(io.Discard, "", 0)

func port(ap string) int {
	_, p, _ := net.SplitHostPort(ap)
	n, _ := strconv.Atoi(p)
	return n
}

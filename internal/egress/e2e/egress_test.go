package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testhost"
	"github.com/cellbox/cellbox/internal/testserver"
)

// Names the test DNS server answers.
const (
	pypiName  = "pypi.egress.test"
	apiName   = "api.egress.test"
	gitName   = "git.egress.test"
	slowName  = "slow.egress.test"
	otherName = "other.egress.test" // served, but in no allowlist
	apiSecret = "Bearer api-s3cret-value"
	gitSecret = "Bearer git-s3cret-value"
)

type env struct {
	h   *testhost.Host
	c   *client.Client
	url string
}

func setup(t *testing.T) *env {
	h := testhost.New(t)
	h.DNS.Set(pypiName, h.Addr(0))
	h.DNS.Set(apiName, h.Addr(1))
	h.DNS.Set(otherName, h.Addr(1))
	h.DNS.Set(slowName, h.Addr(1))
	h.DNS.Set(gitName, h.Addr(2))
	h.DNS.Set("rebind.egress.test", netip.MustParseAddr("10.20.30.40"))
	h.DNS.Set("metadata.egress.test", netip.MustParseAddr("169.254.169.254"))
	h.ServeHTTP(t, netip.AddrPortFrom(h.Addr(0), 80), testhost.PyPI(testhost.Wheel{
		Name: "cellbox-probe", Version: "1.0", Module: "cellbox_probe.py", Source: "VALUE = 'from the index'\n"}))
	h.ServeTLS(t, netip.AddrPortFrom(h.Addr(1), 443), []string{apiName, otherName}, authorized(apiSecret))
	h.ServeHTTP(t, netip.AddrPortFrom(h.Addr(1), 80), testhost.Slow())
	h.ServeTLS(t, netip.AddrPortFrom(h.Addr(2), 443), []string{gitName}, testhost.Git(t,
		map[string]string{"README.md": "cloned through the gateway\n"}, testhost.GitOptions{RequireHeader: "Authorization", Value: gitSecret}))

	return newEnv(t, h)
}

// newEnv starts a server whose gateway resolves with h's DNS and trusts h's root.
func newEnv(t testing.TB, h *testhost.Host) *env {
	cfg := testserver.Config(testserver.Host(t), t.TempDir())
	cfg.EgressDNS = h.DNSAddr()
	cfg.EgressRoots = h.CAFile()
	cfg.PoolSize, cfg.PoolMax = 1, 0
	s := testserver.Start(t, cfg, server.Options{})
	return &env{h: h, c: client.New(s.URL), url: s.URL}
}

// authorized answers "authorized" to a request carrying want in Authorization, 401 else;
// it never tells the client what it got.
func authorized(want string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want {
			http.Error(w, "no or wrong credentials", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "authorized")
	})
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) session(t testing.TB, n *api.Network) string {
	t.Helper()
	s, err := e.c.CreateSession(ctxT(t, time.Minute), api.CreateSessionRequest{Network: n})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	t.Cleanup(func() { e.c.DeleteSession(context.Background(), s.ID) })
	return s.ID
}

func (e *env) sh(t testing.TB, id, script string) *api.CommandResult {
	t.Helper()
	r, err := e.c.Command(ctxT(t, 2*time.Minute), id, api.CommandRequest{Cmd: []string{"sh", "-c", script}, TimeoutS: 90})
	if err != nil {
		t.Fatalf("command %q: %v", script, err)
	}
	return r
}

func (e *env) py(t *testing.T, id, code string) string {
	t.Helper()
	r, err := e.c.Execute(ctxT(t, 2*time.Minute), id, api.ExecuteRequest{Code: code, TimeoutS: 60})
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	var out strings.Builder
	for _, o := range r.Outputs {
		switch o.Type {
		case api.OutputStream:
			out.WriteString(o.Text)
		case api.OutputError:
			fmt.Fprintf(&out, "%s: %s", o.EName, o.EValue)
		}
	}
	return strings.TrimSpace(out.String())
}

func TestEgress(t *testing.T) {
	testbin.NeedProgram(t, "git", "git")
	testbin.NeedProgram(t, "curl", "curl")
	e := setup(t)
	allow := &api.Network{Egress: api.EgressAllowlist, Allow: []string{pypiName, apiName, gitName, slowName},
		Secrets: []api.EgressSecret{
			{Domain: apiName, Headers: map[string]string{"Authorization": apiSecret}},
			{Domain: gitName, Headers: map[string]string{"Authorization": gitSecret}},
		}}
	id := e.session(t, allow)

	t.Run("view_redacts_secrets", func(t *testing.T) {
		s, err := e.c.GetSession(ctxT(t, 10*time.Second), id)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(s)
		if strings.Contains(string(b), "s3cret") || !strings.Contains(string(b), api.EgressRedacted) {
			t.Errorf("the session's view: %s", b)
		}
		if s.Network.Egress != api.EgressAllowlist || len(s.Network.Allow) != 4 {
			t.Errorf("the session's policy: %+v", s.Network)
		}
	})
	t.Run("pip_install", func(t *testing.T) {
		r := e.sh(t, id, "python3 -m pip install --no-deps --no-cache-dir --disable-pip-version-check --index-url http://"+pypiName+
			"/simple/ --trusted-host "+pypiName+" --target /mnt/data/lib cellbox-probe")
		if r.ExitCode != 0 {
			t.Fatalf("pip install: %+v", r)
		}
		if got := e.py(t, id, "import sys; sys.path.insert(0, '/mnt/data/lib')\nimport cellbox_probe; print(cellbox_probe.VALUE)"); got != "from the index" {
			t.Errorf("the installed module: %q", got)
		}
	})
	t.Run("requests_and_urllib_with_secret", func(t *testing.T) {
		code := fmt.Sprintf("import requests, urllib.request\nr = requests.get('https://%s/data', timeout=30)\nprint(r.status_code, r.text)\nprint(urllib.request.urlopen('https://%s/data', timeout=30).read().decode())", apiName, apiName)
		if got := e.py(t, id, code); got != "200 authorized\nauthorized" {
			t.Errorf("requests and urllib to a domain with a secret: %q", got)
		}
	})
	t.Run("curl_with_secret", func(t *testing.T) {
		if r := e.sh(t, id, "curl -sS https://"+apiName+"/data"); r.Stdout != "authorized" {
			t.Errorf("curl: %+v", r)
		}
	})
	t.Run("git_clone_with_secret", func(t *testing.T) {
		r := e.sh(t, id, "git clone -q https://"+gitName+"/repo.git /mnt/data/repo && cat /mnt/data/repo/README.md")
		if r.ExitCode != 0 || r.Stdout != "cloned through the gateway\n" {
			t.Errorf("git clone: %+v", r)
		}
	})
	t.Run("secrets_stay_out", func(t *testing.T) {
		r := e.sh(t, id, `env; cat /proc/self/environ; grep -rs -e s3cret -e "PRIVATE KEY" /mnt/data /tmp /etc "$SSL_CERT_FILE" /.cellbox 2>/dev/null; echo done`)
		if strings.Contains(r.Stdout, "s3cret") || strings.Contains(r.Stdout, "PRIVATE KEY") || !strings.HasSuffix(r.Stdout, "done\n") {
			t.Errorf("a secret or the authority's key inside the sandbox: %s", r.Stdout)
		}
		if !strings.Contains(r.Stdout, "SSL_CERT_FILE=") {
			t.Errorf("the environment names no trust bundle: %s", r.Stdout)
		}
	})
	t.Run("refused", func(t *testing.T) {
		r := e.sh(t, id, "curl -sS https://"+otherName+"/data")
		if r.ExitCode == 0 || !strings.Contains(r.Stderr, "403") {
			t.Errorf("a host outside the allowlist: %+v", r)
		}
		// What a model sees in Python's exception names the reason.
		code := fmt.Sprintf("import urllib.request\ntry:\n  urllib.request.urlopen('https://%s/', timeout=30)\nexcept Exception as e:\n  print(e)", otherName)
		if got := e.py(t, id, code); !strings.Contains(got, "403") || !strings.Contains(got, "not in this session's allowlist") {
			t.Errorf("urllib's error for a refused host: %q", got)
		}
		r = e.sh(t, id, "curl -sS http://rebind.egress.test/")
		if !strings.Contains(r.Stdout, "not in this session's allowlist") && !strings.Contains(r.Stdout, "private") {
			t.Errorf("a name outside the allowlist that resolves to a private address: %+v", r)
		}
	})
	t.Run("no_other_way_out", func(t *testing.T) {
		code := fmt.Sprintf(`import socket, errno
def attempt(f):
    try:
        f(); return 'open'
    except OSError as e:
        return type(e).__name__
print(attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)))
print(attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', (%q, 53))))
print(attempt(lambda: socket.getaddrinfo(%q, 443)))
print(attempt(lambda: socket.create_connection((%q, 443), timeout=5)))`, e.h.Addr(0).String(), apiName, e.h.Addr(1).String())
		want := "PermissionError\nOSError\ngaierror\nOSError"
		if got := e.py(t, id, code); got != want {
			t.Errorf("raw socket, UDP, DNS and a direct connection: got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("log", func(t *testing.T) {
		l, err := e.c.EgressLog(ctxT(t, 10*time.Second), id)
		if err != nil {
			t.Fatal(err)
		}
		var intercepted, refused, pypi bool
		for _, c := range l.Connections {
			intercepted = intercepted || c.Host == apiName && c.Intercepted && c.Decision == "allowed" && c.BytesIn > 0
			refused = refused || c.Host == otherName && c.Decision == "refused" && c.Reason != ""
			pypi = pypi || c.Host == pypiName && c.Protocol == "http" && c.Status == 200 && c.Address == e.h.Addr(0).String()
		}
		if !intercepted || !refused || !pypi || l.BytesUsed == 0 {
			t.Errorf("the egress log misses a connection: %+v", l)
		}
		b, _ := json.Marshal(l)
		if strings.Contains(string(b), "s3cret") {
			t.Errorf("the egress log holds a secret: %s", b)
		}
		resp, err := http.Get(e.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		for _, want := range []string{`cellbox_egress_connections_total{decision="allowed",tenant=""}`,
			`cellbox_egress_connections_total{decision="refused",tenant=""}`, `cellbox_egress_bytes_total{direction="in",tenant=""}`} {
			if !strings.Contains(string(m), want) {
				t.Errorf("/metrics has no %s", want)
			}
		}
	})
	t.Run("one_shot", func(t *testing.T) {
		code := fmt.Sprintf("import urllib.request\nprint(urllib.request.urlopen('https://%s/x', timeout=30).read().decode())", apiName)
		r, err := e.c.ExecuteOnce(ctxT(t, 2*time.Minute), api.OneShotRequest{Code: code, Network: &api.Network{Egress: api.EgressAllowlist,
			Allow: []string{apiName}, Secrets: []api.EgressSecret{{Domain: apiName, Headers: map[string]string{"Authorization": apiSecret}}}}})
		if err != nil || r.Status != api.StatusOK || len(r.Outputs) == 0 || r.Outputs[0].Text != "authorized\n" {
			t.Errorf("a one-shot with a policy and a secret: %v %+v", err, r)
		}
		r, err = e.c.ExecuteOnce(ctxT(t, 2*time.Minute), api.OneShotRequest{Code: code})
		if err != nil || r.Status != api.StatusError {
			t.Errorf("a one-shot without a policy reached the API: %v %+v", err, r)
		}
	})
	t.Run("live_change_closes_connections", func(t *testing.T) {
		done := make(chan *api.CommandResult, 1)
		started := time.Now().Add(-time.Second)
		go func() {
			r, _ := e.c.Command(context.Background(), id, api.CommandRequest{Cmd: []string{"curl", "-fsS", "--max-time", "60", "http://" + slowName + "/"}, TimeoutS: 90})
			done <- r
		}()
		testbin.WaitFor(t, 30*time.Second, "the slow download to be open", func() error {
			l, err := e.c.EgressLog(context.Background(), id)
			if err != nil {
				return err
			}
			// This download's connection, with its first byte through: mid-way.
			for _, c := range l.Connections {
				if c.Host == slowName && c.Open && c.BytesIn > 0 && c.Time.After(started) {
					return nil
				}
			}
			return fmt.Errorf("not open yet")
		})
		if _, err := e.c.UpdateSession(ctxT(t, 10*time.Second), id, api.UpdateSessionRequest{Network: &api.Network{Egress: api.EgressNone}}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			if r == nil || r.ExitCode == 0 {
				t.Errorf("the download went on: %+v", r)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the open download was not closed by the policy change")
		}
		l, _ := e.c.EgressLog(ctxT(t, 10*time.Second), id)
		if len(l.Connections) == 0 || l.Connections[0].Host != slowName || !strings.Contains(l.Connections[0].Reason, "policy changed") {
			t.Errorf("the closed connection's record: %+v", l.Connections[:min(1, len(l.Connections))])
		}
		r := e.sh(t, id, "curl -sS http://"+pypiName+"/simple/")
		if !strings.Contains(r.Stdout, "no internet access") {
			t.Errorf("after the change to none: %+v", r)
		}
	})
}

// TestEgressPublic: a public session reaches public addresses, and never the blocked ones,
// however they are named.
func TestEgressPublic(t *testing.T) {
	testbin.NeedProgram(t, "curl", "curl")
	e := setup(t)
	id := e.session(t, &api.Network{Egress: api.EgressPublic, Deny: []string{slowName}})
	if _, err := e.c.UploadFile(ctxT(t, 10*time.Second), id, "testroot.pem", bytes.NewReader(e.h.CA.PEM())); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(e.url)
	cases := []struct{ name, target, want string }{
		// Reached, tunnelled untouched: curl verifies the test host's own certificate.
		{"public", "--cacert /mnt/data/testroot.pem https://" + otherName + "/data", "no or wrong credentials"},
		{"deny_over_public", "http://" + slowName + "/", "deny entry"},
		{"metadata_literal", "http://169.254.169.254/latest/meta-data/", "metadata"},
		{"metadata_name", "http://metadata.egress.test/", "metadata"},
		{"metadata_v6", "http://[fd00:ec2::254]/", "metadata"},
		{"rebinding", "http://rebind.egress.test/", "private"},
		{"server_api", "http://" + u.Host + "/v1/sessions", "the address is this cellbox server's API"},
		{"server_own_address", "http://" + e.h.HostAddr().String() + "/", "own"},
		{"mapped_v6", "http://[::ffff:127.0.0.1]/", "own address"},
		{"decimal", "http://2130706433/", "cellbox egress"},
		{"octal", "http://0177.0.0.1/", "cellbox egress"},
		{"cgnat", "http://100.64.1.1/", "carrier-grade NAT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.sh(t, id, "curl -sS --noproxy '' -x \"$HTTP_PROXY\" --proxy-insecure "+c.target+" 2>&1")
			if !strings.Contains(r.Stdout, c.want) {
				t.Errorf("%s: %+v", c.target, r)
			}
		})
	}
	// A session's proxy is its own: the one at the same address in a session without a
	// policy refuses what the public session's lets through, and the host's loopback
	// (where no sandbox's proxy is anyway) is refused to both.
	t.Run("attack/another_sessions_proxy", func(t *testing.T) {
		closed := e.session(t, nil)
		if r := e.sh(t, closed, "curl -sS http://"+otherName+"/ 2>&1"); !strings.Contains(r.Stdout, "no internet access") {
			t.Errorf("a session without a policy: %+v", r)
		}
		for _, sid := range []string{id, closed} {
			if r := e.sh(t, sid, "curl -sS --noproxy '' -x \"$HTTP_PROXY\" http://127.0.0.1:3128/ 2>&1"); !strings.Contains(r.Stdout, "cellbox egress") {
				t.Errorf("the proxy's port on the host, through the proxy: %+v", r)
			}
		}
	})
}

// TestEgressAfterRestart: a session outlives its server with its policy, its secret and
// its certificate authority: the next server process applies them again.
func TestEgressAfterRestart(t *testing.T) {
	testbin.NeedProgram(t, "curl", "curl")
	h := testhost.New(t)
	h.DNS.Set(apiName, h.Addr(1))
	h.DNS.Set(otherName, h.Addr(1))
	h.ServeTLS(t, netip.AddrPortFrom(h.Addr(1), 443), []string{apiName, otherName}, authorized(apiSecret))
	cfg := testserver.Config(testserver.Host(t), t.TempDir())
	cfg.EgressDNS, cfg.EgressRoots = h.DNSAddr(), h.CAFile()
	cfg.EndSessionsOnExit, cfg.PoolSize = false, 1
	first, err := server.Start(ctxT(t, 2*time.Minute), cfg, server.Options{GuestBinary: testbin.Cellbox(t)})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{h: h, c: client.New(first.URL)}
	id := e.session(t, &api.Network{Egress: api.EgressAllowlist, Allow: []string{apiName},
		Secrets: []api.EgressSecret{{Domain: apiName, Headers: map[string]string{"Authorization": apiSecret}}}})
	if r := e.sh(t, id, "curl -sS https://"+apiName+"/"); r.Stdout != "authorized" {
		t.Fatalf("before the restart: %+v", r)
	}
	if err := first.Shutdown(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	second := testserver.Start(t, cfg, server.Options{})
	e.c = client.New(second.URL)
	t.Cleanup(func() { e.c.DeleteSession(context.Background(), id) }) // before second's shutdown: nothing outlives the test
	s, err := e.c.GetSession(ctxT(t, 10*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Network.Egress != api.EgressAllowlist || len(s.Network.Secrets) != 1 || s.Network.Secrets[0].Headers["Authorization"] != api.EgressRedacted {
		t.Errorf("the policy after the restart: %+v", s.Network)
	}
	if r := e.sh(t, id, "curl -sS https://"+apiName+"/ && curl -sS https://"+otherName+"/ 2>&1"); !strings.HasPrefix(r.Stdout, "authorized") || !strings.Contains(r.Stdout, "403") {
		t.Errorf("after the restart: %+v", r)
	}
}

// TestEgressServerListeners: a session allowed 127.0.0.1, on a server whose operator allowed
// loopback (--egress-private-allow 127.0.0.1/32, for a mirror), reaches the mirror's port but
// not the server's own API, refused with a reason naming it; a server started with
// --egress-allow-server naming its API's address and port lets it through.
func TestEgressServerListeners(t *testing.T) {
	testbin.NeedProgram(t, "curl", "curl")
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "the mirror's index")
	}))
	t.Cleanup(mirror.Close)
	start := func(t *testing.T, allowServer bool) (*env, string) {
		cfg := testserver.Config(testserver.Host(t), t.TempDir())
		cfg.EgressPrivateAllow = "127.0.0.1/32"
		cfg.PoolSize, cfg.PoolMax = 1, 0
		if allowServer {
			// The API's address is named before it listens: a free port, taken at once.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cfg.Addr = ln.Addr().String()
			ln.Close()
			cfg.EgressAllowServer = cfg.Addr
		}
		s := testserver.Start(t, cfg, server.Options{})
		u, _ := url.Parse(s.URL)
		return &env{c: client.New(s.URL), url: s.URL}, u.Host
	}
	curl := func(e *env, t *testing.T, id, u string) string {
		r := e.sh(t, id, "curl -sS --noproxy '' -x \"$HTTP_PROXY\" -w '\n%{http_code}' "+u+" 2>&1")
		return r.Stdout
	}
	n := &api.Network{Egress: api.EgressAllowlist, Allow: []string{"127.0.0.1"}}

	t.Run("attack/the_server_api", func(t *testing.T) {
		e, apiAddr := start(t, false)
		id := e.session(t, n)
		out := curl(e, t, id, "http://"+apiAddr+"/v1/sessions")
		if want := "cellbox egress: " + apiAddr + " is refused: the address is this cellbox server's API"; !strings.Contains(out, want) || !strings.HasSuffix(out, "403") {
			t.Errorf("the server's API through the proxy: %q; want 403 with %q", out, want)
		}
		if out := curl(e, t, id, mirror.URL+"/simple/"); out != "the mirror's index\n200" {
			t.Errorf("the mirror on another loopback port: %q", out)
		}
		log, err := e.c.EgressLog(ctxT(t, 10*time.Second), id)
		if err != nil || len(log.Connections) < 2 || log.Connections[1].Decision != "refused" || log.Connections[1].Address != "" {
			t.Errorf("the egress log: %+v, %v", log, err)
		}
	})

	t.Run("allow_server", func(t *testing.T) {
		e, apiAddr := start(t, true)
		id := e.session(t, n)
		out := curl(e, t, id, "http://"+apiAddr+"/v1/sessions")
		if !strings.HasSuffix(out, "200") || !strings.Contains(out, id) {
			t.Errorf("the server's API, named by --egress-allow-server: %q; want 200 listing %s", out, id)
		}
	})
}

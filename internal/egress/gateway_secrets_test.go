package egress

import (
	"crypto/x509"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/testhost"
)

// TestGatewaySecrets: a secret's headers are added on the way out, over plain HTTP and by
// terminating TLS with the session's authority; other domains are tunnelled untouched; an
// upstream that does not verify is refused; the client's proxy headers stay with the proxy.
func TestGatewaySecrets(t *testing.T) {
	e := newEnv(t, nil)
	n := api.Network{Egress: "allowlist", Allow: []string{"secret.example", "echo.example", "badcert.example"},
		Secrets: []api.EgressSecret{
			{Domain: "secret.example", Headers: map[string]string{"Authorization": "Bearer s3cret", "X-Api-Key": "k1"}},
			{Domain: "badcert.example", Headers: map[string]string{"Authorization": "Bearer other"}},
		}}
	sessionRoots := func(sb *sbox) *x509.CertPool {
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM([]byte(sb.ca.CertPEM())) {
			t.Fatal("the session's authority is not PEM")
		}
		return p
	}
	// do sends GET u with the client's own Authorization and a Proxy-Connection, through a
	// client that also sends Proxy-Authorization (its proxy URL has a user: on the request
	// itself for http://, on the CONNECT for https://). A tunnel left untouched carries
	// what the client sends to the origin as it is: pass tunnel to send no Proxy-Connection.
	do := func(t *testing.T, c *http.Client, u string, tunnel ...bool) (*http.Response, testhost.EchoReply) {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer mine")
		if len(tunnel) == 0 {
			req.Header.Set("Proxy-Connection", "keep-alive")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %q", u, resp.StatusCode, b)
		}
		echo := echoOf(t, string(b))
		for _, h := range []string{"Proxy-Authorization", "Proxy-Connection"} {
			if v, ok := echo.Header[h]; ok {
				t.Errorf("GET %s: the upstream got %s: %q", u, h, v)
			}
		}
		return resp, echo
	}
	wantHeader := func(t *testing.T, echo testhost.EchoReply, name string, want ...string) {
		t.Helper()
		if got := echo.Header[name]; !slices.Equal(got, want) {
			t.Errorf("upstream's %s: %q; want %q", name, got, want)
		}
	}

	t.Run("plain HTTP to a domain with a secret", func(t *testing.T) {
		sb := e.session(t, n, Limits{})
		_, echo := do(t, sb.client(nil), "http://secret.example/plain")
		wantHeader(t, echo, "Authorization", "Bearer s3cret")
		wantHeader(t, echo, "X-Api-Key", "k1")
		r := sb.done()
		wantRecord(t, r, "allowed", "secret.example", "")
		if r.Protocol != "http" || r.Intercepted || r.Status != 200 {
			t.Errorf("record %+v", r)
		}
	})

	t.Run("plain HTTP to a domain without one", func(t *testing.T) {
		sb := e.session(t, n, Limits{})
		_, echo := do(t, sb.client(nil), "http://echo.example/plain")
		wantHeader(t, echo, "Authorization", "Bearer mine")
		wantHeader(t, echo, "X-Api-Key")
	})

	t.Run("HTTPS to a domain with a secret is intercepted", func(t *testing.T) {
		sb := e.session(t, n, Limits{})
		resp, echo := do(t, sb.client(sessionRoots(sb)), "https://secret.example/tls?q=1")
		if !echo.TLS || echo.Host != "secret.example" || echo.Path != "/tls?q=1" {
			t.Errorf("echo %+v", echo)
		}
		wantHeader(t, echo, "Authorization", "Bearer s3cret")
		wantHeader(t, echo, "X-Api-Key", "k1")
		if cn := resp.TLS.PeerCertificates[0].Issuer.CommonName; cn != "cellbox egress "+sb.id {
			t.Errorf("the client saw a certificate issued by %q; want the session's authority", cn)
		}
		r := sb.done()
		wantRecord(t, r, "allowed", "secret.example", "")
		if r.Protocol != "connect" || !r.Intercepted || r.Status != 200 || r.BytesOut == 0 || r.BytesIn == 0 {
			t.Errorf("record %+v; want intercepted, bytes both ways", r)
		}
	})

	t.Run("curl through an intercepted tunnel", func(t *testing.T) {
		sb := e.session(t, n, Limits{})
		out, err := curl(t, "-x", "http://"+sb.addr, "--cacert", writePEM(t, []byte(sb.ca.CertPEM())), "-H", "Authorization: Bearer mine", "https://secret.example/curl")
		if err != nil {
			t.Fatal(err)
		}
		wantHeader(t, echoOf(t, out), "Authorization", "Bearer s3cret")
		if r := sb.done(); !r.Intercepted {
			t.Errorf("record %+v: not intercepted", r)
		}
	})

	t.Run("HTTPS to a domain without one is tunnelled untouched", func(t *testing.T) {
		sb := e.session(t, n, Limits{})
		resp, echo := do(t, sb.client(e.h.CA.Pool()), "https://echo.example/tls", true)
		wantHeader(t, echo, "Authorization", "Bearer mine")
		if cn := resp.TLS.PeerCertificates[0].Issuer.CommonName; cn != e.h.CA.Cert.Subject.CommonName {
			t.Errorf("the client saw a certificate issued by %q; want the test host's own", cn)
		}
		r := sb.done()
		if r.Intercepted || r.Status != 0 {
			t.Errorf("record %+v: want a tunnel, not intercepted", r)
		}
		// A client that trusts only the session's authority does not trust echo.example.
		if _, err := sb.client(sessionRoots(sb)).Get("https://echo.example/"); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("trusting only the session's authority: %v; want a certificate error", err)
		}
	})

	t.Run("an upstream whose certificate does not verify", func(t *testing.T) {
		sb := e.session(t, n, Limits{})
		resp, err := sb.client(sessionRoots(sb)).Get("https://badcert.example/")
		if err == nil {
			resp.Body.Close()
			t.Fatalf("GET through an upstream that does not verify: %d", resp.StatusCode)
		}
		r := sb.done()
		wantRecord(t, r, "allowed", "badcert.example", "badcert.example's certificate did not verify against the server's roots")
		if r.BytesOut == 0 {
			t.Errorf("record %+v: no handshake went upstream", r)
		}
	})
}

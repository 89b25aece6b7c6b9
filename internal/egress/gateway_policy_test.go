package egress

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
)

// TestGatewayPolicy: the modes, deny over allow, wildcards, ports and address rules, with
// Go's client (plain http:// through the proxy) and curl (https:// through CONNECT).
func TestGatewayPolicy(t *testing.T) {
	e := newEnv(t, nil)
	a0, a2 := e.h.Addr(0).String(), e.h.Addr(2).String()
	cidr := e.h.Addr(0).String() + "/32"
	tests := []struct {
		name   string
		net    api.Network
		url    string
		code   int    // 200: allowed, the echo answers
		body   string // a refusal's sentence
		rule   string
		dialed string // the record's address when allowed
	}{
		{"none", api.Network{}, "http://echo.example/", 403,
			`this session has no internet access (its egress is "none")`, "", ""},
		{"allowlist allows its name", api.Network{Egress: "allowlist", Allow: []string{"echo.example"}}, "http://echo.example/x", 200,
			"", "echo.example", a0},
		{"allowlist refuses another name", api.Network{Egress: "allowlist", Allow: []string{"echo.example"}}, "http://other.example/", 403,
			"other.example:80 is not in this session's allowlist", "", ""},
		{"public allows a public address", api.Network{Egress: "public"}, "http://other.example/", 200,
			"", "", a2},
		{"public minus deny", api.Network{Egress: "public", Deny: []string{"other.example"}}, "http://other.example/", 403,
			`other.example:80 is refused by this session's deny entry "other.example"`, "other.example", ""},
		{"deny over allow", api.Network{Egress: "allowlist", Allow: []string{"*.wild.example"}, Deny: []string{"bad.wild.example"}}, "http://bad.wild.example/", 403,
			`bad.wild.example:80 is refused by this session's deny entry "bad.wild.example"`, "bad.wild.example", ""},
		{"wildcard allows a name below", api.Network{Egress: "allowlist", Allow: []string{"*.wild.example"}, Deny: []string{"bad.wild.example"}}, "http://a.wild.example/", 200,
			"", "*.wild.example", a0},
		{"wildcard does not allow itself", api.Network{Egress: "allowlist", Allow: []string{"*.wild.example"}}, "http://wild.example/", 403,
			"wild.example:80 is not in this session's allowlist", "", ""},
		{"allowed name on a refused port", api.Network{Egress: "allowlist", Allow: []string{"echo.example:443"}}, "http://echo.example/", 403,
			"echo.example:80 is not in this session's allowlist", "", ""},
		{"IP literal allowed by CIDR", api.Network{Egress: "allowlist", Allow: []string{cidr}}, "http://" + a0 + "/", 200,
			"", a0, a0},
		{"IP literal outside the CIDR", api.Network{Egress: "allowlist", Allow: []string{cidr}}, "http://" + a2 + "/", 403,
			a2 + ":80 is not in this session's allowlist", "", ""},
		{"name allowed by its address", api.Network{Egress: "allowlist", Allow: []string{a2 + "/32:80"}}, "http://other.example/", 200,
			"", a2 + ":80", a2},
		{"deny CIDR over an allowed name", api.Network{Egress: "allowlist", Allow: []string{"other.example"}, Deny: []string{a2 + "/32"}}, "http://other.example/", 403,
			`other.example:80 (` + a2 + `) is refused by this session's deny entry "` + a2 + `"`, a2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := e.session(t, tt.net, Limits{})
			code, body := get(t, sb.client(nil), tt.url)
			if tt.code != 200 {
				wantRefusal(t, code, body, tt.code, tt.body)
				r := sb.last()
				wantRecord(t, r, "refused", tt.rule, tt.body)
				if r.Address != "" || r.Protocol != "http" || r.Open {
					t.Errorf("record %+v: want no address, protocol http, closed", r)
				}
				return
			}
			if code != 200 {
				t.Fatalf("%d %q; want 200", code, body)
			}
			echo := echoOf(t, body)
			u := strings.TrimPrefix(tt.url, "http://")
			if host, path, _ := strings.Cut(u, "/"); echo.Host != host || echo.Path != "/"+path {
				t.Errorf("echo %+v; want Host %s, path /%s", echo, host, path)
			}
			r := sb.done()
			wantRecord(t, r, "allowed", tt.rule, "")
			if r.Address != tt.dialed || r.Port != 80 || r.Status != 200 || r.BytesOut == 0 || r.BytesIn < int64(len(body)) {
				t.Errorf("record %+v; want address %s, port 80, status 200, bytes both ways", r, tt.dialed)
			}
		})
	}

	// The same over CONNECT, with curl: an allowed name on its port, the refused port, and an
	// IP literal allowed by a CIDR (its certificate names the address).
	ca := writePEM(t, e.h.CA.PEM())
	connects := []struct {
		name       string
		net        api.Network
		url        string
		connect    int // the proxy's answer to curl's CONNECT
		body, rule string
	}{
		{"connect: allowed name on its port", api.Network{Egress: "allowlist", Allow: []string{"echo.example:443"}}, "https://echo.example/", 200, "", "echo.example:443"},
		{"connect: allowed name on another port", api.Network{Egress: "allowlist", Allow: []string{"echo.example:80"}}, "https://echo.example/", 403,
			"echo.example:443 is not in this session's allowlist", ""},
		{"connect: IP literal allowed by CIDR", api.Network{Egress: "allowlist", Allow: []string{cidr}}, "https://" + a0 + "/", 200, "", a0},
		{"connect: none", api.Network{}, "https://echo.example/", 403, "this session has no internet access", ""},
	}
	for _, tt := range connects {
		t.Run(tt.name, func(t *testing.T) {
			sb := e.session(t, tt.net, Limits{})
			out, err := curl(t, "-x", "http://"+sb.addr, "--cacert", ca, "-w", "\n%{http_connect} %{http_code}", tt.url)
			lines := strings.Split(out, "\n")
			codes := lines[len(lines)-1]
			if tt.connect == 200 {
				if err != nil || codes != "200 200" {
					t.Fatalf("curl: %q, %v; want CONNECT 200 and 200", out, err)
				}
				if echo := echoOf(t, strings.Join(lines[:len(lines)-1], "\n")); !echo.TLS {
					t.Errorf("echo %+v: not over TLS", echo)
				}
				r := sb.done()
				wantRecord(t, r, "allowed", tt.rule, "")
				if r.Protocol != "connect" || r.Intercepted || r.BytesOut == 0 || r.BytesIn == 0 {
					t.Errorf("record %+v: want a tunnel, not intercepted, bytes both ways", r)
				}
				return
			}
			if err == nil || codes != "403 000" {
				t.Errorf("curl: %q, %v; want CONNECT refused with 403", out, err)
			}
			wantRecord(t, sb.last(), "refused", tt.rule, tt.body)
			// The sentence, as a client that reads the answer's body sees it.
			host := strings.TrimPrefix(tt.url, "https://")
			code, body, _, _ := sb.connect(strings.TrimSuffix(host, "/") + ":443")
			wantRefusal(t, code, body, http.StatusForbidden, tt.body)
		})
	}
}

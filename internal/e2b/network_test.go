package e2b_test

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/egress"
	"github.com/cellbox/cellbox/internal/testhost"
)

// policy is the cellbox policy of session id, as GET /v1/sessions/{id} shows it.
func policy(t *testing.T, key, id string) api.Network {
	t.Helper()
	st, _, body := raw(t, "GET", "/v1/sessions/"+id, nil, "Authorization: Bearer "+key)
	var s api.Session
	if st != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("GET /v1/sessions/%s: %d %s", id, st, body)
	}
	return s.Network
}

// TestNetwork: E2B's egress settings through the SDK (Sandbox.create with
// allowInternetAccess and network, updateNetwork, getInfo): the policy each session got, and
// curl through the sandbox's proxy to a server on a test host, refused (403 from the proxy)
// or let through (200) as the policy says, before and after a live change.
func TestNetwork(t *testing.T) {
	serverURL(t)
	h := testhost.New(t)
	echo := h.ServeHTTP(t, netip.AddrPortFrom(h.Addr(1), 80), testhost.Echo())
	ip := echo.Addr().String()
	r := runClient(t, aliceKey, "network", "http://"+echo.String()+"/")
	var ids map[string]string
	r.get(t, "ids", &ids)
	for _, id := range ids {
		t.Cleanup(func() { raw(t, "DELETE", "/sandboxes/"+id, nil, "X-API-Key: "+aliceKey) })
	}

	t.Run("fetch", func(t *testing.T) {
		for step, want := range map[string]string{
			"offlineFetch":        "403", // allowInternetAccess: false
			"onlineFetch":         "403", // allowInternetAccess: true alone: the server's default, none here
			"afterOfflineFetch":   "403", // updateNetwork({allowInternetAccess: false})
			"afterAllowlistFetch": "200", // updateNetwork({allowOut: [ip], denyOut: [ALL_TRAFFIC]})
			"domainsFetch":        "403", // an allowlist of domains that are not this one
			"carvedFetch":         "200", // denyOut ip/29, allowOut ip: allowOut wins, as in E2B
		} {
			var got string
			r.get(t, step, &got)
			if got != want {
				t.Errorf("%s: curl said %q; want %s", step, got, want)
			}
		}
	})

	t.Run("policies", func(t *testing.T) {
		for name, want := range map[string]api.Network{
			"offline": {Egress: "none"},
			"online":  {Egress: "allowlist", Allow: []string{ip}},
			"domains": {Egress: "allowlist", Allow: []string{"pypi.org", "*.pythonhosted.org"}},
		} {
			if got := policy(t, aliceKey, ids[name]); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: policy %+v; want %+v", name, got, want)
			}
		}
		carved := policy(t, aliceKey, ids["carved"])
		if carved.Egress != "public" || len(carved.Deny) != 3 || len(carved.Allow) != 0 {
			t.Errorf("carved: policy %+v; want public with the /29 but %s denied (3 CIDRs)", carved, ip)
		}
		for _, d := range carved.Deny {
			rule, err := egress.ParseRule(d)
			if p := rule.Prefix; err != nil || p.Contains(echo.Addr()) || !netip.MustParsePrefix(ip+"/29").Masked().Overlaps(p) {
				t.Errorf("carved: deny %s", d)
			}
		}
	})

	t.Run("getInfo", func(t *testing.T) {
		type info struct {
			AllowInternetAccess *bool
			Network             *struct{ AllowOut, DenyOut []string }
		}
		var off, on, after, domains info
		r.get(t, "offlineInfo", &off)
		r.get(t, "onlineInfo", &on)
		r.get(t, "afterAllowlistInfo", &after)
		r.get(t, "domainsInfo", &domains)
		if off.AllowInternetAccess == nil || *off.AllowInternetAccess || off.Network != nil {
			t.Errorf("offline: %s", mustJSON(off))
		}
		// allowInternetAccess: true alone is the server's default, none here.
		if on.AllowInternetAccess == nil || *on.AllowInternetAccess {
			t.Errorf("online: %s", mustJSON(on))
		}
		if after.AllowInternetAccess != nil || after.Network == nil || strings.Join(after.Network.AllowOut, ",") != ip ||
			strings.Join(after.Network.DenyOut, ",") != "0.0.0.0/0" {
			t.Errorf("after updateNetwork to an allowlist: %s", mustJSON(after))
		}
		if domains.Network == nil || strings.Join(domains.Network.AllowOut, ",") != "pypi.org,*.pythonhosted.org" {
			t.Errorf("domains: %s", mustJSON(domains))
		}
	})

	t.Run("refusals", func(t *testing.T) {
		r.threw(t, "createDomainWithoutAll", "SandboxError", "400: network: allowOut entry \"pypi.org\" is a domain")
		r.threw(t, "updateDomainDeny", "SandboxError", "not domains")
		r.threw(t, "updateUnknown", "SandboxNotFoundError", "")
		// The refused update changed nothing.
		if got := policy(t, aliceKey, ids["online"]); got.Egress != "allowlist" {
			t.Errorf("after a refused update: %+v", got)
		}
	})
}

// TestNetworkRefusals: E2B's network calls over raw HTTP, in the wire shape the SDK sends:
// what the server's and the tenant's widest policy refuse (403), what is malformed (400), and
// another tenant's sandbox (404).
func TestNetworkRefusals(t *testing.T) {
	bob := create(t, bobKey)
	alice := create(t, aliceKey)
	bobH := []string{"X-API-Key: " + bobKey, "Content-Type: application/json"}
	for _, c := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		want                     string
	}{
		{"internet beyond the tenant's widest", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"denyOut":["10.0.0.0/8"]}}`, bobH, 403, `at most egress \"allowlist\"`},
		// What every SDK sends unless told otherwise: the server's default, not a request.
		{"allow_internet_access alone", "POST", "/v2/sandboxes", `{"templateID":"base","allow_internet_access":true}`, bobH, 201, `"sandboxID"`},
		{"a domain beyond the tenant's widest", "POST", "/v2/sandboxes", `{"network":{"allowOut":["example.com"],"denyOut":["0.0.0.0/0"]}}`, bobH, 403, "pypi.org"},
		{"update: an empty body is all traffic", "PUT", "/sandboxes/" + bob.SandboxID + "/network", `{}`, bobH, 403, "at most"},
		{"update within the widest", "PUT", "/sandboxes/" + bob.SandboxID + "/network", `{"allowOut":["pypi.org"],"denyOut":["0.0.0.0/0"]}`, bobH, 204, ""},
		{"update another tenant's sandbox", "PUT", "/sandboxes/" + alice.SandboxID + "/network", `{"allow_internet_access":false}`, bobH, 404, `"code":404`},
		{"not JSON", "PUT", "/sandboxes/" + bob.SandboxID + "/network", `{"allowOut":`, bobH, 400, "not valid JSON"},
		{"a bad entry", "PUT", "/sandboxes/" + bob.SandboxID + "/network", `{"denyOut":["10.0.0.0/33"]}`, bobH, 400, "denyOut entry"},
		{"a port in a denied range", "POST", "/v2/sandboxes", `{"network":{"allowOut":["8.8.8.8:53"],"denyOut":["8.8.0.0/16"]}}`, bobH, 400, "one port"},
		{"no key", "PUT", "/sandboxes/" + bob.SandboxID + "/network", `{}`, nil, 401, `"code":401`},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _, body := raw(t, c.method, c.path, strings.NewReader(c.body), c.hdr...)
			if st == http.StatusCreated {
				var s created
				json.Unmarshal([]byte(body), &s)
				raw(t, "DELETE", "/sandboxes/"+s.SandboxID, nil, "X-API-Key: "+bobKey)
			}
			if st != c.status || !strings.Contains(body, c.want) {
				t.Errorf("%d %s; want %d containing %q", st, body, c.status, c.want)
			}
		})
	}
	want := api.Network{Egress: "allowlist", Allow: []string{"pypi.org"}}
	if got := policy(t, bobKey, bob.SandboxID); !reflect.DeepEqual(got, want) {
		t.Errorf("bob's sandbox after the updates: %+v; want %+v", got, want)
	}
	if got := policy(t, aliceKey, alice.SandboxID); got.Egress != "none" {
		t.Errorf("alice's sandbox after bob's update: %+v", got)
	}
}

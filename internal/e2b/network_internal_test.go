package e2b

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/egress"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// TestPolicyOf: E2B's allow_internet_access and network, as cellbox policies.
func TestPolicyOf(t *testing.T) {
	yes, no := true, false
	for _, c := range []struct {
		name    string
		allow   *bool
		network string // JSON of networkConfig; "" for none
		want    *api.Network
		err     string // a part of the refusal
	}{
		{name: "neither: the server's default"},
		{name: "network of ingress only: the server's default", network: `{"allowPublicTraffic":false,"maskRequestHost":"x"}`},
		{name: "no internet", allow: &no, want: &api.Network{Egress: "none"}},
		{name: "internet", allow: &yes, want: &api.Network{Egress: "public"}},
		{name: "empty lists: nothing restricted", network: `{"allowOut":[],"denyOut":[]}`, want: &api.Network{Egress: "public"}},
		{name: "deny all", network: `{"denyOut":["0.0.0.0/0"]}`, want: &api.Network{Egress: "none"}},
		{name: "deny all, IPv6 form", network: `{"denyOut":["::/0"]}`, want: &api.Network{Egress: "none"}},
		{name: "allowlist", network: `{"allowOut":["pypi.org","*.pythonhosted.org","1.1.1.1"],"denyOut":["0.0.0.0/0"]}`,
			want: &api.Network{Egress: "allowlist", Allow: []string{"pypi.org", "*.pythonhosted.org", "1.1.1.1"}}},
		{name: "allowlist: other denies change nothing", network: `{"allowOut":["8.8.8.8"],"denyOut":["0.0.0.0/0","8.8.0.0/16"]}`,
			want: &api.Network{Egress: "allowlist", Allow: []string{"8.8.8.8"}}},
		{name: "no internet keeps allowOut", allow: &no, network: `{"allowOut":["pypi.org"],"denyOut":["9.9.9.9"]}`,
			want: &api.Network{Egress: "allowlist", Allow: []string{"pypi.org"}}},
		{name: "internet with a network: the network decides", allow: &yes, network: `{"allowOut":["pypi.org"],"denyOut":["0.0.0.0/0"]}`,
			want: &api.Network{Egress: "allowlist", Allow: []string{"pypi.org"}}},
		{name: "public minus deny", network: `{"denyOut":["9.9.9.9","10.0.0.0/8:5432","2001:db8::/32"]}`,
			want: &api.Network{Egress: "public", Deny: []string{"9.9.9.9", "10.0.0.0/8:5432", "2001:db8::/32"}}},
		{name: "allowed outside every deny: dropped", network: `{"allowOut":["1.1.1.1"],"denyOut":["9.9.9.9"]}`,
			want: &api.Network{Egress: "public", Deny: []string{"9.9.9.9"}}},
		{name: "allow covers a deny: the deny goes", network: `{"allowOut":["9.0.0.0/8"],"denyOut":["9.9.9.9","8.8.8.8"]}`,
			want: &api.Network{Egress: "public", Deny: []string{"8.8.8.8"}}},
		{name: "allow inside a deny: split around it", network: `{"allowOut":["8.8.8.8"],"denyOut":["8.8.8.8/30"]}`,
			want: &api.Network{Egress: "public", Deny: []string{"8.8.8.10/31", "8.8.8.9/32"}}},
		{name: "allow without a port inside a deny of a port", network: `{"allowOut":["8.8.8.8"],"denyOut":["8.8.8.8/31:53"]}`,
			want: &api.Network{Egress: "public", Deny: []string{"8.8.8.9/32:53"}}},
		{name: "allow of another port than the deny's", network: `{"allowOut":["8.8.8.8:443"],"denyOut":["8.8.8.0/24:53"]}`,
			want: &api.Network{Egress: "public", Deny: []string{"8.8.8.0/24:53"}}},
		{name: "IPv6 split", network: `{"allowOut":["2001:db8::1"],"denyOut":["[2001:db8::/127]:443"]}`,
			want: &api.Network{Egress: "public", Deny: []string{"[2001:db8::/128]:443"}}},
		{name: "rules: secrets", network: `{"allowOut":["api.example.com"],"denyOut":["0.0.0.0/0"],"rules":{"api.example.com":[{"transform":{"headers":{"Authorization":"Bearer a","X-A":"1"}}},{"transform":{"headers":{"Authorization":"Bearer b"}}}],"*.example.org":[{}]}}`,
			want: &api.Network{Egress: "allowlist", Allow: []string{"api.example.com"},
				Secrets: []api.EgressSecret{{Domain: "api.example.com", Headers: map[string]string{"Authorization": "Bearer b", "X-A": "1"}}}}},

		{name: "domain in denyOut", network: `{"denyOut":["example.com"]}`, err: "not domains"},
		{name: "domain in allowOut without deny all", network: `{"allowOut":["example.com"]}`, err: "ALL_TRAFFIC"},
		{name: "bad allowOut entry", network: `{"allowOut":["a b"],"denyOut":["0.0.0.0/0"]}`, err: "allowOut entry"},
		{name: "bad denyOut entry", network: `{"denyOut":["300.1.1.1"]}`, err: "denyOut entry"},
		{name: "a port inside a denied range", network: `{"allowOut":["8.8.8.8:53"],"denyOut":["8.8.0.0/16"]}`, err: "one port"},
		{name: "too many entries", network: `{"denyOut":[` + strings.Repeat(`"9.9.9.9",`, egress.MaxRules) + `"9.9.9.9"]}`, err: "at most"},
		{name: "a split too large", network: `{"allowOut":["2001:db8::1","2002::1","2003::1"],"denyOut":["2000::/3"]}`, err: "the most a policy holds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var n *networkConfig
			if c.network != "" {
				n = &networkConfig{}
				if err := json.Unmarshal([]byte(c.network), n); err != nil {
					t.Fatal(err)
				}
			}
			got, err := policyOf(c.allow, n)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("got %+v, %v; want an invalid argument containing %q", got, err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
			if got != nil {
				if _, err := egress.Compile(*got, nil); err != nil {
					t.Errorf("the policy does not compile: %v", err)
				}
			}
		})
	}
}

// TestSubtractExact: a split deny refuses exactly what the deny did but the allowed prefix.
func TestSubtractExact(t *testing.T) {
	deny, _ := egress.ParseRule("10.0.0.0/16")
	allow, _ := egress.ParseRule("10.0.77.0/24")
	out, err := subtract([]egress.Rule{deny}, []egress.Rule{allow})
	if err != nil {
		t.Fatal(err)
	}
	var rs []egress.Rule
	for _, s := range out {
		r, err := egress.ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	for _, a := range []string{"10.0.0.0", "10.0.76.255", "10.0.77.0", "10.0.77.255", "10.0.78.0", "10.0.255.255", "10.1.0.0"} {
		addr := netip.MustParseAddr(a)
		denied := 0
		for _, r := range rs {
			if r.MatchAddr(addr, 80) {
				denied++
			}
		}
		want := 0
		if deny.MatchAddr(addr, 80) && !allow.MatchAddr(addr, 80) {
			want = 1
		}
		if denied != want {
			t.Errorf("%s: denied by %d of %v; want %d", a, denied, out, want)
		}
	}
}

// TestNetworkView: the detail's allowInternetAccess and network, secrets redacted.
func TestNetworkView(t *testing.T) {
	for _, c := range []struct {
		in   api.Network
		want string
	}{
		{api.Network{Egress: "none"}, `false null`},
		{api.Network{}, `false null`},
		{api.Network{Egress: "public"}, `true {}`},
		{api.Network{Egress: "public", Deny: []string{"9.9.9.9/32"}}, `true {"denyOut":["9.9.9.9/32"]}`},
		{api.Network{Egress: "allowlist", Allow: []string{"pypi.org"}, Deny: []string{"1.2.3.4/32"},
			Secrets: []api.EgressSecret{{Domain: "pypi.org", Headers: map[string]string{"Authorization": api.EgressRedacted}}, {Domain: "github.com", Secret: "gh"}}},
			`null {"allowOut":["pypi.org"],"denyOut":["0.0.0.0/0","1.2.3.4/32"],"rules":{"github.com":[{}],"pypi.org":[{"transform":{"headers":{"Authorization":"[redacted]"}}}]}}`},
	} {
		allow, cfg := networkView(c.in)
		a, _ := json.Marshal(allow)
		n, _ := json.Marshal(cfg)
		if got := string(a) + " " + string(n); got != c.want {
			t.Errorf("%+v: %s; want %s", c.in, got, c.want)
		}
	}
}

// FuzzPolicyOf: any body gives a policy that compiles, or an invalid argument.
func FuzzPolicyOf(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"allowOut":["pypi.org"],"denyOut":["0.0.0.0/0"]}`, `{"denyOut":["8.8.0.0/16"],"allowOut":["8.8.8.8"]}`,
		`{"denyOut":["[2001:db8::/32]:443"],"allowOut":["2001:db8::1"]}`, `{"allowOut":["8.8.8.8:53"],"denyOut":["8.8.8.0/24:53"]}`,
		`{"rules":{"a.example":[{"transform":{"headers":{"A":"b"}}}]},"allowOut":["a.example"],"denyOut":["::/0"]}`,
	} {
		f.Add(s, byte(0))
	}
	f.Fuzz(func(t *testing.T, body string, internet byte) {
		var n networkConfig
		if json.Unmarshal([]byte(body), &n) != nil {
			return
		}
		var allow *bool
		if internet < 2 {
			v := internet == 1
			allow = &v
		}
		p, err := policyOf(allow, &n)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%v: not an invalid argument", err)
			}
			return
		}
		if p == nil {
			return
		}
		if _, err := egress.Compile(*p, nil); err != nil && !strings.Contains(err.Error(), "secret") {
			t.Fatalf("%+v does not compile: %v", p, err)
		}
	})
}

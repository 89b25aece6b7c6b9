package egress

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		in      string
		want    Rule   // Text, Domain, Wildcard, Port; Prefix from prefix
		prefix  string // for an address rule
		wantErr string
	}{
		{in: "pypi.org", want: Rule{Text: "pypi.org", Domain: "pypi.org"}},
		{in: "PyPI.org.", want: Rule{Text: "pypi.org", Domain: "pypi.org"}},
		{in: "pypi.org:443", want: Rule{Text: "pypi.org:443", Domain: "pypi.org", Port: 443}},
		{in: "*.pythonhosted.org", want: Rule{Text: "*.pythonhosted.org", Domain: "pythonhosted.org", Wildcard: true}},
		{in: "*.X.org:8080", want: Rule{Text: "*.x.org:8080", Domain: "x.org", Wildcard: true, Port: 8080}},
		{in: "1.2.3.4", prefix: "1.2.3.4/32", want: Rule{Text: "1.2.3.4"}},
		{in: "1.2.3.4/32", prefix: "1.2.3.4/32", want: Rule{Text: "1.2.3.4"}},
		{in: "1.2.3.4:22", prefix: "1.2.3.4/32", want: Rule{Text: "1.2.3.4:22", Port: 22}},
		{in: "10.0.0.0/8", prefix: "10.0.0.0/8", want: Rule{Text: "10.0.0.0/8"}},
		{in: "10.1.2.3/16:5432", prefix: "10.1.0.0/16", want: Rule{Text: "10.1.0.0/16:5432", Port: 5432}},
		{in: "0.0.0.0/0", prefix: "0.0.0.0/0", want: Rule{Text: "0.0.0.0/0"}},
		{in: "2001:db8::1", prefix: "2001:db8::1/128", want: Rule{Text: "2001:db8::1"}},
		{in: "[2001:DB8::1]:443", prefix: "2001:db8::1/128", want: Rule{Text: "[2001:db8::1]:443", Port: 443}},
		{in: "[2001:db8::1]", prefix: "2001:db8::1/128", want: Rule{Text: "2001:db8::1"}},
		{in: "2001:db8::1/32", prefix: "2001:db8::/32", want: Rule{Text: "2001:db8::/32"}},
		{in: "[2001:db8::/32]:443", prefix: "2001:db8::/32", want: Rule{Text: "[2001:db8::/32]:443", Port: 443}},
		{in: "::ffff:1.2.3.4", prefix: "1.2.3.4/32", want: Rule{Text: "1.2.3.4"}},
		{in: "[::ffff:1.2.3.4]:80", prefix: "1.2.3.4/32", want: Rule{Text: "1.2.3.4:80", Port: 80}},
		{in: "::ffff:10.0.0.0/104", prefix: "10.0.0.0/8", want: Rule{Text: "10.0.0.0/8"}},
		{in: "*." + strings.Repeat("a.", 125) + "org.:65535", want: Rule{Text: "*." + strings.Repeat("a.", 125) + "org:65535", Domain: strings.Repeat("a.", 125) + "org", Wildcard: true, Port: 65535}},
		{in: "pypi.org:65535", want: Rule{Text: "pypi.org:65535", Domain: "pypi.org", Port: 65535}},

		{in: "", wantErr: "empty"},
		{in: "*", wantErr: "not a domain"},
		{in: "*.com", wantErr: "two labels"},
		{in: "*.", wantErr: "wildcard"},
		{in: "*.*.x.org", wantErr: "wildcard"},
		{in: "a.*.x.org", wantErr: "not a domain"},
		{in: "*x.org", wantErr: "not a domain"},
		{in: "*.1.2.3.4", wantErr: "wildcard"},
		{in: "[*.x.org]", wantErr: "not a domain"},
		{in: "10.0.0.0/33", wantErr: "not a domain, IP address or CIDR"},
		{in: "10.0.0.0/-1", wantErr: "not a domain"},
		{in: "2001:db8::/129", wantErr: "not a domain"},
		{in: "fe80::/10%eth0", wantErr: "not a domain"},
		{in: "fe80::1%eth0", wantErr: "not a domain"},
		{in: "[1.2.3.4]:80", wantErr: "brackets"},
		{in: "[10.0.0.0/8]", wantErr: "not a domain"},
		{in: "2001:db8::/32:443", wantErr: "not a domain"},
		{in: "[2001:db8::1]443", wantErr: "port"},
		{in: "[2001:db8::1]:", wantErr: "port"},
		{in: "[2001:db8::1", wantErr: "bracket"},
		{in: "pypi.org:0", wantErr: "port"},
		{in: "pypi.org:65536", wantErr: "port"},
		{in: "pypi.org:-1", wantErr: "port"},
		{in: "pypi.org:+443", wantErr: "port"},
		{in: "pypi.org:0443", wantErr: "port"},
		{in: "pypi.org:443 ", wantErr: "port"},
		{in: "pypi.org:", wantErr: "port"},
		{in: ":443", wantErr: "no host"},
		{in: " pypi.org", wantErr: "not a domain"},
		{in: "https://pypi.org", wantErr: "port"},
		{in: "pypi.org/simple", wantErr: "not a domain"},
		{in: "127.1", wantErr: "not a domain"},
		{in: "2130706433", wantErr: "not a domain"},
		{in: strings.Repeat("a.", 200) + "org", wantErr: "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseRule(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseRule(%q) = %+v, want an error with %q", tt.in, r, tt.wantErr)
				}
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseRule(%q): %v, want invalid argument with %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRule(%q): %v", tt.in, err)
			}
			want := tt.want
			if tt.prefix != "" {
				want.Prefix = netip.MustParsePrefix(tt.prefix)
			}
			if r != want {
				t.Errorf("ParseRule(%q) = %+v, want %+v", tt.in, r, want)
			}
		})
	}
	t.Run("the error names the entry", func(t *testing.T) {
		_, err := Compile(api.Network{Egress: api.EgressAllowlist, Deny: []string{"10.0.0.0/33"}}, nil)
		if want := `deny entry "10.0.0.0/33": not a domain, IP address or CIDR`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile: %v, want %q", err, want)
		}
	})
}

func mustRule(t testing.TB, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMatchName(t *testing.T) {
	tests := []struct {
		rule, name string
		port       int
		want       bool
	}{
		{"pypi.org", "pypi.org", 443, true},
		{"pypi.org", "PYPI.ORG", 443, true},
		{"pypi.org", "pypi.org.", 443, true},
		{"pypi.org", "evilpypi.org", 443, false},
		{"pypi.org", "pypi.org.evil.com", 443, false},
		{"pypi.org", "www.pypi.org", 443, false},
		{"pypi.org", "pypi.or", 443, false},
		{"*.pypi.org", "pypi.org", 443, false},
		{"*.pypi.org", "files.pypi.org", 443, true},
		{"*.pypi.org", "a.b.pypi.org", 80, true},
		{"*.pypi.org", "FILES.PyPI.org.", 443, true},
		{"*.pypi.org", "evilpypi.org", 443, false},
		{"*.pypi.org", ".pypi.org", 443, false},
		{"*.pypi.org", "filespypi.org", 443, false},
		{"pypi.org:443", "pypi.org", 443, true},
		{"pypi.org:443", "pypi.org", 22, false},
		{"*.pypi.org:443", "x.pypi.org", 80, false},
		{"10.0.0.0/8", "pypi.org", 443, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s:%d", tt.rule, tt.name, tt.port), func(t *testing.T) {
			if got := mustRule(t, tt.rule).MatchName(tt.name, tt.port); got != tt.want {
				t.Errorf("MatchName = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMatchAddr(t *testing.T) {
	tests := []struct {
		rule, addr string
		port       int
		want       bool
	}{
		{"10.0.0.0/8", "10.9.9.9", 1, true},
		{"10.0.0.0/8", "11.0.0.0", 1, false},
		{"10.0.0.0/8", "::ffff:10.1.1.1", 1, true},
		{"::ffff:10.0.0.0/104", "10.1.1.1", 1, true},
		{"10.0.0.0/8:5432", "10.1.1.1", 5432, true},
		{"10.0.0.0/8:5432", "10.1.1.1", 5433, false},
		{"1.2.3.4", "1.2.3.4", 80, true},
		{"1.2.3.4", "1.2.3.5", 80, false},
		{"2001:db8::/32", "2001:db8:1::1", 443, true},
		{"2001:db8::/32", "2001:db9::1", 443, false},
		{"[2001:db8::1]:443", "2001:db8::1", 443, true},
		{"0.0.0.0/0", "2001:db8::1", 443, false},
		{"pypi.org", "1.2.3.4", 443, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s:%d", tt.rule, tt.addr, tt.port), func(t *testing.T) {
			if got := mustRule(t, tt.rule).MatchAddr(netip.MustParseAddr(tt.addr), tt.port); got != tt.want {
				t.Errorf("MatchAddr = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCompile(t *testing.T) {
	named := map[string]NamedSecret{
		"github": {Domains: []Rule{{Text: "api.github.com", Domain: "api.github.com"}}, Headers: http.Header{"Authorization": {"Bearer op"}}},
	}
	many := func(n int, f string) []string {
		var s []string
		for i := range n {
			s = append(s, fmt.Sprintf(f, i))
		}
		return s
	}
	manySecrets := func(n int) []api.EgressSecret {
		var s []api.EgressSecret
		for i := range n {
			s = append(s, api.EgressSecret{Domain: fmt.Sprintf("h%d.example", i), Headers: map[string]string{"X-A": "v"}})
		}
		return s
	}
	manyHeaders := map[string]string{}
	for i := range 17 {
		manyHeaders[fmt.Sprintf("X-H%d", i)] = "v"
	}
	al := api.EgressAllowlist
	secret := func(domain string, h map[string]string) api.Network {
		return api.Network{Egress: al, Secrets: []api.EgressSecret{{Domain: domain, Headers: h}}}
	}
	tests := []struct {
		name    string
		n       api.Network
		wantErr string // "" for no error
	}{
		{"empty is none", api.Network{}, ""},
		{"allowlist", api.Network{Egress: al, Allow: []string{"pypi.org", "*.pythonhosted.org"}, Deny: []string{"10.0.0.0/8"}}, ""},
		{"empty allowlist", api.Network{Egress: al}, ""},
		{"public with deny", api.Network{Egress: api.EgressPublic, Deny: []string{"evil.com"}}, ""},
		{"unknown mode", api.Network{Egress: "open"}, `egress "open": give "none", "allowlist" or "public"`},
		{"mode case", api.Network{Egress: "Public"}, `give "none"`},
		{"none with allow", api.Network{Allow: []string{"pypi.org"}}, "do nothing"},
		{"none with deny", api.Network{Egress: api.EgressNone, Deny: []string{"pypi.org"}}, "do nothing"},
		{"none with secrets", api.Network{Secrets: []api.EgressSecret{{Domain: "x.org", Secret: "github"}}}, "do nothing"},
		{"public with allow", api.Network{Egress: api.EgressPublic, Allow: []string{"pypi.org"}}, "allow entries do nothing"},
		{"bad allow", api.Network{Egress: al, Allow: []string{"pypi.org", "*"}}, `allow entry "*": not a domain`},
		{"bad deny", api.Network{Egress: al, Deny: []string{"10.0.0.0/33"}}, `deny entry "10.0.0.0/33"`},
		{"256 entries", api.Network{Egress: al, Allow: many(200, "h%d.example"), Deny: many(56, "d%d.example")}, ""},
		{"257 entries", api.Network{Egress: al, Allow: many(200, "h%d.example"), Deny: many(57, "d%d.example")}, "at most 256"},
		{"32 secrets", api.Network{Egress: al, Secrets: manySecrets(32)}, ""},
		{"33 secrets", api.Network{Egress: al, Secrets: manySecrets(33)}, "at most 32"},
		{"inline secret", secret("api.example.com", map[string]string{"authorization": "Bearer x"}), ""},
		{"wildcard secret", secret("*.example.com", map[string]string{"X-Key": "x"}), ""},
		{"secret without headers", secret("api.example.com", nil), "no headers"},
		{"secret without domain", secret("", map[string]string{"X-Key": "x"}), "needs its domain"},
		{"secret for an address", secret("1.2.3.4", map[string]string{"X-Key": "x"}), "without an address or a port"},
		{"secret with a port", secret("api.example.com:443", map[string]string{"X-Key": "x"}), "without an address or a port"},
		{"secret for a bad domain", secret("*", map[string]string{"X-Key": "x"}), `secret domain "*"`},
		{"header name with space", secret("a.example", map[string]string{"X Key": "x"}), "not a valid header name"},
		{"header name with colon", secret("a.example", map[string]string{"X-Key:": "x"}), "not a valid header name"},
		{"empty header name", secret("a.example", map[string]string{"": "x"}), "not a valid header name"},
		{"value with CR LF", secret("a.example", map[string]string{"X-Key": "x\r\nHost: evil"}), "CR, LF, NUL"},
		{"value with LF", secret("a.example", map[string]string{"X-Key": "x\nY: z"}), "CR, LF, NUL"},
		{"value with NUL", secret("a.example", map[string]string{"X-Key": "x\x00"}), "CR, LF, NUL"},
		{"value of 8 KiB", secret("a.example", map[string]string{"X-Key": strings.Repeat("v", 8<<10)}), ""},
		{"value over 8 KiB", secret("a.example", map[string]string{"X-Key": strings.Repeat("v", 8<<10+1)}), "at most 8192 bytes"},
		{"17 headers", secret("a.example", manyHeaders), "at most 16"},
		{"the same header twice", secret("a.example", map[string]string{"x-key": "1", "X-Key": "2"}), "given twice"},
		{"Host", secret("a.example", map[string]string{"host": "evil"}), `"Host": a secret may not set it`},
		{"Content-Length", secret("a.example", map[string]string{"Content-Length": "0"}), "may not set"},
		{"Transfer-Encoding", secret("a.example", map[string]string{"Transfer-Encoding": "chunked"}), "may not set"},
		{"Connection", secret("a.example", map[string]string{"Connection": "close"}), "may not set"},
		{"Proxy-Authorization", secret("a.example", map[string]string{"proxy-authorization": "x"}), "may not set"},
		{"TE", secret("a.example", map[string]string{"TE": "trailers"}), "may not set"},
		{"Upgrade", secret("a.example", map[string]string{"Upgrade": "h2c"}), "may not set"},
		{"Trailer", secret("a.example", map[string]string{"Trailer": "x"}), "may not set"},
		{"two secrets for a domain", api.Network{Egress: al, Secrets: []api.EgressSecret{
			{Domain: "a.example", Headers: map[string]string{"X-A": "1"}},
			{Domain: "A.example.", Headers: map[string]string{"X-B": "1"}},
		}}, "has a secret already"},
		{"named", api.Network{Egress: al, Secrets: []api.EgressSecret{{Domain: "api.github.com", Secret: "github"}}}, ""},
		{"named without domain", api.Network{Egress: al, Secrets: []api.EgressSecret{{Secret: "github"}}}, ""},
		{"named for another domain", api.Network{Egress: al, Secrets: []api.EgressSecret{{Domain: "evil.com", Secret: "github"}}}, `secret "github" may be sent to "api.github.com" only, not to "evil.com"`},
		{"named for a wildcard over its domain", api.Network{Egress: al, Secrets: []api.EgressSecret{{Domain: "*.github.com", Secret: "github"}}}, "may be sent to"},
		{"unknown named", api.Network{Egress: al, Secrets: []api.EgressSecret{{Domain: "api.github.com", Secret: "gitlab"}}}, `secret "gitlab": no secret of that name`},
		{"named and headers", api.Network{Egress: al, Secrets: []api.EgressSecret{{Domain: "api.github.com", Secret: "github", Headers: map[string]string{"X": "y"}}}}, "not both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.n, named)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				if p.Mode == "" {
					t.Fatal("Compile gave no mode")
				}
				return
			}
			if err == nil {
				t.Fatalf("Compile = %+v, want an error with %q", p, tt.wantErr)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Compile: %v, want invalid argument with %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "Bearer") {
				t.Fatalf("Compile's error quotes a secret: %v", err)
			}
		})
	}
}

func TestCompileNamedSecretDomains(t *testing.T) {
	named := map[string]NamedSecret{
		"gh": {
			Domains: []Rule{mustRule(t, "api.github.com"), mustRule(t, "*.githubusercontent.com")},
			Headers: http.Header{"Authorization": {"Bearer op"}},
		},
	}
	tests := []struct {
		domain string
		want   []string // the Secrets' rules; nil: refused
	}{
		{"", []string{"api.github.com", "*.githubusercontent.com"}},
		{"api.github.com", []string{"api.github.com"}},
		{"API.github.com.", []string{"api.github.com"}},
		{"raw.githubusercontent.com", []string{"raw.githubusercontent.com"}},
		{"*.githubusercontent.com", []string{"*.githubusercontent.com"}},
		{"*.x.githubusercontent.com", []string{"*.x.githubusercontent.com"}},
		{"githubusercontent.com", nil},
		{"github.com", nil},
		{"*.github.com", nil},
		{"evilapi.github.com", nil},
		{"api.github.com.evil.com", nil},
	}
	for _, tt := range tests {
		t.Run(tt.domain, func(t *testing.T) {
			p, err := Compile(api.Network{Egress: api.EgressPublic, Secrets: []api.EgressSecret{{Domain: tt.domain, Secret: "gh"}}}, named)
			if tt.want == nil {
				if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("Compile = %+v, %v; want it refused", p, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range p.Secrets {
				got = append(got, s.Rule.Text)
				if s.Name != "gh" || s.Headers.Get("Authorization") != "Bearer op" {
					t.Errorf("secret %+v: want the named secret's headers", s)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("secrets for %v, want %v", got, tt.want)
			}
		})
	}
}

func mustCompile(t testing.TB, n api.Network) *Policy {
	t.Helper()
	p, err := Compile(n, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNarrow(t *testing.T) {
	al, pub, none := api.EgressAllowlist, api.EgressPublic, api.EgressNone
	maxAllow := api.Network{Egress: al, Allow: []string{"pypi.org:443", "*.pythonhosted.org", "github.com", "10.1.0.0/16", "2001:db8::/32"}, Deny: []string{"files.pythonhosted.org"}}
	md := []string{"files.pythonhosted.org"}
	tests := []struct {
		name     string
		p, max   api.Network
		wantErr  string   // "" for allowed
		wantDeny []string // the result's deny entries
	}{
		{name: "none under anything", p: api.Network{}, max: api.Network{Egress: none}},
		{name: "none gets no deny", p: api.Network{}, max: maxAllow},
		{name: "allowlist under none", p: api.Network{Egress: al}, max: api.Network{}, wantErr: `this server allows at most egress "none"`},
		{name: "public under none", p: api.Network{Egress: pub}, max: api.Network{Egress: none}, wantErr: `at most egress "none"`},
		{name: "public under allowlist", p: api.Network{Egress: pub}, max: maxAllow, wantErr: `egress "public": this server allows at most egress "allowlist" (allow entries within "pypi.org:443"`},
		{name: "allowlist under public", p: api.Network{Egress: al, Allow: []string{"anything.example", "8.8.8.8"}}, max: api.Network{Egress: pub, Deny: []string{"evil.com"}}, wantDeny: []string{"evil.com"}},
		{name: "public under public", p: api.Network{Egress: pub, Deny: []string{"a.example"}}, max: api.Network{Egress: pub, Deny: []string{"evil.com", "a.example"}}, wantDeny: []string{"a.example", "evil.com"}},
		{name: "equal domain", p: api.Network{Egress: al, Allow: []string{"github.com"}}, max: maxAllow, wantDeny: []string{"files.pythonhosted.org"}},
		{name: "uncovered domain", p: api.Network{Egress: al, Allow: []string{"github.com", "evil.com"}}, max: maxAllow, wantErr: `allow entry "evil.com": not within what this server allows`},
		{name: "below an exact domain", p: api.Network{Egress: al, Allow: []string{"api.github.com"}}, max: maxAllow, wantErr: `"api.github.com"`},
		{name: "wildcard over an exact domain", p: api.Network{Egress: al, Allow: []string{"*.github.com"}}, max: maxAllow, wantErr: `"*.github.com"`},
		{name: "covered by a wildcard", p: api.Network{Egress: al, Allow: []string{"files.pythonhosted.org", "a.b.pythonhosted.org:443"}}, max: maxAllow, wantDeny: md},
		{name: "the same wildcard", p: api.Network{Egress: al, Allow: []string{"*.pythonhosted.org"}}, max: maxAllow, wantDeny: md},
		{name: "a narrower wildcard", p: api.Network{Egress: al, Allow: []string{"*.x.pythonhosted.org"}}, max: maxAllow, wantDeny: md},
		{name: "the wildcard's own domain", p: api.Network{Egress: al, Allow: []string{"pythonhosted.org"}}, max: maxAllow, wantErr: `"pythonhosted.org"`},
		{name: "suffix trick", p: api.Network{Egress: al, Allow: []string{"evilpythonhosted.org"}}, max: maxAllow, wantErr: "not within"},
		{name: "the same port", p: api.Network{Egress: al, Allow: []string{"pypi.org:443"}}, max: maxAllow, wantDeny: md},
		{name: "another port", p: api.Network{Egress: al, Allow: []string{"pypi.org:22"}}, max: maxAllow, wantErr: `"pypi.org:22"`},
		{name: "any port under one port", p: api.Network{Egress: al, Allow: []string{"pypi.org"}}, max: maxAllow, wantErr: `"pypi.org"`},
		{name: "a port under any port", p: api.Network{Egress: al, Allow: []string{"github.com:443"}}, max: maxAllow, wantDeny: md},
		{name: "CIDR inside", p: api.Network{Egress: al, Allow: []string{"10.1.2.0/24:5432", "10.1.9.9", "2001:db8:1::/48"}}, max: maxAllow, wantDeny: md},
		{name: "CIDR equal", p: api.Network{Egress: al, Allow: []string{"10.1.0.0/16"}}, max: maxAllow, wantDeny: md},
		{name: "CIDR wider", p: api.Network{Egress: al, Allow: []string{"10.0.0.0/8"}}, max: maxAllow, wantErr: `"10.0.0.0/8"`},
		{name: "CIDR beside", p: api.Network{Egress: al, Allow: []string{"10.2.0.0/16"}}, max: maxAllow, wantErr: `"10.2.0.0/16"`},
		{name: "4in6 of a covered address", p: api.Network{Egress: al, Allow: []string{"::ffff:10.1.2.3"}}, max: maxAllow, wantDeny: md},
		{name: "all IPv6 under an IPv4 range", p: api.Network{Egress: al, Allow: []string{"::/0"}}, max: api.Network{Egress: al, Allow: []string{"0.0.0.0/0"}}, wantErr: `"::/0"`},
		{name: "address under a domain", p: api.Network{Egress: al, Allow: []string{"140.82.112.3"}}, max: maxAllow, wantErr: `"140.82.112.3"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, max := mustCompile(t, tt.p), mustCompile(t, tt.max)
			got, err := Narrow(p, max)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Narrow = %+v, want an error with %q", got, tt.wantErr)
				}
				if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Narrow: %v, want permission denied with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Narrow: %v", err)
			}
			if got.Mode != p.Mode || fmt.Sprint(got.Allow) != fmt.Sprint(p.Allow) {
				t.Errorf("Narrow changed the mode or allow: %+v", got)
			}
			if d := got.View().Deny; fmt.Sprint(d) != fmt.Sprint(tt.wantDeny) {
				t.Errorf("deny = %q, want %q", d, tt.wantDeny)
			}
			// The result goes through Narrow again unchanged (a client PATCHes back what GET showed).
			again, err := Narrow(mustCompile(t, got.View()), max)
			if err != nil || !again.Equal(got) {
				t.Errorf("Narrow of the result = %+v, %v; want it unchanged", again, err)
			}
		})
	}
	t.Run("nil max", func(t *testing.T) {
		p := mustCompile(t, api.Network{Egress: pub})
		if got, err := Narrow(p, nil); err != nil || got != p {
			t.Errorf("Narrow(p, nil) = %v, %v; want p", got, err)
		}
	})
	t.Run("p is not changed", func(t *testing.T) {
		p := mustCompile(t, api.Network{Egress: pub, Deny: []string{"a.example"}})
		if _, err := Narrow(p, mustCompile(t, api.Network{Egress: pub, Deny: []string{"b.example"}})); err != nil {
			t.Fatal(err)
		}
		if len(p.Deny) != 1 {
			t.Errorf("Narrow changed its argument: %+v", p.Deny)
		}
	})
}

func TestDecide(t *testing.T) {
	ranges := Ranges{PrivateAllow: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}
	allow := mustCompile(t, api.Network{
		Egress: api.EgressAllowlist,
		Allow:  []string{"pypi.org:443", "*.pythonhosted.org", "example.com", "203.0.113.0/24", "mirror.internal", "10.9.0.0/16:8080", "[2001:db8::/32]:443"},
		Deny:   []string{"bad.pythonhosted.org", "203.0.113.66", "198.51.100.0/24:25"},
	})
	public := mustCompile(t, api.Network{Egress: api.EgressPublic, Deny: []string{"evil.com", "*.evil.com", "192.0.2.0/24"}})
	none := mustCompile(t, api.Network{})
	tests := []struct {
		name   string
		p      *Policy
		host   string // what the client asked for: a name or an IP literal
		addr   string // what the name resolved to ("" for an IP literal)
		port   int
		want   bool
		rule   string // the deciding rule
		reason string // a part of the refusal's reason
	}{
		{name: "allowed name", p: allow, host: "pypi.org", addr: "192.0.2.10", port: 443, want: true, rule: "pypi.org:443"},
		{name: "allowed name on a refused port", p: allow, host: "pypi.org", addr: "192.0.2.10", port: 22, reason: "pypi.org:22 (192.0.2.10) is not in this session's allowlist"},
		{name: "wildcard", p: allow, host: "files.pythonhosted.org", addr: "192.0.2.11", port: 443, want: true, rule: "*.pythonhosted.org"},
		{name: "deny over allow", p: allow, host: "bad.pythonhosted.org", addr: "192.0.2.11", port: 443, rule: "bad.pythonhosted.org", reason: `bad.pythonhosted.org:443 is refused by this session's deny entry "bad.pythonhosted.org"`},
		{name: "deny over allow, case and dot", p: allow, host: "BAD.pythonhosted.org.", addr: "192.0.2.11", port: 443, rule: "bad.pythonhosted.org"},
		{name: "allowed name resolving to a private address", p: allow, host: "example.com", addr: "10.0.0.5", port: 443, reason: "example.com:443 (10.0.0.5) is refused: the address is a private address"},
		{name: "allowed name resolving to loopback", p: allow, host: "example.com", addr: "127.0.0.1", port: 443, reason: "loopback"},
		{name: "allowed name resolving to metadata", p: allow, host: "example.com", addr: "169.254.169.254", port: 80, reason: "metadata"},
		{name: "allowed name resolving to mapped loopback", p: allow, host: "example.com", addr: "::ffff:127.0.0.1", port: 80, reason: "loopback"},
		{name: "allowed name resolving to a denied address", p: allow, host: "example.com", addr: "203.0.113.66", port: 443, rule: "203.0.113.66", reason: "deny entry"},
		{name: "unlisted name at an allowed address", p: allow, host: "other.example", addr: "203.0.113.5", port: 443, want: true, rule: "203.0.113.0/24"},
		{name: "unlisted name", p: allow, host: "other.example", addr: "192.0.2.1", port: 443, reason: "other.example:443 (192.0.2.1) is not in this session's allowlist"},
		{name: "IP literal by CIDR", p: allow, host: "203.0.113.9", port: 443, want: true, rule: "203.0.113.0/24"},
		{name: "IPv6 literal by CIDR and port", p: allow, host: "[2001:db8::5]", port: 443, want: true, rule: "[2001:db8::/32]:443"},
		{name: "IPv6 literal on another port", p: allow, host: "2001:db8::5", port: 80, reason: "[2001:db8::5]:80 is not in this session's allowlist"},
		{name: "mapped IP literal by CIDR", p: allow, host: "::ffff:203.0.113.9", port: 443, want: true, rule: "203.0.113.0/24"},
		{name: "IP literal not listed", p: allow, host: "192.0.2.1", port: 443, reason: "192.0.2.1:443 is not in this session's allowlist"},
		{name: "IP literal denied", p: allow, host: "203.0.113.66", port: 443, rule: "203.0.113.66", reason: "deny entry"},
		{name: "IP literal of metadata", p: allow, host: "169.254.169.254", port: 80, reason: "metadata"},
		{name: "NAT64 of metadata", p: allow, host: "64:ff9b::a9fe:a9fe", port: 80, reason: "metadata"},
		{name: "private allowed by the operator and the session", p: allow, host: "mirror.internal", addr: "10.9.1.1", port: 8080, want: true, rule: "mirror.internal"},
		{name: "private allowed by the operator, not by the session", p: allow, host: "10.9.1.1", port: 443, reason: "not in this session's allowlist"},
		{name: "private literal allowed by both", p: allow, host: "10.9.1.1", port: 8080, want: true, rule: "10.9.0.0/16:8080"},
		{name: "public", p: public, host: "pypi.org", addr: "203.0.113.10", port: 443, want: true},
		{name: "public any port", p: public, host: "pypi.org", addr: "198.51.100.1", port: 22, want: true},
		{name: "public minus deny name", p: public, host: "evil.com", addr: "198.51.100.1", port: 443, rule: "evil.com", reason: "deny entry"},
		{name: "public minus deny wildcard", p: public, host: "a.evil.com", addr: "198.51.100.1", port: 443, rule: "*.evil.com"},
		{name: "public minus deny suffix trick", p: public, host: "notevil.com", addr: "198.51.100.1", port: 443, want: true},
		{name: "public minus deny CIDR", p: public, host: "x.example", addr: "192.0.2.1", port: 443, rule: "192.0.2.0/24"},
		{name: "public private", p: public, host: "x.example", addr: "192.168.0.1", port: 443, reason: "private"},
		{name: "public CGNAT literal", p: public, host: "100.100.100.100", port: 443, reason: "carrier-grade"},
		{name: "none", p: none, host: "pypi.org", addr: "192.0.2.10", port: 443, reason: "no internet access"},
		{name: "none literal", p: none, host: "192.0.2.10", port: 443, reason: "no internet access"},
		{name: "no mode", p: &Policy{Allow: []Rule{mustRule(t, "pypi.org")}}, host: "pypi.org", addr: "192.0.2.10", port: 443, reason: "no internet access"},
		{name: "nil policy", p: nil, host: "pypi.org", addr: "192.0.2.10", port: 443, reason: "no internet access"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHost(tt.host)
			if err != nil {
				t.Fatal(err)
			}
			var d Decision
			if h.Name != "" {
				byName := tt.p.DecideName(h.Name, tt.port)
				d = byName
				if !byName.Refused { // the gateway resolves only what the name left open
					d = tt.p.DecideAddr(ranges, h.Name, byName, netip.MustParseAddr(tt.addr), tt.port)
				}
			} else {
				d = tt.p.DecideAddr(ranges, "", Decision{}, h.Addr, tt.port)
			}
			if d.Allowed == d.Refused {
				t.Fatalf("decision %+v is not final", d)
			}
			if d.Allowed != tt.want {
				t.Fatalf("decision %+v, want allowed %v", d, tt.want)
			}
			if tt.rule != "" && d.Rule != tt.rule || tt.want && tt.rule == "" && d.Rule != "" {
				t.Errorf("rule = %q, want %q", d.Rule, tt.rule)
			}
			if !tt.want && (d.Reason == "" || !strings.Contains(d.Reason, tt.reason)) {
				t.Errorf("reason = %q, want %q", d.Reason, tt.reason)
			}
			if tt.want && d.Reason != "" {
				t.Errorf("an allowed destination has a reason: %q", d.Reason)
			}
		})
	}
	t.Run("DecideName leaves an unlisted name open", func(t *testing.T) {
		d := allow.DecideName("other.example", 443)
		if d.Allowed || d.Refused || d.Reason == "" {
			t.Errorf("DecideName = %+v, want neither allowed nor refused, with the reason it would be refused for", d)
		}
	})
	t.Run("DecideAddr keeps a refusal by name", func(t *testing.T) {
		byName := allow.DecideName("bad.pythonhosted.org", 443)
		d := allow.DecideAddr(ranges, "bad.pythonhosted.org", byName, netip.MustParseAddr("203.0.113.5"), 443)
		if !d.Refused || d != byName {
			t.Errorf("DecideAddr = %+v, want the refusal by name %+v", d, byName)
		}
	})
}

func TestSecretFor(t *testing.T) {
	p, err := Compile(api.Network{Egress: api.EgressAllowlist, Secrets: []api.EgressSecret{
		{Domain: "*.example.com", Headers: map[string]string{"X-Key": "wild"}},
		{Domain: "api.example.com", Headers: map[string]string{"X-Key": "exact"}},
		{Domain: "*.a.example.com", Headers: map[string]string{"X-Key": "wild-a"}},
		{Domain: "other.org", Secret: "op"},
	}}, map[string]NamedSecret{"op": {Domains: []Rule{mustRule(t, "other.org")}, Headers: http.Header{"Authorization": {"Bearer op"}}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, header, want string
	}{
		{"api.example.com", "X-Key", "exact"},
		{"API.Example.com.", "X-Key", "exact"},
		{"www.example.com", "X-Key", "wild"},
		{"x.a.example.com", "X-Key", "wild"}, // the first wildcard that covers it
		{"example.com", "X-Key", ""},
		{"evilexample.com", "X-Key", ""},
		{"other.org", "Authorization", "Bearer op"},
		{"x.other.org", "Authorization", ""},
		{"pypi.org", "X-Key", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := p.SecretFor(tt.name)
			if got := h.Get(tt.header); got != tt.want {
				t.Errorf("SecretFor(%q)[%s] = %q, want %q", tt.name, tt.header, got, tt.want)
			}
			if tt.want == "" && h != nil {
				t.Errorf("SecretFor(%q) = %v, want nil", tt.name, h)
			}
		})
	}
	t.Run("the result is a copy", func(t *testing.T) {
		p.SecretFor("api.example.com").Set("X-Key", "changed")
		if got := p.SecretFor("api.example.com").Get("X-Key"); got != "exact" {
			t.Errorf("after changing a result, SecretFor = %q", got)
		}
	})
	if h := (*Policy)(nil).SecretFor("a.example"); h != nil {
		t.Errorf("nil policy: SecretFor = %v", h)
	}
}

func TestView(t *testing.T) {
	const inline, opValue = "sk-inline-0123456789", "ghp_operator_token_987"
	named := map[string]NamedSecret{"github": {Domains: []Rule{mustRule(t, "api.github.com")}, Headers: http.Header{"Authorization": {"Bearer " + opValue}}}}
	n := api.Network{
		Egress: api.EgressAllowlist,
		Allow:  []string{"PyPI.org.", "*.pythonhosted.org", "[::ffff:10.1.2.3]:80", "2001:db8::1/32"},
		Deny:   []string{"bad.pythonhosted.org"},
		Secrets: []api.EgressSecret{
			{Domain: "api.example.com", Headers: map[string]string{"x-api-key": inline, "X-Other": inline + "2"}},
			{Domain: "api.github.com", Secret: "github"},
		},
	}
	p, err := Compile(n, named)
	if err != nil {
		t.Fatal(err)
	}
	v := p.View()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{inline, opValue} {
		if strings.Contains(string(data), secret) {
			t.Fatalf("the view holds a secret's value: %s", data)
		}
	}
	want := `{"egress":"allowlist","allow":["pypi.org","*.pythonhosted.org","10.1.2.3:80","2001:db8::/32"],"deny":["bad.pythonhosted.org"],` +
		`"secrets":[{"domain":"api.example.com","headers":{"X-Api-Key":"[redacted]","X-Other":"[redacted]"}},{"domain":"api.github.com","secret":"github"}]}`
	if string(data) != want {
		t.Errorf("View = %s\nwant   %s", data, want)
	}
	t.Run("compiles back", func(t *testing.T) {
		q, err := Compile(v, named)
		if err != nil {
			t.Fatal(err)
		}
		if q.Equal(p) {
			t.Error("the view compiled back holds the original values (they should be redacted)")
		}
		q.Secrets[0].Headers = p.Secrets[0].Headers
		if !q.Equal(p) {
			t.Errorf("the view compiled back = %+v, want %+v", q, p)
		}
	})
	if got := (*Policy)(nil).View(); got.Egress != api.EgressNone {
		t.Errorf("nil policy: View = %+v", got)
	}
}

func TestEqual(t *testing.T) {
	base := api.Network{Egress: api.EgressAllowlist, Allow: []string{"pypi.org"}, Secrets: []api.EgressSecret{{Domain: "a.example", Headers: map[string]string{"X-K": "1"}}}}
	p := mustCompile(t, base)
	tests := []struct {
		name string
		q    *Policy
		want bool
	}{
		{"same", mustCompile(t, base), true},
		{"same spelled otherwise", mustCompile(t, api.Network{Egress: api.EgressAllowlist, Allow: []string{"PYPI.org."}, Secrets: []api.EgressSecret{{Domain: "A.example", Headers: map[string]string{"x-k": "1"}}}}), true},
		{"another mode", mustCompile(t, api.Network{Egress: api.EgressPublic, Secrets: base.Secrets}), false},
		{"another allow", mustCompile(t, api.Network{Egress: api.EgressAllowlist, Allow: []string{"pypi.org:443"}, Secrets: base.Secrets}), false},
		{"another secret value", mustCompile(t, api.Network{Egress: api.EgressAllowlist, Allow: base.Allow, Secrets: []api.EgressSecret{{Domain: "a.example", Headers: map[string]string{"X-K": "2"}}}}), false},
		{"no secret", mustCompile(t, api.Network{Egress: api.EgressAllowlist, Allow: base.Allow}), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Equal(tt.q); got != tt.want {
				t.Errorf("Equal = %v, want %v", got, tt.want)
			}
		})
	}
	if !(*Policy)(nil).Equal(mustCompile(t, api.Network{})) {
		t.Error("a nil policy is not equal to mode none")
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"pypi.org", "*.pythonhosted.org", "1.2.3.4", "10.0.0.0/8", "[2001:db8::1]:443", "pypi.org:443",
		"10.0.0.0/8:5432", "[2001:db8::/32]:443", "::ffff:10.0.0.0/104", "*.com", "*", "10.0.0.0/33", "[::1", "a:b:c", "x.org:0443"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("ParseRule(%q): %v, not invalid argument", s, err)
			}
			return
		}
		if (r.Domain != "") == r.Prefix.IsValid() {
			t.Fatalf("ParseRule(%q) = %+v: want a domain or a prefix", s, r)
		}
		if r.Port < 0 || r.Port > 65535 {
			t.Fatalf("ParseRule(%q) = port %d", s, r.Port)
		}
		if r.Prefix.IsValid() && (r.Prefix != r.Prefix.Masked() || r.Prefix.Addr().Is4In6() && r.Prefix.Bits() >= 96) {
			t.Fatalf("ParseRule(%q) = prefix %v, not masked or not unmapped", s, r.Prefix)
		}
		again, err := ParseRule(r.Text)
		if err != nil || again != r {
			t.Fatalf("ParseRule(%q) = %+v, but its text reads back as %+v, %v", s, r, again, err)
		}
	})
}

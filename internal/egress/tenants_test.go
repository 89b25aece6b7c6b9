package egress

import (
	"errors"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

func TestLoadTenants(t *testing.T) {
	const token = "Bearer ghp_operator_token_123"
	data := `{"tenants": {
		"alice": {
			"max": {"egress": "allowlist", "allow": ["*.github.com", "api.github.com", "pypi.org:443"], "deny": ["gist.github.com"]},
			"default": {"egress": "allowlist", "allow": ["api.github.com"], "secrets": [{"domain": "api.github.com", "secret": "github"}]},
			"secrets": {"github": {"domains": ["api.github.com", "*.githubusercontent.com"], "headers": {"authorization": "` + token + `"}}},
			"max_connections": 16, "quota_mb": 512, "rate_kbps": 8000
		},
		"": {"max": {"egress": "public"}},
		"key-0a1b2c3d": {}
	}}`
	ts, err := LoadTenants([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 {
		t.Fatalf("%d tenants, want 3", len(ts))
	}
	a := ts["alice"]
	if a.MaxConnections != 16 || a.QuotaBytes != 512<<20 || a.RateBytesPerSec != 1_000_000 {
		t.Errorf("alice's limits: %d connections, %d bytes, %d bytes/s", a.MaxConnections, a.QuotaBytes, a.RateBytesPerSec)
	}
	if a.Max.Mode != api.EgressAllowlist || len(a.Max.Allow) != 3 || a.Default.Mode != api.EgressAllowlist {
		t.Errorf("alice's max %+v, default %+v", a.Max, a.Default)
	}
	if got := a.Default.SecretFor("api.github.com").Get("Authorization"); got != token {
		t.Errorf("alice's default adds Authorization %q for api.github.com", got)
	}
	if got := a.Secrets["github"].Domains; len(got) != 2 || got[1].Text != "*.githubusercontent.com" {
		t.Errorf("alice's named secret's domains: %+v", got)
	}
	if ts[""].Max.Mode != api.EgressPublic || ts[""].Default != nil {
		t.Errorf(`tenant "": %+v`, ts[""])
	}
	if k := ts["key-0a1b2c3d"]; k.Max != nil || k.Default != nil || k.MaxConnections != 0 {
		t.Errorf("an empty tenant: %+v", k)
	}

	t.Run("a session may use the named secret for its domain only", func(t *testing.T) {
		ok := api.Network{Egress: api.EgressAllowlist, Allow: []string{"api.github.com"}, Secrets: []api.EgressSecret{{Domain: "api.github.com", Secret: "github"}}}
		if _, err := Compile(ok, a.Secrets); err != nil {
			t.Errorf("for its domain: %v", err)
		}
		bad := api.Network{Egress: api.EgressPublic, Secrets: []api.EgressSecret{{Domain: "attacker.example", Secret: "github"}}}
		_, err := Compile(bad, a.Secrets)
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `not to "attacker.example"`) {
			t.Errorf("for another domain: %v", err)
		}
		if err != nil && strings.Contains(err.Error(), "ghp_") {
			t.Errorf("the error quotes the secret: %v", err)
		}
		if _, err := Compile(bad, ts[""].Secrets); err == nil {
			t.Error("another tenant's named secret was found")
		}
	})
}

func TestLoadTenantsErrors(t *testing.T) {
	tests := []struct {
		name, data, wantErr string
	}{
		{"not JSON", `{"tenants": `, "not JSON"},
		{"unknown top field", `{"tenant": {}}`, `unknown field "tenant"`},
		{"unknown tenant field", `{"tenants": {"bob": {"quota": 5}}}`, `tenant "bob": json: unknown field "quota"`},
		{"unknown network field", `{"tenants": {"bob": {"max": {"egress": "public", "allowOut": []}}}}`, `tenant "bob": json: unknown field "allowOut"`},
		{"unknown secret field", `{"tenants": {"bob": {"secrets": {"s": {"domains": ["a.example"], "headers": {"X": "1"}, "value": "x"}}}}}`, `unknown field "value"`},
		{"wrong type", `{"tenants": {"bob": {"max_connections": "16"}}}`, `tenant "bob": max_connections: a JSON string does not fit here (want int)`},
		{"bad JSON", `{"tenants": x}`, "not JSON at byte"},
		{"two values", `{"tenants": {}} {}`, "text after"},
		{"bad tenant name", `{"tenants": {"bob smith": {}}}`, `tenant "bob smith": a tenant's name`},
		{"long tenant name", `{"tenants": {"` + strings.Repeat("a", 33) + `": {}}}`, "a tenant's name"},
		{"bad max", `{"tenants": {"bob": {"max": {"egress": "open"}}}}`, `tenant "bob": max: egress "open"`},
		{"bad default entry", `{"tenants": {"bob": {"default": {"egress": "allowlist", "allow": ["*"]}}}}`, `tenant "bob": default: allow entry "*"`},
		{"secrets in max", `{"tenants": {"bob": {"max": {"egress": "public", "secrets": [{"domain": "a.example", "headers": {"X": "1"}}]}}}}`, "max: secrets do nothing"},
		{"default wider than max", `{"tenants": {"bob": {"max": {"egress": "allowlist", "allow": ["pypi.org"]}, "default": {"egress": "public"}}}}`, `tenant "bob": default is not within max: egress "public": this server allows at most egress "allowlist"`},
		{"default allow outside max", `{"tenants": {"bob": {"max": {"egress": "allowlist", "allow": ["pypi.org"]}, "default": {"egress": "allowlist", "allow": ["evil.com"]}}}}`, `allow entry "evil.com": not within`},
		{"default names an unknown secret", `{"tenants": {"bob": {"default": {"egress": "public", "secrets": [{"domain": "a.example", "secret": "nope"}]}}}}`, `secret "nope"`},
		{"default uses a secret for another domain", `{"tenants": {"bob": {"secrets": {"gh": {"domains": ["api.github.com"], "headers": {"Authorization": "x"}}}, "default": {"egress": "public", "secrets": [{"domain": "evil.com", "secret": "gh"}]}}}}`, `secret "gh" may be sent to "api.github.com" only`},
		{"secret without domains", `{"tenants": {"bob": {"secrets": {"gh": {"headers": {"Authorization": "x"}}}}}}`, `secrets: "gh": domains: give the domains`},
		{"secret for an address", `{"tenants": {"bob": {"secrets": {"gh": {"domains": ["10.0.0.1"], "headers": {"Authorization": "x"}}}}}}`, "without an address"},
		{"secret with a bad domain", `{"tenants": {"bob": {"secrets": {"gh": {"domains": ["*.com"], "headers": {"Authorization": "x"}}}}}}`, `secrets: "gh": domains: "*.com"`},
		{"secret without headers", `{"tenants": {"bob": {"secrets": {"gh": {"domains": ["a.example"]}}}}}`, "headers: no headers"},
		{"secret with a framing header", `{"tenants": {"bob": {"secrets": {"gh": {"domains": ["a.example"], "headers": {"Host": "x"}}}}}}`, `headers: header "Host"`},
		{"secret with CR LF", `{"tenants": {"bob": {"secrets": {"gh": {"domains": ["a.example"], "headers": {"X": "a\r\nb"}}}}}}`, "CR, LF"},
		{"bad secret name", `{"tenants": {"bob": {"secrets": {"g h": {"domains": ["a.example"], "headers": {"X": "1"}}}}}}`, "a secret's name"},
		{"negative connections", `{"tenants": {"bob": {"max_connections": -1}}}`, "max_connections"},
		{"negative quota", `{"tenants": {"bob": {"quota_mb": -1}}}`, "quota_mb"},
		{"huge quota", `{"tenants": {"bob": {"quota_mb": 9007199254740991}}}`, "quota_mb"},
		{"negative rate", `{"tenants": {"bob": {"rate_kbps": -5}}}`, "rate_kbps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadTenants([]byte(tt.data))
			if err == nil {
				t.Fatalf("LoadTenants took it; want an error with %q", tt.wantErr)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("LoadTenants: %v\nwant invalid argument with %q", err, tt.wantErr)
			}
		})
	}
	t.Run("empty file", func(t *testing.T) {
		ts, err := LoadTenants([]byte(`{}`))
		if err != nil || len(ts) != 0 {
			t.Errorf("LoadTenants({}) = %v, %v", ts, err)
		}
	})
}

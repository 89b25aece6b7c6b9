package tool

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
)

func TestNetworkNote(t *testing.T) {
	many := make([]string, 25)
	for i := range many {
		many[i] = fmt.Sprintf("host%d.example", i)
	}
	secret := []api.EgressSecret{{Domain: "api.github.com", Headers: map[string]string{"Authorization": api.EgressRedacted}}, {Domain: "*.example.org", Secret: "named"}}
	tests := []struct {
		name      string
		n         api.Network
		want, not []string
	}{
		{"none", api.Network{Egress: api.EgressNone}, []string{"no internet access", "pip install", "don't try"}, []string{"proxy"}},
		{"default", api.Network{}, []string{"no internet access"}, nil},
		{"allowlist without entries", api.Network{Egress: api.EgressAllowlist}, []string{"no internet access"}, nil},
		{"allowlist", api.Network{Egress: api.EgressAllowlist, Allow: []string{"pypi.org", "*.pythonhosted.org:443"}, Deny: []string{"evil.pypi.org"}},
			[]string{"only pypi.org, *.pythonhosted.org:443", "HTTP_PROXY", "403", "Refused as well: evil.pypi.org."}, []string{"no internet", "public"}},
		{"allowlist, capped", api.Network{Egress: api.EgressAllowlist, Allow: many},
			[]string{"host0.example", "host19.example and 5 more"}, []string{"host20.example"}},
		{"public", api.Network{Egress: api.EgressPublic}, []string{"public internet", "Private and internal addresses are refused"}, []string{"Refused as well"}},
		{"secrets", api.Network{Egress: api.EgressPublic, Secrets: secret},
			[]string{"Requests to api.github.com, *.example.org get their credentials added by the server", "without a token"},
			[]string{api.EgressRedacted, "Authorization", "named"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NetworkNote(tt.n)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(got, w) {
					t.Errorf("has %q:\n%s", w, got)
				}
			}
		})
	}
}

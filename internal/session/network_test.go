package session

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// The operator's egress flags: what they allow, and the sentences a bad one gets.
func TestNetworkFlags(t *testing.T) {
	bad := []struct {
		name string
		set  func(*config.Config)
		want string
	}{
		{"unknown mode", func(c *config.Config) { c.Egress = "open" }, "--egress"},
		{"entries without allowlist", func(c *config.Config) { c.Egress = "public:pypi.org" }, "allowlist only"},
		{"default wider than max", func(c *config.Config) { c.Egress, c.EgressMax = "public", "none" }, "--egress"},
		{"bad deny entry", func(c *config.Config) { c.EgressDeny = "10.0.0.0/33" }, "--egress-max or --egress-deny"},
		{"bad private allow", func(c *config.Config) { c.EgressPrivateAllow = "intranet" }, "--egress-private-allow"},
		{"allow server without a port", func(c *config.Config) { c.EgressAllowServer = "127.0.0.1" }, "--egress-allow-server"},
		{"allow server on a wildcard", func(c *config.Config) { c.EgressAllowServer = "0.0.0.0:8080" }, "name the address and port sessions would dial"},
		{"allow server by name", func(c *config.Config) { c.EgressAllowServer = "localhost:8080" }, "--egress-allow-server"},
		{"missing tenants file", func(c *config.Config) { c.EgressTenants = "/nonexistent/tenants.json" }, "--egress-tenants"},
		{"a tenant's max below the server's default", func(c *config.Config) {
			p := filepath.Join(t.TempDir(), "tenants.json")
			os.WriteFile(p, []byte(`{"tenants": {"alice": {"max": {"egress": "none"}}}}`), 0o600)
			c.Egress, c.EgressTenants = "public", p
		}, `tenant "alice"`},
		{"a default beyond an unconfined backend", func(c *config.Config) { c.Egress = "public" }, "share the host's network"},
		{"roots without a certificate", func(c *config.Config) {
			p := filepath.Join(t.TempDir(), "roots.pem")
			os.WriteFile(p, []byte("not a certificate"), 0o600)
			c.EgressRoots = p
		}, "--egress-roots"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Default()
			c.set(&cfg)
			confined := c.name != "a default beyond an unconfined backend"
			if _, err := newNetwork(cfg, confined, slog.New(slog.DiscardHandler), nil); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error naming %s", err, c.want)
			}
		})
	}

	cfg := config.Default()
	cfg.Egress, cfg.EgressMax, cfg.EgressDeny = "allowlist:pypi.org", "allowlist:pypi.org,*.pythonhosted.org", "files.pythonhosted.org"
	tenants := filepath.Join(t.TempDir(), "tenants.json")
	os.WriteFile(tenants, []byte(`{"tenants": {"alice": {"default": {"egress": "none"}, "max": {"egress": "none"}, "max_connections": 3},
		"bob": {"secrets": {"gh": {"domains": ["pypi.org"], "headers": {"Authorization": "Bearer x"}}}}}}`), 0o600)
	cfg.EgressTenants = tenants
	n, err := newNetwork(cfg, true, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("default", func(t *testing.T) {
		p, err := n.policy("carol", nil)
		if err != nil || p.Mode != api.EgressAllowlist || len(p.Allow) != 1 || len(p.Deny) != 1 {
			t.Errorf("the server's default: %+v %v", p, err)
		}
		if p, err := n.policy("alice", nil); err != nil || p.Mode != api.EgressNone {
			t.Errorf("a tenant's default: %+v %v", p, err)
		}
		if _, err := n.policy("alice", &api.Network{Egress: api.EgressAllowlist, Allow: []string{"pypi.org"}}); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("beyond a tenant's max: %v", err)
		}
	})
	t.Run("attack/wider_than_max", func(t *testing.T) {
		for _, req := range []api.Network{{Egress: api.EgressPublic}, {Egress: api.EgressAllowlist, Allow: []string{"evil.example"}}} {
			if _, err := n.policy("carol", &req); !errors.Is(err, errdefs.ErrPermissionDenied) {
				t.Errorf("%+v: %v", req, err)
			}
		}
	})
	t.Run("within_max", func(t *testing.T) {
		p, err := n.policy("carol", &api.Network{Egress: api.EgressAllowlist, Allow: []string{"*.pythonhosted.org"}})
		if err != nil || len(p.Deny) != 1 || p.Deny[0].Text != "files.pythonhosted.org" {
			t.Errorf("the operator's deny entries are enforced: %+v %v", p, err)
		}
	})
	t.Run("attack/another_tenants_secret", func(t *testing.T) {
		req := api.Network{Egress: api.EgressAllowlist, Allow: []string{"pypi.org"}, Secrets: []api.EgressSecret{{Secret: "gh"}}}
		if _, err := n.policy("carol", &req); err == nil {
			t.Error("carol used bob's named secret")
		}
		if p, err := n.policy("bob", &req); err != nil || len(p.Secrets) != 1 {
			t.Errorf("bob's own named secret: %+v %v", p, err)
		}
	})
	t.Run("limits", func(t *testing.T) {
		if l := n.limitsFor("alice"); l.MaxConns != 3 || l.QuotaBytes != 4096<<20 {
			t.Errorf("alice's limits: %+v", l)
		}
		if l := n.limitsFor("carol"); l.MaxConns != 32 {
			t.Errorf("the server's limits: %+v", l)
		}
	})
	t.Run("local_unsafe", func(t *testing.T) {
		open, err := newNetwork(config.Default(), false, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := open.policy("", &api.Network{Egress: api.EgressPublic}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("a backend that shares the host's network took a policy: %v", err)
		}
		if _, err := open.policy("", nil); err != nil {
			t.Errorf("none on that backend: %v", err)
		}
	})
}

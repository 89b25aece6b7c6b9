package config

import (
	"flag"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func load(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	c := Default()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	c.Flags(fs)
	err := Load(fs, args)
	return c, err
}

func TestLoadOrder(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(file, []byte(`{"pool-size": 5, "memory-mb": 512, "idle-timeout": "5m", "addr": "127.0.0.1:1"}`), 0o644)
	t.Setenv("CELLBOX_MEMORY_MB", "768")
	t.Setenv("CELLBOX_ADDR", "127.0.0.1:2")
	c, err := load(t, "--config", file, "--addr", "127.0.0.1:3")
	if err != nil {
		t.Fatal(err)
	}
	if c.PoolSize != 5 || c.MemoryMB != 768 || c.Addr != "127.0.0.1:3" || c.IdleTimeout != 5*time.Minute {
		t.Errorf("file < env < flags not respected: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

// --max-lifetime comes from the file, CELLBOX_MAX_LIFETIME and the flag like any setting.
func TestMaxLifetime(t *testing.T) {
	if c := Default(); c.MaxLifetime != 24*time.Hour {
		t.Errorf("default --max-lifetime %v, want 24h", c.MaxLifetime)
	}
	file := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(file, []byte(`{"max-lifetime": "2h"}`), 0o644)
	if c, err := load(t, "--config", file); err != nil || c.MaxLifetime != 2*time.Hour {
		t.Errorf("file: %v, %v", c.MaxLifetime, err)
	}
	t.Setenv("CELLBOX_MAX_LIFETIME", "1h")
	if c, err := load(t, "--config", file); err != nil || c.MaxLifetime != time.Hour {
		t.Errorf("env: %v, %v", c.MaxLifetime, err)
	}
	if c, err := load(t, "--max-lifetime", "90s"); err != nil || c.MaxLifetime != 90*time.Second {
		t.Errorf("flag: %v, %v", c.MaxLifetime, err)
	}
	t.Setenv("CELLBOX_MAX_LIFETIME", "a day")
	if _, err := load(t); err == nil || !strings.Contains(err.Error(), "CELLBOX_MAX_LIFETIME") {
		t.Errorf("bad env: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"pool-sise": 5}`), 0o644)
	if _, err := load(t, "--config", bad); err == nil || !strings.Contains(err.Error(), "pool-sise") {
		t.Errorf("unknown key: %v", err)
	}
	t.Setenv("CELLBOX_POOL_SIZE", "many")
	if _, err := load(t); err == nil || !strings.Contains(err.Error(), "CELLBOX_POOL_SIZE") {
		t.Errorf("bad env: %v", err)
	}
}

// CELLBOX_API_KEYS holds keys, not the file of --api-keys; the file comes from the flag or
// the config file only.
func TestAPIKeysVariableIsNotTheFile(t *testing.T) {
	t.Setenv("CELLBOX_API_KEYS", "cbx_0123456789abcdef0123,cbx_fedcba9876543210fedc")
	c, err := load(t)
	if err != nil || c.APIKeysFile != "" {
		t.Fatalf("CELLBOX_API_KEYS taken as --api-keys: %q, %v", c.APIKeysFile, err)
	}
	file := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(file, []byte(`{"api-keys": "/etc/cellbox/keys", "tenant-max-sessions": 3}`), 0o644)
	if c, err = load(t, "--config", file); err != nil || c.APIKeysFile != "/etc/cellbox/keys" || c.TenantMaxSessions != 3 {
		t.Errorf("config file: %+v, %v", c, err)
	}
	if c, err = load(t, "--api-keys", "/k", "--insecure-no-auth", "--metrics-public", "--tenant-max-executions", "2"); err != nil ||
		c.APIKeysFile != "/k" || !c.InsecureNoAuth || !c.MetricsPublic || c.TenantMaxExecutions != 2 {
		t.Errorf("flags: %+v, %v", c, err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"backend", func(c *Config) { c.Backend = "vm" }, "--backend"},
		{"memory above max", func(c *Config) { c.MemoryMB = c.MaxMemoryMB + 1 }, "--memory-mb"},
		{"tiny memory", func(c *Config) { c.MemoryMB = 10 }, "at least 64"},
		{"negative pool", func(c *Config) { c.PoolSize = -1 }, "--pool-size"},
		{"pool max", func(c *Config) { c.PoolMax = 1001 }, "--pool-max"},
		{"zero timeout", func(c *Config) { c.ExecTimeout = 0 }, "--exec-timeout"},
		{"quota", func(c *Config) { c.Quota = "xfs" }, "--quota"},
		{"tenant cap", func(c *Config) { c.TenantMaxSessions = -1 }, "--tenant-max-sessions"},
		{"zero max lifetime", func(c *Config) { c.MaxLifetime = 0 }, "--max-lifetime"},
		{"negative max lifetime", func(c *Config) { c.MaxLifetime = -time.Second }, "--max-lifetime"},
		{"rootfs", func(c *Config) { c.RootFS = "overlay" }, "--rootfs"},
		{"image name", func(c *Config) { c.Image = "Bad/Name" }, "--image: image name"},
		{"empty image", func(c *Config) { c.Image = "" }, "--image"},
		{"pools without a count", func(c *Config) { c.RootFS, c.ImagePools = "image", "ml" }, `"ml": give NAME=N`},
		{"pools bad count", func(c *Config) { c.RootFS, c.ImagePools = "image", "ml=two" }, "give NAME=N"},
		{"pools negative", func(c *Config) { c.RootFS, c.ImagePools = "image", "ml=-1" }, "0..1000"},
		{"pools too many", func(c *Config) { c.RootFS, c.ImagePools = "image", "ml=1001" }, "0..1000"},
		{"pools bad name", func(c *Config) { c.RootFS, c.ImagePools = "image", "../x=1" }, "image name"},
		{"language pools without a count", func(c *Config) { c.LanguagePools = "javascript" }, "give LANG=N"},
		{"language pools python", func(c *Config) { c.LanguagePools = "python=2" }, "--pool-size"},
		{"language pools unknown", func(c *Config) { c.LanguagePools = "cobol=1" }, `"cobol"`},
		{"language pools too many", func(c *Config) { c.LanguagePools = "r=1001" }, "0..1000"},
		{"tool languages unknown", func(c *Config) { c.ToolLanguages = "javascript,cobol" }, `"cobol" is not one of`},
		{"tool languages alias", func(c *Config) { c.ToolLanguages = "js" }, `"js" is not one of`},
		{"pools twice", func(c *Config) { c.RootFS, c.ImagePools = "image", "ml=1,ml=2" }, "ml is given twice"},
		{"pools of the default", func(c *Config) { c.RootFS, c.ImagePools = "image", "default=3" }, "--pool-size is its count"},
		{"pools on the host's root", func(c *Config) { c.ImagePools = "ml=1" }, "--rootfs image (runc) or --backend docker"},
		{"pools on local-unsafe", func(c *Config) { c.Backend, c.RootFS, c.ImagePools = "local-unsafe", "image", "ml=1" }, "host's root"},
		{"cluster kind", func(c *Config) { c.Cluster = "nomad" }, "--cluster \"nomad\""},
		{"cluster node name", func(c *Config) { c.Cluster, c.ClusterNode = "kubernetes", "Node_A" }, "--cluster-node"},
		{"cluster node path", func(c *Config) { c.Cluster, c.ClusterNode = "kubernetes", "../a" }, "--cluster-node"},
		{"cluster node too long", func(c *Config) { c.Cluster, c.ClusterNode = "kubernetes", strings.Repeat("a", 201) }, "--cluster-node"},
		{"cluster lease", func(c *Config) { c.Cluster, c.ClusterLeaseDuration = "kubernetes", time.Millisecond }, "--cluster-lease-duration"},
		{"provider", func(c *Config) { c.Provider = "gemini" }, "choose openai, openai-responses or anthropic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mod(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want mention of %s", err, tt.want)
			}
		})
	}
	c := Default()
	if err := c.Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
	for _, p := range []string{"openai", "openai-responses", "anthropic"} {
		c.Provider = p
		if err := c.Validate(); err != nil {
			t.Errorf("--provider %s: %v", p, err)
		}
	}
}

// In a cluster, session ids start with the node's tag: 8 hex digits, the same for a name
// every time, different between names; a single server's ids have no prefix.
func TestSessionIDPrefix(t *testing.T) {
	c := Default()
	if p := c.SessionIDPrefix(); p != "" {
		t.Errorf("single server: prefix %q, want none", p)
	}
	c.Cluster, c.ClusterNode = "kubernetes", "node-a"
	a := c.SessionIDPrefix()
	if len(a) != 8 || strings.Trim(a, "0123456789abcdef") != "" || a != NodeTag("node-a") {
		t.Errorf("node-a: prefix %q, want its 8 hex digit tag %q", a, NodeTag("node-a"))
	}
	if NodeTag("node-b") == a {
		t.Errorf("node-a and node-b have the same tag %q", a)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("a cluster node's settings: %v", err)
	}
}

// Which image sessions get, and which images keep warm sandboxes, follow the backend and
// --rootfs: runc on the host's root and local-unsafe run on no image ("").
func TestDefaultImageAndPools(t *testing.T) {
	tests := []struct {
		backend, rootfs, pools string
		image                  string
		want                   map[string]int
	}{
		{"runc", "host", "", "", map[string]int{"": 2}},
		{"runc", "image", "", "default", map[string]int{"default": 2}},
		{"runc", "image", " ml=1, gpu=0 ,", "default", map[string]int{"default": 2, "ml": 1, "gpu": 0}},
		{"local-unsafe", "image", "", "", map[string]int{"": 2}},
		{"docker", "host", "ml=4", "default", map[string]int{"default": 2, "ml": 4}},
	}
	for _, tt := range tests {
		c := Default()
		c.Backend, c.RootFS, c.ImagePools = tt.backend, tt.rootfs, tt.pools
		if got := c.DefaultImage(); got != tt.image {
			t.Errorf("%s --rootfs %s: DefaultImage() = %q, want %q", tt.backend, tt.rootfs, got, tt.image)
		}
		if got := c.Pools(); !maps.Equal(got, tt.want) {
			t.Errorf("%s --rootfs %s --image-pools %q: Pools() = %v, want %v", tt.backend, tt.rootfs, tt.pools, got, tt.want)
		}
	}
}

// --image, --rootfs and --image-pools come from the file, CELLBOX_* and flags like any setting.
func TestImageSettings(t *testing.T) {
	c := Default()
	if c.Image != "default" || c.RootFS != "host" || c.ImagePools != "" {
		t.Errorf("defaults: --image %q --rootfs %q --image-pools %q", c.Image, c.RootFS, c.ImagePools)
	}
	file := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(file, []byte(`{"image": "py", "rootfs": "image", "image-pools": "ml=1"}`), 0o644)
	t.Setenv("CELLBOX_IMAGE_POOLS", "ml=3,gpu=1")
	c, err := load(t, "--config", file, "--image", "base", "--pool-size", "1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Image != "base" || c.RootFS != "image" || c.ImagePools != "ml=3,gpu=1" {
		t.Errorf("file < env < flags not respected: --image %q --rootfs %q --image-pools %q", c.Image, c.RootFS, c.ImagePools)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	if want := map[string]int{"base": 1, "ml": 3, "gpu": 1}; !maps.Equal(c.Pools(), want) {
		t.Errorf("Pools() = %v, want %v", c.Pools(), want)
	}
}

func TestLanguagePoolSizes(t *testing.T) {
	c := Default()
	c.LanguagePools = "js=1, ts=2,r=3"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.LanguagePoolSizes(); len(got) != 2 || got["javascript"] != 3 || got["r"] != 3 {
		t.Errorf("LanguagePoolSizes: %v (TypeScript's kernel is JavaScript's)", got)
	}
}

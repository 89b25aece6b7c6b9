package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// NamedSecret is a secret the operator configured for a tenant: headers that may be added to
// requests for its domains only (name rules without ports, wildcards allowed).
type NamedSecret struct {
	Domains []Rule
	Headers http.Header
}

// Tenant is the operator's egress configuration for one tenant. Zero limits mean the server's
// own (its flags) apply.
type Tenant struct {
	Max, Default    *Policy // nil: the server's --egress-max, --egress
	Secrets         map[string]NamedSecret
	MaxConnections  int   // open connections of one session at a time
	QuotaBytes      int64 // bytes a session may move, both ways together
	RateBytesPerSec int64 // a session's bandwidth, each way
}

// Bounds of the tenants file.
const (
	maxQuotaMB     = 1 << 30
	maxRateKbps    = 1 << 30
	maxConnections = 1 << 16
)

// tenantsFile is the JSON of --egress-tenants.
type tenantsFile struct {
	Tenants map[string]json.RawMessage `json:"tenants"`
}

type tenantJSON struct {
	Max            *api.Network               `json:"max"`
	Default        *api.Network               `json:"default"`
	Secrets        map[string]namedSecretJSON `json:"secrets"`
	MaxConnections int                        `json:"max_connections"`
	QuotaMB        int64                      `json:"quota_mb"`
	RateKbps       int64                      `json:"rate_kbps"`
}

type namedSecretJSON struct {
	Domains []string          `json:"domains"`
	Headers map[string]string `json:"headers"`
}

// LoadTenants reads the operator's per-tenant egress configuration (--egress-tenants FILE):
//
//	{"tenants": {"NAME": {"max": NETWORK, "default": NETWORK,
//	    "secrets": {"github": {"domains": ["api.github.com"], "headers": {"Authorization": "Bearer ..."}}},
//	    "max_connections": 16, "quota_mb": 512, "rate_kbps": 0}}}
//
// NAME is a tenant's name as the keys file gives it (the name after the key, or the
// "key-xxxxxxxx" derived from a key given without one); "" is the tenant of a server without
// keys and of cellbox's own callers (run, repl, chat, mcp on stdio). NETWORK is what sessions
// send ({"egress": "allowlist", "allow": [...]}). A tenant's default must be within its max;
// a max has no secrets; a default may reference the tenant's named secrets. quota_mb is in
// MiB, rate_kbps in kilobits per second; 0 (or absent) leaves the server's own limit.
//
// The JSON is strict: an unknown field, a second value after the object, or a wrong type is
// refused. Errors name the tenant and field, never a secret's value.
func LoadTenants(data []byte) (map[string]Tenant, error) {
	var f tenantsFile
	if err := decodeStrict(data, &f); err != nil {
		return nil, fmt.Errorf("the egress tenants file: %w", err)
	}
	out := make(map[string]Tenant, len(f.Tenants))
	for _, name := range slices.Sorted(maps.Keys(f.Tenants)) {
		var tj tenantJSON
		err := decodeStrict(f.Tenants[name], &tj)
		if err == nil {
			out[name], err = loadTenant(name, tj)
		}
		if err != nil {
			return nil, fmt.Errorf("tenant %q: %w", clip(name), err)
		}
	}
	return out, nil
}

// decodeStrict decodes one JSON value into v: no unknown fields, nothing after it.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", jsonError(err), errdefs.ErrInvalidArgument)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("text after the JSON value: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// jsonError describes a decoding error without quoting the file's values.
func jsonError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%s: a JSON %s does not fit here (want %s)", te.Field, te.Value, te.Type)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "not JSON: it ends early"
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("not JSON at byte %d", se.Offset)
	}
	return err.Error() // unknown fields: `json: unknown field "x"`, names only
}

func loadTenant(name string, tj tenantJSON) (Tenant, error) {
	if name != "" && !auth.ValidName(name) {
		return Tenant{}, fmt.Errorf("a tenant's name is one of the keys file: 1 to %d letters, digits, '.', '_' or '-' (\"\" for a server without keys): %w", auth.MaxNameLen, errdefs.ErrInvalidArgument)
	}
	t := Tenant{Secrets: map[string]NamedSecret{}}
	for _, sn := range slices.Sorted(maps.Keys(tj.Secrets)) {
		ns, err := loadNamedSecret(sn, tj.Secrets[sn])
		if err != nil {
			return Tenant{}, fmt.Errorf("secrets: %q: %w", clip(sn), err)
		}
		t.Secrets[sn] = ns
	}
	var err error
	if tj.Max != nil {
		if len(tj.Max.Secrets) > 0 {
			return Tenant{}, fmt.Errorf("max: secrets do nothing in a maximum; put them in default or in the tenant's secrets: %w", errdefs.ErrInvalidArgument)
		}
		if t.Max, err = Compile(*tj.Max, nil); err != nil {
			return Tenant{}, fmt.Errorf("max: %w", err)
		}
	}
	if tj.Default != nil {
		if t.Default, err = Compile(*tj.Default, t.Secrets); err != nil {
			return Tenant{}, fmt.Errorf("default: %w", err)
		}
		if _, err := Narrow(t.Default, t.Max); err != nil {
			return Tenant{}, fmt.Errorf("default is not within max: %v: %w", err, errdefs.ErrInvalidArgument)
		}
	}
	switch {
	case tj.MaxConnections < 0 || tj.MaxConnections > maxConnections:
		return Tenant{}, fmt.Errorf("max_connections: from 0 (the server's) to %d: %w", maxConnections, errdefs.ErrInvalidArgument)
	case tj.QuotaMB < 0 || tj.QuotaMB > maxQuotaMB:
		return Tenant{}, fmt.Errorf("quota_mb: from 0 (the server's) to %d: %w", int64(maxQuotaMB), errdefs.ErrInvalidArgument)
	case tj.RateKbps < 0 || tj.RateKbps > maxRateKbps:
		return Tenant{}, fmt.Errorf("rate_kbps: from 0 (the server's) to %d: %w", int64(maxRateKbps), errdefs.ErrInvalidArgument)
	}
	t.MaxConnections = tj.MaxConnections
	t.QuotaBytes = tj.QuotaMB << 20
	t.RateBytesPerSec = tj.RateKbps * 1000 / 8
	return t, nil
}

func loadNamedSecret(name string, sj namedSecretJSON) (NamedSecret, error) {
	if !auth.ValidName(name) {
		return NamedSecret{}, fmt.Errorf("a secret's name is 1 to %d letters, digits, '.', '_' or '-': %w", auth.MaxNameLen, errdefs.ErrInvalidArgument)
	}
	if len(sj.Domains) == 0 {
		return NamedSecret{}, fmt.Errorf("domains: give the domains the secret may be sent to: %w", errdefs.ErrInvalidArgument)
	}
	var ns NamedSecret
	for _, d := range sj.Domains {
		r, err := parseSecretDomain(d)
		if err != nil {
			return NamedSecret{}, fmt.Errorf("domains: %w", err)
		}
		ns.Domains = append(ns.Domains, r)
	}
	h, err := checkHeaders(sj.Headers)
	if err != nil {
		return NamedSecret{}, fmt.Errorf("headers: %w", err)
	}
	ns.Headers = h
	return ns, nil
}

package e2b

import (
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/egress"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// E2B's egress settings, translated to a cellbox policy (api.Network) and back. E2B
// decides a connection by allowOut first, then denyOut, then lets it out; cellbox's deny
// wins over its allow. docs/e2b.md gives the mapping and why.

// allTraffic is E2B's ALL_TRAFFIC: in denyOut, "nothing but allowOut". "::/0" counts too.
const allTraffic = "0.0.0.0/0"

// networkConfig is the egress part of E2B's SandboxNetworkConfig (create) and
// SandboxNetworkUpdateConfig (PUT /sandboxes/{id}/network). What else the SDK sends there
// (allowPublicTraffic, maskRequestHost, httpsPorts: ingress, which cellbox has none of;
// egressProxy) is ignored, as unknown fields are everywhere in this API.
type networkConfig struct {
	AllowOut []string                 `json:"allowOut,omitempty"`
	DenyOut  []string                 `json:"denyOut,omitempty"`
	Rules    map[string][]networkRule `json:"rules,omitempty"`
}

// networkRule is one of E2B's per-domain rules: headers set on the domain's requests on
// their way out (a cellbox secret).
type networkRule struct {
	Transform *networkTransform `json:"transform,omitempty"`
}

type networkTransform struct {
	Headers map[string]string `json:"headers,omitempty"`
}

// policyOf is the policy that E2B's allow_internet_access and network ask for; nil when
// neither says anything about egress (the server's default policy applies):
//
//   - allowInternet false: nothing out but allowOut (an allowlist of it, none without it);
//     E2B denies all traffic then and keeps the allowed entries.
//   - denyOut holds ALL_TRAFFIC: an allowlist of allowOut. denyOut's other entries change
//     nothing (E2B lets allowOut through first and refuses the rest), so they are dropped.
//   - otherwise, allowInternet true or a network: public, minus denyOut minus allowOut
//     (the deny CIDRs are split around the allowed addresses, so that what E2B lets through
//     cellbox does too). An allowOut entry with a port inside a denyOut CIDR cannot be
//     carved out of it and is refused; allowOut entries outside every denyOut CIDR are
//     allowed already and dropped.
//
// As in E2B: denyOut holds addresses and CIDRs, never domains, and domains in allowOut need
// ALL_TRAFFIC in denyOut (or allowInternet false: E2B refuses that, though what it asks for
// is plain). rules become secrets.
func policyOf(allowInternet *bool, n *networkConfig) (*api.Network, error) {
	if n == nil {
		n = &networkConfig{}
	}
	if allowInternet == nil && n.AllowOut == nil && n.DenyOut == nil && n.Rules == nil {
		return nil, nil
	}
	if k := len(n.AllowOut) + len(n.DenyOut); k > egress.MaxRules {
		return nil, fmt.Errorf("network: %d allowOut and denyOut entries; at most %d: %w", k, egress.MaxRules, errdefs.ErrInvalidArgument)
	}
	all := allowInternet != nil && !*allowInternet
	var deny []egress.Rule
	for _, e := range n.DenyOut {
		if e == allTraffic || e == "::/0" {
			all = true
			continue
		}
		r, err := egress.ParseRule(e)
		if err != nil {
			return nil, fmt.Errorf("network: denyOut entry %w", err)
		}
		if r.Domain != "" {
			return nil, fmt.Errorf("network: denyOut entry %q: deny entries are IP addresses and CIDRs, not domains (allow the domains you want in allowOut, with %q in denyOut): %w", r.Text, allTraffic, errdefs.ErrInvalidArgument)
		}
		deny = append(deny, r)
	}
	var allow []egress.Rule
	for _, e := range n.AllowOut {
		r, err := egress.ParseRule(e)
		if err != nil {
			return nil, fmt.Errorf("network: allowOut entry %w", err)
		}
		if r.Domain != "" && !all {
			return nil, fmt.Errorf("network: allowOut entry %q is a domain: domains in allowOut need %q (ALL_TRAFFIC) in denyOut, to refuse all other traffic: %w", r.Text, allTraffic, errdefs.ErrInvalidArgument)
		}
		allow = append(allow, r)
	}
	secrets, err := secretsOf(n.Rules)
	if err != nil {
		return nil, err
	}
	switch {
	case all && len(allow) == 0 && len(secrets) == 0:
		return &api.Network{Egress: api.EgressNone}, nil
	case all:
		return &api.Network{Egress: api.EgressAllowlist, Allow: texts(allow), Secrets: secrets}, nil
	}
	out, err := subtract(deny, allow)
	if err != nil {
		return nil, err
	}
	if len(out) > egress.MaxRules {
		return nil, errSplit
	}
	return &api.Network{Egress: api.EgressPublic, Deny: out, Secrets: secrets}, nil
}

// secretsOf turns E2B's per-domain rules into secrets: a domain's rules' headers, later
// rules replacing earlier ones' headers of the same name.
func secretsOf(rules map[string][]networkRule) ([]api.EgressSecret, error) {
	var out []api.EgressSecret
	for _, d := range slices.Sorted(maps.Keys(rules)) {
		hs := map[string]string{}
		for _, r := range rules[d] {
			if r.Transform != nil {
				maps.Copy(hs, r.Transform.Headers)
			}
		}
		if len(hs) == 0 {
			continue // nothing to add: E2B's rules do nothing else
		}
		out = append(out, api.EgressSecret{Domain: d, Headers: hs})
	}
	if len(out) > egress.MaxSecrets {
		return nil, fmt.Errorf("network: rules for %d domains; at most %d: %w", len(out), egress.MaxSecrets, errdefs.ErrInvalidArgument)
	}
	return out, nil
}

var errSplit = fmt.Errorf("network: denyOut split around the addresses of allowOut makes more than %d CIDRs, the most a policy holds: allow fewer addresses inside denied ranges, or put %q in denyOut to allow only allowOut: %w", egress.MaxRules, allTraffic, errdefs.ErrInvalidArgument)

// subtract returns deny's entries minus the addresses allow lets through: an entry no
// allow entry overlaps stays as written; one that an allow entry covers goes; one that holds
// an allow entry is split into the CIDRs around it.
func subtract(deny, allow []egress.Rule) ([]string, error) {
	var out []string
	for _, d := range deny {
		parts := []egress.Rule{d}
		for _, a := range allow {
			if a.Domain != "" {
				continue
			}
			var next []egress.Rule
			for _, p := range parts {
				switch {
				case !p.Prefix.Overlaps(a.Prefix) || a.Port != 0 && p.Port != 0 && a.Port != p.Port:
					next = append(next, p) // disjoint
				case a.Port != 0 && p.Port == 0:
					return nil, fmt.Errorf("network: allowOut entry %q lies inside denyOut entry %q, which refuses every port; cellbox cannot let one port through a denied range: allow it without a port, or put %q in denyOut to allow only allowOut: %w", a.Text, d.Text, allTraffic, errdefs.ErrInvalidArgument)
				case a.Prefix.Bits() <= p.Prefix.Bits():
					// a covers p: dropped
				default:
					for _, q := range around(p.Prefix, a.Prefix) {
						next = append(next, egress.Rule{Prefix: q, Port: p.Port})
					}
				}
				if len(next) > egress.MaxRules {
					return nil, errSplit
				}
			}
			parts = next
		}
		for _, p := range parts {
			if p == d {
				out = append(out, d.Text)
			} else {
				out = append(out, ruleText(p))
			}
		}
	}
	return out, nil
}

// around returns the CIDRs that make up p but inner (which lies inside p, and is longer):
// at each bit from p's length to inner's, the half that does not hold inner.
func around(p, inner netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for bits := p.Bits(); bits < inner.Bits(); bits++ {
		half := netip.PrefixFrom(inner.Addr(), bits+1).Masked()
		out = append(out, netip.PrefixFrom(flip(half.Addr(), bits), bits+1))
	}
	return out
}

// flip returns a with bit i (from the left) inverted.
func flip(a netip.Addr, i int) netip.Addr {
	b := a.As16()
	off := 0
	if a.Is4() {
		off = 12
	}
	b[off+i/8] ^= 0x80 >> (i % 8)
	if a.Is4() {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}

// ruleText writes an address rule as ParseRule reads it.
func ruleText(r egress.Rule) string {
	s := r.Prefix.String()
	if r.Port == 0 {
		return s
	}
	if r.Prefix.Addr().Is6() {
		s = "[" + s + "]"
	}
	return s + ":" + strconv.Itoa(r.Port)
}

func texts(rs []egress.Rule) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Text)
	}
	return out
}

// networkView is what E2B's sandbox detail says of a session's policy n: whether it has
// internet (nil for an allowlist, which is neither) and its egress rules in E2B's terms.
// Secret header values are never shown: each is api.EgressRedacted; a named secret shows
// its domain without headers.
func networkView(n api.Network) (allowInternet *bool, cfg *networkConfig) {
	yes, no := true, false
	cfg = &networkConfig{}
	switch n.Egress {
	case api.EgressPublic:
		allowInternet = &yes
		cfg.DenyOut = n.Deny
	case api.EgressAllowlist:
		cfg.AllowOut = n.Allow
		cfg.DenyOut = append([]string{allTraffic}, n.Deny...)
	default:
		return &no, nil
	}
	for _, s := range n.Secrets {
		if cfg.Rules == nil {
			cfg.Rules = map[string][]networkRule{}
		}
		var r networkRule
		if len(s.Headers) > 0 {
			r.Transform = &networkTransform{Headers: map[string]string{}}
			for h := range s.Headers {
				r.Transform.Headers[h] = api.EgressRedacted
			}
		}
		cfg.Rules[s.Domain] = append(cfg.Rules[s.Domain], r)
	}
	return allowInternet, cfg
}

// setNetwork serves PUT /sandboxes/{id}/network: the sandbox's egress policy is replaced at
// once, and its open connections the new policy refuses are closed. As in E2B, the body
// replaces every rule: a field left out is cleared, so an empty body lets everything out
// (egress public).
func (h *Handler) setNetwork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AllowInternetAccess *bool `json:"allow_internet_access"`
		networkConfig
	}
	if err := h.decode(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	n, err := policyOf(req.AllowInternetAccess, &req.networkConfig)
	if err == nil && n == nil {
		n = &api.Network{Egress: api.EgressPublic}
	}
	if err == nil {
		_, err = h.m.SetNetwork(r.Context(), r.PathValue("id"), *n)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

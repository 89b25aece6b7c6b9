package egress

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Bounds of a policy.
const (
	MaxRules          = 256 // allow and deny entries together
	MaxSecrets        = 32
	MaxSecretHeaders  = 16 // headers of one secret
	MaxSecretValueLen = 8 << 10
	maxRuleLen        = len("*.") + maxNameLen + len(".:65535")
)

// Rule is one entry of Allow or Deny, parsed: a name rule (Domain set) or an address rule
// (Prefix valid), each with an optional port. Rules are comparable with ==.
type Rule struct {
	Text     string       // canonical form, for records ("*.pythonhosted.org", "10.1.0.0/16:5432")
	Domain   string       // a name rule; "" for an address rule
	Wildcard bool         // "*.example.com": names below Domain, not Domain itself
	Prefix   netip.Prefix // an address rule: an address is a /32 or /128 (masked, 4in6 unmapped)
	Port     int          // 0: any port
}

// ParseRule parses an entry of allow or deny: a domain ("pypi.org"), a wildcard
// ("*.pythonhosted.org": the names below it, not itself; a wildcard of a single label like
// "*.com" or "*" is refused), an IP address or a CIDR, each with an optional ":port"
// ("pypi.org:443", "10.0.0.0/8:5432"; an IPv6 address or CIDR with a port is bracketed:
// "[2001:db8::1]:443", "[2001:db8::/32]:443"). A CIDR's host bits are cleared; an
// IPv4-mapped IPv6 address or CIDR is written as its IPv4 form.
func ParseRule(s string) (Rule, error) {
	r, err := parseRule(s)
	if err != nil {
		return Rule{}, fmt.Errorf("%q: %w", clip(s), err)
	}
	return r, nil
}

func parseRule(s string) (Rule, error) {
	const what = "not a domain, IP address or CIDR"
	if s == "" {
		return Rule{}, fmt.Errorf("empty: %w", errdefs.ErrInvalidArgument)
	}
	if len(s) > maxRuleLen {
		return Rule{}, fmt.Errorf("%s (too long): %w", what, errdefs.ErrInvalidArgument)
	}
	host, port, bracketed := s, "", false
	switch {
	case s[0] == '[':
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return Rule{}, fmt.Errorf("%s (an opening bracket without its closing one): %w", what, errdefs.ErrInvalidArgument)
		}
		host, bracketed = s[1:end], true
		if rest := s[end+1:]; rest != "" {
			if rest[0] != ':' {
				return Rule{}, fmt.Errorf("%s (only \":port\" may follow the brackets): %w", what, errdefs.ErrInvalidArgument)
			}
			port = rest[1:]
			if port == "" {
				return Rule{}, fmt.Errorf("a port is a number from 1 to 65535: %w", errdefs.ErrInvalidArgument)
			}
		}
	case strings.Count(s, ":") == 1:
		i := strings.IndexByte(s, ':')
		host, port = s[:i], s[i+1:]
		if port == "" {
			return Rule{}, fmt.Errorf("a port is a number from 1 to 65535: %w", errdefs.ErrInvalidArgument)
		}
	}
	r := Rule{}
	if port != "" {
		p, ok := parsePort(port)
		if !ok {
			return Rule{}, fmt.Errorf("a port is a number from 1 to 65535: %w", errdefs.ErrInvalidArgument)
		}
		r.Port = p
	}
	switch {
	case host == "":
		return Rule{}, fmt.Errorf("%s (no host before the port): %w", what, errdefs.ErrInvalidArgument)
	case strings.HasPrefix(host, "*.") && !bracketed:
		h, err := parseHost(host[2:])
		if err != nil || h.Name == "" {
			return Rule{}, fmt.Errorf("%s (a wildcard is \"*.\" before a domain): %w", what, errdefs.ErrInvalidArgument)
		}
		if !strings.Contains(h.Name, ".") {
			return Rule{}, fmt.Errorf("a wildcard covers the names below a domain of two labels or more, not all of %q: %w", h.Name, errdefs.ErrInvalidArgument)
		}
		r.Domain, r.Wildcard = h.Name, true
	case strings.Contains(host, "/"):
		p, err := netip.ParsePrefix(host)
		if err != nil || p.Addr().Zone() != "" || bracketed && !p.Addr().Is6() {
			return Rule{}, fmt.Errorf("%s: %w", what, errdefs.ErrInvalidArgument)
		}
		r.Prefix = unmapPrefix(p.Masked())
	default:
		h, err := parseHost(host)
		if err != nil {
			return Rule{}, fmt.Errorf("%s: %w", what, errdefs.ErrInvalidArgument)
		}
		if bracketed && !h.Addr.Is6() { // "[pypi.org]", "[1.2.3.4]"
			return Rule{}, fmt.Errorf("%s (brackets hold an IPv6 address): %w", what, errdefs.ErrInvalidArgument)
		}
		if h.Name != "" {
			r.Domain = h.Name
		} else {
			a := h.Addr.Unmap()
			r.Prefix = netip.PrefixFrom(a, a.BitLen())
		}
	}
	r.Text = r.text()
	return r, nil
}

// parsePort parses a decimal port 1-65535 written without sign or leading zero.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	p, err := strconv.Atoi(s)
	return p, err == nil && p >= 1 && p <= 65535
}

// unmapPrefix writes an IPv4-mapped IPv6 prefix (::ffff:0:0/96 or longer) as its IPv4 prefix.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// text is r's canonical form, which ParseRule reads back as r.
func (r Rule) text() string {
	var host string
	switch {
	case r.Domain != "" && r.Wildcard:
		host = "*." + r.Domain
	case r.Domain != "":
		host = r.Domain
	case r.Prefix.IsSingleIP():
		host = r.Prefix.Addr().String()
	default:
		host = r.Prefix.String()
	}
	if r.Port == 0 {
		return host
	}
	if r.Domain == "" && r.Prefix.Addr().Is6() {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(r.Port)
}

// normName is a name as rules compare it: lower case, without a trailing dot.
func normName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// MatchName reports whether r is a name rule that covers name on port. A wildcard covers the
// names below its domain, never the domain itself; case and one trailing dot don't matter.
func (r Rule) MatchName(name string, port int) bool {
	if r.Domain == "" || (r.Port != 0 && r.Port != port) {
		return false
	}
	return r.coversName(normName(name))
}

// coversName reports whether r's domain covers name (normalised), ignoring ports.
func (r Rule) coversName(name string) bool {
	if !r.Wildcard {
		return name == r.Domain
	}
	return len(name) > len(r.Domain)+1 && strings.HasSuffix(name, r.Domain) && name[len(name)-len(r.Domain)-1] == '.'
}

// MatchAddr reports whether r is an address rule that covers a on port. An IPv4-mapped IPv6
// address matches as its IPv4 address.
func (r Rule) MatchAddr(a netip.Addr, port int) bool {
	if r.Domain != "" || !r.Prefix.IsValid() || (r.Port != 0 && r.Port != port) {
		return false
	}
	return r.Prefix.Contains(a.WithZone("").Unmap())
}

// covers reports whether everything r allows, m allows too (for Narrow and named secrets).
func covers(m, r Rule) bool {
	if m.Port != 0 && m.Port != r.Port {
		return false
	}
	switch {
	case m.Domain != "" && r.Domain != "":
		if !m.Wildcard {
			return !r.Wildcard && r.Domain == m.Domain
		}
		return r.Domain == m.Domain && r.Wildcard || m.coversName(r.Domain)
	case m.Domain == "" && r.Domain == "":
		return m.Prefix.Addr().Is4() == r.Prefix.Addr().Is4() && m.Prefix.Bits() <= r.Prefix.Bits() && m.Prefix.Contains(r.Prefix.Addr())
	}
	return false
}

// Secret adds headers to the requests for the names its rule covers (a name rule without a
// port).
type Secret struct {
	Rule    Rule
	Headers http.Header
	Name    string // the operator's named secret; "" for headers given inline
}

// Policy is a session's compiled network policy. A nil *Policy is mode none.
type Policy struct {
	Mode        string // api.EgressNone, api.EgressAllowlist or api.EgressPublic
	Allow, Deny []Rule
	Secrets     []Secret
}

// rank orders modes from the narrowest.
func rank(mode string) int {
	return map[string]int{api.EgressNone: 0, api.EgressAllowlist: 1, api.EgressPublic: 2}[mode]
}

// open reports whether p lets anything out: a nil policy, mode none and a mode Compile would
// not give are closed.
func (p *Policy) open() bool {
	return p != nil && (p.Mode == api.EgressAllowlist || p.Mode == api.EgressPublic)
}

// Compile checks n and compiles it ("" mode is none). A secret that names one ({"secret":
// "github"}) is looked up in named, the caller's tenant's secrets; it may only be used for the
// domains the operator listed for it (or else a model could send the operator's token to any
// host): the reference's domain must be one of them or below one of their wildcards. A
// reference without a domain stands for all of the named secret's domains, one Secret each.
//
// Refused: mode none with entries (they would do nothing), allow entries under public (public
// allows every public address already), more than MaxRules entries or MaxSecrets secrets, a
// secret for an address or with a port, inline headers that are not valid HTTP (names are
// tokens; values hold no CR, LF, NUL or other control characters) or that are hop-by-hop or
// framing headers, more than MaxSecretHeaders headers to a secret or a value over
// MaxSecretValueLen bytes, and two secrets for the same domain.
func Compile(n api.Network, named map[string]NamedSecret) (*Policy, error) {
	p := &Policy{Mode: n.Egress}
	if p.Mode == "" {
		p.Mode = api.EgressNone
	}
	switch p.Mode {
	case api.EgressNone:
		if len(n.Allow)+len(n.Deny)+len(n.Secrets) > 0 {
			return nil, fmt.Errorf("egress %q lets nothing out, so allow, deny and secrets do nothing; give egress \"allowlist\" or \"public\" with them, or leave them out: %w", p.Mode, errdefs.ErrInvalidArgument)
		}
		return p, nil
	case api.EgressAllowlist:
	case api.EgressPublic:
		if len(n.Allow) > 0 {
			return nil, fmt.Errorf("egress %q allows every public address already, so allow entries do nothing; give egress \"allowlist\" to allow only them: %w", p.Mode, errdefs.ErrInvalidArgument)
		}
	default:
		return nil, fmt.Errorf("egress %q: give \"none\", \"allowlist\" or \"public\": %w", clip(p.Mode), errdefs.ErrInvalidArgument)
	}
	if k := len(n.Allow) + len(n.Deny); k > MaxRules {
		return nil, fmt.Errorf("%d allow and deny entries; at most %d: %w", k, MaxRules, errdefs.ErrInvalidArgument)
	}
	var err error
	if p.Allow, err = parseRules("allow", n.Allow); err != nil {
		return nil, err
	}
	if p.Deny, err = parseRules("deny", n.Deny); err != nil {
		return nil, err
	}
	if len(n.Secrets) > MaxSecrets {
		return nil, fmt.Errorf("%d secrets; at most %d: %w", len(n.Secrets), MaxSecrets, errdefs.ErrInvalidArgument)
	}
	for _, s := range n.Secrets {
		ss, err := compileSecret(s, named)
		if err != nil {
			return nil, err
		}
		p.Secrets = append(p.Secrets, ss...)
	}
	if len(p.Secrets) > MaxSecrets {
		return nil, fmt.Errorf("%d secrets once named secrets stand for each of their domains; at most %d: %w", len(p.Secrets), MaxSecrets, errdefs.ErrInvalidArgument)
	}
	seen := map[Rule]bool{}
	for _, s := range p.Secrets {
		if seen[s.Rule] {
			return nil, fmt.Errorf("secret for %q: that domain has a secret already; give each domain one (with all its headers): %w", s.Rule.Text, errdefs.ErrInvalidArgument)
		}
		seen[s.Rule] = true
	}
	return p, nil
}

// parseRules parses the entries of list ("allow" or "deny").
func parseRules(list string, entries []string) ([]Rule, error) {
	var rs []Rule
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			return nil, fmt.Errorf("%s entry %w", list, err)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// parseSecretDomain parses the domain of a secret: a name rule without a port.
func parseSecretDomain(d string) (Rule, error) {
	r, err := ParseRule(d)
	if err != nil {
		return Rule{}, err
	}
	if r.Domain == "" || r.Port != 0 {
		return Rule{}, fmt.Errorf("%q: a secret's domain is a domain or a \"*.\" wildcard, without an address or a port: %w", clip(d), errdefs.ErrInvalidArgument)
	}
	return r, nil
}

// compileSecret compiles one entry of secrets: one Secret, or one per domain of a named
// secret referenced without a domain.
func compileSecret(s api.EgressSecret, named map[string]NamedSecret) ([]Secret, error) {
	if s.Secret != "" && len(s.Headers) > 0 {
		return nil, fmt.Errorf("secret for %q: give headers or the name of a secret, not both: %w", clip(s.Domain), errdefs.ErrInvalidArgument)
	}
	if s.Secret == "" {
		if s.Domain == "" {
			return nil, fmt.Errorf("a secret with headers needs its domain: %w", errdefs.ErrInvalidArgument)
		}
		r, err := parseSecretDomain(s.Domain)
		if err != nil {
			return nil, fmt.Errorf("secret domain %w", err)
		}
		h, err := checkHeaders(s.Headers)
		if err != nil {
			return nil, fmt.Errorf("secret for %q: %w", r.Text, err)
		}
		return []Secret{{Rule: r, Headers: h}}, nil
	}
	ns, ok := named[s.Secret]
	if !ok {
		return nil, fmt.Errorf("secret %q: no secret of that name is configured for you; ask the operator for its name: %w", clip(s.Secret), errdefs.ErrInvalidArgument)
	}
	if s.Domain == "" {
		out := make([]Secret, len(ns.Domains))
		for i, d := range ns.Domains {
			out[i] = Secret{Rule: d, Headers: ns.Headers, Name: s.Secret}
		}
		return out, nil
	}
	r, err := parseSecretDomain(s.Domain)
	if err != nil {
		return nil, fmt.Errorf("secret %q: domain %w", s.Secret, err)
	}
	if !slices.ContainsFunc(ns.Domains, func(d Rule) bool { return covers(d, r) }) {
		return nil, fmt.Errorf("secret %q may be sent to %s only, not to %q: %w", s.Secret, ruleTexts(ns.Domains, 10), r.Text, errdefs.ErrInvalidArgument)
	}
	return []Secret{{Rule: r, Headers: ns.Headers, Name: s.Secret}}, nil
}

// unsettable are headers a secret may not set: they frame the request or belong to one hop.
var unsettable = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Te", "Upgrade", "Trailer"}

// checkHeaders checks a secret's headers and returns them canonicalised.
func checkHeaders(hs map[string]string) (http.Header, error) {
	if len(hs) == 0 {
		return nil, fmt.Errorf("no headers: %w", errdefs.ErrInvalidArgument)
	}
	if len(hs) > MaxSecretHeaders {
		return nil, fmt.Errorf("%d headers; at most %d: %w", len(hs), MaxSecretHeaders, errdefs.ErrInvalidArgument)
	}
	h := http.Header{}
	for _, name := range slices.Sorted(maps.Keys(hs)) {
		v := hs[name]
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, fmt.Errorf("header %q: not a valid header name: %w", clip(name), errdefs.ErrInvalidArgument)
		}
		c := http.CanonicalHeaderKey(name)
		if slices.Contains(unsettable, c) || strings.HasPrefix(c, "Proxy-") {
			return nil, fmt.Errorf("header %q: a secret may not set it (it frames the request or belongs to one hop): %w", c, errdefs.ErrInvalidArgument)
		}
		if _, dup := h[c]; dup {
			return nil, fmt.Errorf("header %q: given twice: %w", c, errdefs.ErrInvalidArgument)
		}
		if len(v) > MaxSecretValueLen {
			return nil, fmt.Errorf("header %q: a value has at most %d bytes: %w", c, MaxSecretValueLen, errdefs.ErrInvalidArgument)
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("header %q: a value may not hold CR, LF, NUL or other control characters: %w", c, errdefs.ErrInvalidArgument)
		}
		h[c] = []string{v}
	}
	return h, nil
}

// ruleTexts lists up to max rules for a message.
func ruleTexts(rs []Rule, max int) string {
	var b strings.Builder
	for i, r := range rs {
		if i == max {
			fmt.Fprintf(&b, " and %d more", len(rs)-max)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(r.Text))
	}
	if b.Len() == 0 {
		return "nothing"
	}
	return b.String()
}

// Narrow returns p as the server enforces it under max (the operator's --egress-max, or a
// tenant's), or an error (errdefs.ErrPermissionDenied, saying what the server allows at most)
// when p asks for more: a wider mode (none < allowlist < public), or, when max is an allowlist,
// an allow entry no allow entry of max covers (a domain equal to one, or equal to or below a
// wildcard; a CIDR inside one; the same port, or max's any port). The result is p with max's
// deny entries appended (except when p is none, where they would do nothing), so they are
// enforced and shown; max's secrets are not used. A nil max returns p as it is.
func Narrow(p, max *Policy) (*Policy, error) {
	if p == nil {
		p = &Policy{Mode: api.EgressNone}
	}
	if max == nil {
		return p, nil
	}
	if rank(p.Mode) > rank(max.Mode) {
		return nil, fmt.Errorf("egress %q: this server allows at most egress %q%s: %w", p.Mode, max.Mode, maxAllowlist(max), errdefs.ErrPermissionDenied)
	}
	if max.Mode == api.EgressAllowlist {
		for _, r := range p.Allow {
			if !slices.ContainsFunc(max.Allow, func(m Rule) bool { return covers(m, r) }) {
				return nil, fmt.Errorf("allow entry %q: not within what this server allows%s: %w", r.Text, maxAllowlist(max), errdefs.ErrPermissionDenied)
			}
		}
	}
	out := *p
	if p.Mode == api.EgressNone {
		return &out, nil
	}
	out.Deny = slices.Clone(p.Deny)
	for _, d := range max.Deny {
		if !slices.Contains(out.Deny, d) {
			out.Deny = append(out.Deny, d)
		}
	}
	return &out, nil
}

// maxAllowlist tells what max's allowlist holds, for Narrow's messages.
func maxAllowlist(max *Policy) string {
	if max.Mode != api.EgressAllowlist {
		return ""
	}
	return " (allow entries within " + ruleTexts(max.Allow, 10) + ")"
}

// Decision is what the policy says about a destination, in two steps. DecideName answers for
// the name before it is resolved: Refused is final (nothing is resolved or dialed); Allowed
// means a name rule (or mode public) lets the name through; neither means no name rule allows
// it but an address rule still may. Only DecideAddr, asked for every address before it is
// dialed, allows a dial: its answer is always Allowed or Refused.
type Decision struct {
	Allowed bool
	Refused bool
	Rule    string // the deciding rule's Text; "" when the mode or the address ranges decided
	Reason  string // for a refusal (and a name left open): a sentence for the client
}

func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// DecideName decides a destination by its name (normalised, as ParseHost gives it) before it
// is resolved: mode none refuses it, a matching deny name rule refuses it, mode public allows
// it, an allowlist's matching name rule allows it. Otherwise (an allowlist name no name rule
// allows on this port) it is neither allowed nor refused, and its Reason is the one the
// refusal will give if no address rule allows it. Whatever it says short of Refused, each
// address the name resolves to must pass DecideAddr before it is dialed.
func (p *Policy) DecideName(name string, port int) Decision {
	name = normName(name)
	if !p.open() {
		return noInternet()
	}
	for _, r := range p.Deny {
		if r.MatchName(name, port) {
			return Decision{Refused: true, Rule: r.Text, Reason: fmt.Sprintf("%s is refused by this session's deny entry %q", hostPort(name, port), r.Text)}
		}
	}
	if p.Mode == api.EgressPublic {
		return Decision{Allowed: true}
	}
	for _, r := range p.Allow {
		if r.MatchName(name, port) {
			return Decision{Allowed: true, Rule: r.Text}
		}
	}
	return Decision{Reason: notAllowed(hostPort(name, port))}
}

func noInternet() Decision {
	return Decision{Refused: true, Reason: `this session has no internet access (its egress is "none")`}
}

func notAllowed(dest string) string {
	return dest + " is not in this session's allowlist"
}

// DecideAddr decides one address a the server would dial for a destination: name is what
// the client asked for ("" for an IP literal) and byName DecideName's answer for it (the zero
// Decision for an IP literal). A refusal by name stands. Then: addresses Blocked by r are
// refused, then deny address rules refuse; public allows the rest; an allowlist allows the
// address when the name was allowed by a name rule or an allow address rule matches.
func (p *Policy) DecideAddr(r Ranges, name string, byName Decision, a netip.Addr, port int) Decision {
	if !p.open() {
		return noInternet()
	}
	if byName.Refused {
		return byName
	}
	dest := hostPort(a.WithZone("").Unmap().String(), port)
	if name != "" {
		dest = fmt.Sprintf("%s (%s)", hostPort(normName(name), port), a.WithZone("").Unmap())
	}
	if why := r.Blocked(a, port); why != "" {
		return Decision{Refused: true, Reason: fmt.Sprintf("%s is refused: the address is %s", dest, why)}
	}
	for _, d := range p.Deny {
		if d.MatchAddr(a, port) {
			return Decision{Refused: true, Rule: d.Text, Reason: fmt.Sprintf("%s is refused by this session's deny entry %q", dest, d.Text)}
		}
	}
	if p.Mode == api.EgressPublic {
		return Decision{Allowed: true}
	}
	if byName.Allowed && name != "" {
		return Decision{Allowed: true, Rule: byName.Rule}
	}
	for _, al := range p.Allow {
		if al.MatchAddr(a, port) {
			return Decision{Allowed: true, Rule: al.Text}
		}
	}
	return Decision{Refused: true, Reason: notAllowed(dest)}
}

// SecretFor returns the headers to add to requests for name (nil: none). A secret for the
// exact domain wins over wildcards; among those, the first. The caller may change the result.
func (p *Policy) SecretFor(name string) http.Header {
	if p == nil {
		return nil
	}
	name = normName(name)
	for _, wild := range []bool{false, true} {
		for _, s := range p.Secrets {
			if s.Rule.Wildcard == wild && s.Rule.coversName(name) {
				return s.Headers.Clone()
			}
		}
	}
	return nil
}

// View is p as answers show it: inline secret headers with the value api.EgressRedacted,
// named secrets by name only. Compile reads it back as p, but for the redacted values.
func (p *Policy) View() api.Network {
	if p == nil {
		return api.Network{Egress: api.EgressNone}
	}
	n := api.Network{Egress: p.Mode}
	for _, r := range p.Allow {
		n.Allow = append(n.Allow, r.Text)
	}
	for _, r := range p.Deny {
		n.Deny = append(n.Deny, r.Text)
	}
	for _, s := range p.Secrets {
		v := api.EgressSecret{Domain: s.Rule.Text, Secret: s.Name}
		if s.Name == "" {
			v.Headers = map[string]string{}
			for h := range s.Headers {
				v.Headers[h] = api.EgressRedacted
			}
		}
		n.Secrets = append(n.Secrets, v)
	}
	return n
}

// Equal reports whether p and q are the same policy (a nil *Policy is mode none).
func (p *Policy) Equal(q *Policy) bool {
	none := &Policy{Mode: api.EgressNone}
	if p == nil {
		p = none
	}
	if q == nil {
		q = none
	}
	return p.Mode == q.Mode && slices.Equal(p.Allow, q.Allow) && slices.Equal(p.Deny, q.Deny) &&
		slices.EqualFunc(p.Secrets, q.Secrets, func(a, b Secret) bool {
			return a.Rule == b.Rule && a.Name == b.Name && maps.EqualFunc(a.Headers, b.Headers, slices.Equal)
		})
}

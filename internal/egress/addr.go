package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// Host is a destination as a client named it: a normalised DNS name or an IP address.
// Exactly one of Name and Addr is set.
type Host struct {
	Name string
	Addr netip.Addr
}

// String is the name, or the address (an IPv6 one without brackets).
func (h Host) String() string {
	if h.Name != "" {
		return h.Name
	}
	return h.Addr.String()
}

// Bounds of a DNS name, in bytes.
const (
	maxNameLen  = 253
	maxLabelLen = 63
)

// ParseHost normalises a host from a CONNECT line, a URL or SOCKS5: lower-case, one trailing
// dot dropped, brackets around an IPv6 address removed. IP literals are parsed with netip, which
// takes only the plain dotted-decimal IPv4 form; an IPv6 zone ("fe80::1%eth0") is refused. A name
// is ASCII (a Unicode name is written in punycode, "xn--..."), its labels 1 to 63 of [a-z0-9_-],
// 253 bytes in all. A name whose last label is all digits or starts with "0x" is refused: it is
// another spelling of an IPv4 address ("2130706433", "0177.0.0.1", "0x7f.1", "127.1") that some
// resolvers would take as one, and no top-level domain looks like that.
func ParseHost(s string) (Host, error) {
	h, err := parseHost(s)
	if err != nil {
		return Host{}, fmt.Errorf("host %q: %w", clip(s), err)
	}
	return h, nil
}

// parseHost is ParseHost with errors that don't name s (callers name it).
func parseHost(s string) (Host, error) {
	if s == "" {
		return Host{}, fmt.Errorf("empty: %w", errdefs.ErrInvalidArgument)
	}
	if s[0] == '[' {
		if len(s) < 2 || s[len(s)-1] != ']' {
			return Host{}, fmt.Errorf("an opening bracket without its closing one: %w", errdefs.ErrInvalidArgument)
		}
		a, err := parseAddr(s[1 : len(s)-1])
		if err != nil || !a.Is6() {
			return Host{}, fmt.Errorf("brackets hold an IPv6 address and nothing else: %w", errdefs.ErrInvalidArgument)
		}
		return Host{Addr: a}, nil
	}
	if strings.Contains(s, ":") {
		a, err := parseAddr(s)
		if err != nil {
			return Host{}, err
		}
		return Host{Addr: a}, nil
	}
	name := strings.TrimSuffix(s, ".")
	if a, err := netip.ParseAddr(name); err == nil {
		return Host{Addr: a}, nil
	}
	name, err := checkName(name)
	if err != nil {
		return Host{}, err
	}
	return Host{Name: name}, nil
}

// parseAddr parses an IP address without a zone.
func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("not an IP address: %w", errdefs.ErrInvalidArgument)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("an IPv6 zone (%%...) names a local interface and is not a destination: %w", errdefs.ErrInvalidArgument)
	}
	return a, nil
}

// checkName checks a DNS name without its trailing dot and returns it in lower case.
func checkName(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("empty: %w", errdefs.ErrInvalidArgument)
	}
	if len(s) > maxNameLen {
		return "", fmt.Errorf("a name has at most %d bytes: %w", maxNameLen, errdefs.ErrInvalidArgument)
	}
	b := []byte(s)
	start := 0
	for i := 0; i <= len(b); i++ {
		if i < len(b) && b[i] != '.' {
			c := b[i]
			switch {
			case c >= 'A' && c <= 'Z':
				b[i] = c + 'a' - 'A'
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			case c >= 0x80:
				return "", fmt.Errorf("a name is ASCII; write a Unicode name in punycode (xn--...): %w", errdefs.ErrInvalidArgument)
			default:
				return "", fmt.Errorf("a name holds letters, digits, '-', '_' and dots between labels: %w", errdefs.ErrInvalidArgument)
			}
			continue
		}
		if n := i - start; n == 0 || n > maxLabelLen {
			return "", fmt.Errorf("each label of a name has 1 to %d bytes: %w", maxLabelLen, errdefs.ErrInvalidArgument)
		}
		start = i + 1
	}
	name := string(b)
	last := name[strings.LastIndexByte(name, '.')+1:]
	if strings.HasPrefix(last, "0x") || strings.Trim(last, "0123456789") == "" {
		return "", fmt.Errorf("a name whose last label is a number is another spelling of an IPv4 address; write the address as a.b.c.d: %w", errdefs.ErrInvalidArgument)
	}
	return name, nil
}

// clip shortens untrusted text quoted in an error.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// Ranges says which addresses are never dialed.
type Ranges struct {
	// PrivateAllow are the operator's --egress-private-allow: addresses in them are dialable
	// after all (an internal package mirror), even loopback and the server's own addresses.
	// Never the cloud's host agents (hostAgents) nor the server's listeners (Listeners).
	PrivateAllow []netip.Prefix
	// Own returns the server's own addresses (nil: none). It is called on every Blocked, so
	// addresses that come and go are seen.
	Own func() []netip.Addr
	// Listeners returns the server's listening sockets, and those of the other nodes of its
	// cluster (nil: none): the control plane, never dialed whatever PrivateAllow says. It is
	// called on every Blocked.
	Listeners func() []Listener
	// AllowServer are the operator's --egress-allow-server: listeners sessions may reach
	// after all, each named by its exact address and port. It lifts only the listener's
	// refusal: a loopback or private address needs PrivateAllow too.
	AllowServer []netip.AddrPort
}

// Listener is a listening socket of the server (or of another node of its cluster).
type Listener struct {
	// Addr is the address as bound: an unspecified address (0.0.0.0, ::) listens on every
	// local address.
	Addr netip.AddrPort
	// Name says whose it is, for a refusal: "this cellbox server's API".
	Name string
}

// blockedRange is a range that is never dialed, and why.
type blockedRange struct {
	prefix netip.Prefix
	why    string
}

// Reasons Blocked gives.
const (
	whyLinkLocal = "link-local (cloud metadata lives there)"
	whyPrivate   = "a private address"
	whyOwn       = "one of the server's own addresses"
	whyMetadata  = "the cloud metadata address"
)

// hostAgents are the services a cloud runs on the host under a VM, at fixed addresses: the
// instance's metadata (its credentials among them), its disks, its host agent. They are
// refused whatever the operator allows: --egress-private-allow 169.254.0.0/16 or a slip like
// 168.0.0.0/8 opens neither. Each with its source; most are link-local and refused as such
// too, but they are named here so that no allowance opens them and a refusal says what they
// are. Not here, for want of a document that gives the address: Tencent Cloud's
// metadata.tencentyun.com (reported at 169.254.0.23, link-local) and Oracle's 192.0.0.192
// (named in SSRF lists; in the IETF's 192.0.0.0/24): refused by their ranges, unless an
// allowance covers them.
var hostAgents = func() []blockedRange {
	rs := []struct{ cidr, why string }{
		// Azure's WireServer: the VM agent's channel to the host, its DHCP and DNS; a
		// public address, so no other range holds it. Published AKS attacks read node
		// bootstrap credentials from it.
		// https://learn.microsoft.com/azure/virtual-network/what-is-ip-address-168-63-129-16
		{"168.63.129.16/32", "Azure's WireServer (host agent)"},
		// Instance metadata (credentials of the instance's role) of AWS, Azure, GCP
		// (metadata.google.internal; GKE's metadata server takes its place), Oracle, IBM Cloud
		// (api.metadata.cloud.ibm.com), DigitalOcean, OpenStack and Huawei Cloud.
		// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html
		// https://learn.microsoft.com/azure/virtual-machines/instance-metadata-service
		// https://cloud.google.com/compute/docs/metadata/overview
		// https://docs.oracle.com/iaas/Content/Compute/Tasks/gettingmetadata.htm
		// https://cloud.ibm.com/apidocs/vpc-metadata
		// https://docs.digitalocean.com/products/droplets/how-to/access-metadata/
		{"169.254.169.254/32", whyMetadata},
		// AWS's instance services, over IPv4 and (Nitro) IPv6: metadata, the Route 53
		// resolver, the time server.
		// https://docs.aws.amazon.com/whitepapers/latest/ipv6-on-aws/supporting-amazon-vpc-services.html
		// https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configure-ec2-ntp.html
		{"fd00:ec2::254/128", whyMetadata + " (AWS's, over IPv6)"},
		{"169.254.169.253/32", "AWS's DNS resolver (host agent)"},
		{"fd00:ec2::253/128", "AWS's DNS resolver (host agent)"},
		{"169.254.169.123/32", "AWS's time server (host agent)"},
		{"fd00:ec2::123/128", "AWS's time server (host agent)"},
		// The credentials of ECS tasks' and EKS pods' roles.
		// https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-iam-roles.html
		// https://docs.aws.amazon.com/eks/latest/userguide/pod-id-agent-setup.html
		{"169.254.170.2/32", "AWS ECS's task credentials endpoint (host agent)"},
		{"169.254.170.23/32", "AWS EKS Pod Identity's credentials agent (host agent)"},
		{"fd00:ec2::23/128", "AWS EKS Pod Identity's credentials agent (host agent)"},
		// Oracle Cloud: 169.254.0.0/16 is its own (metadata, iSCSI to the boot and block
		// volumes, kernel updates); the boot volume's iSCSI target at 169.254.0.2 and the
		// block volumes' in 169.254.2.0/24 are the instance's disks.
		// https://docs.oracle.com/iaas/Content/Compute/References/bestpracticescompute.htm
		{"169.254.0.2/32", "Oracle Cloud's boot volume (iSCSI, host agent)"},
		{"169.254.2.0/24", "Oracle Cloud's block volumes (iSCSI, host agent)"},
		// Alibaba Cloud's metadata, in the CGNAT range.
		// https://www.alibabacloud.com/help/ecs/user-guide/overview-of-ecs-instance-metadata
		{"100.100.100.200/32", "Alibaba Cloud's metadata address"},
		// Volcengine's (ByteDance) metadata, in the CGNAT range.
		// https://www.volcengine.com/docs/6396/113780
		{"100.96.0.96/32", "Volcengine's metadata address"},
	}
	out := make([]blockedRange, len(rs))
	for i, r := range rs {
		out[i] = blockedRange{netip.MustParsePrefix(r.cidr), r.why}
	}
	return out
}()

// blocked are the ranges Blocked refuses unless PrivateAllow holds the address, most
// specific first (the first match gives the reason). The documentation ranges (192.0.2.0/24,
// 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) are deliberately not here: nothing on the
// internet uses them, and tests use them as "public" test hosts in network namespaces of
// their own.
var blocked = func() []blockedRange {
	rs := []struct{ cidr, why string }{
		{"0.0.0.0/32", "the unspecified address"},
		{"::/128", "the unspecified address"},
		{"::1/128", "loopback"},
		{"0.0.0.0/8", "in 0.0.0.0/8 (this network)"},
		{"127.0.0.0/8", "loopback"},
		{"10.0.0.0/8", whyPrivate},
		{"172.16.0.0/12", whyPrivate},
		{"192.168.0.0/16", whyPrivate},
		{"fc00::/7", whyPrivate},
		{"100.64.0.0/10", "a carrier-grade NAT address (shared, not public)"},
		{"169.254.0.0/16", whyLinkLocal},
		{"fe80::/10", whyLinkLocal},
		{"fec0::/10", "site-local"},
		{"224.0.0.0/4", "multicast"},
		{"ff00::/8", "multicast"},
		{"255.255.255.255/32", "broadcast"},
		{"240.0.0.0/4", "reserved"},
		{"192.0.0.0/24", "reserved for IETF protocol assignments"},
		{"198.18.0.0/15", "reserved for benchmarking (fake-IP DNS proxies hand these out)"},
		{"2001::/32", "a Teredo tunnel address"},
		{"64:ff9b:1::/48", "a local-use NAT64 address"},
		{"::/96", "an IPv4-compatible IPv6 address (deprecated)"},
		{"100::/64", "discard-only"},
	}
	out := make([]blockedRange, len(rs))
	for i, r := range rs {
		out[i] = blockedRange{netip.MustParsePrefix(r.cidr), r.why}
	}
	return out
}()

// Prefixes whose addresses embed an IPv4 address, which is what they reach.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Blocked says why a:port is never dialed ("loopback", "a private address", "Azure's
// WireServer (host agent)", "this cellbox server's API", ...), or "" when it may be. An
// IPv4-mapped IPv6 address (::ffff:a.b.c.d) is checked as its IPv4 address, and so are NAT64
// (64:ff9b::/96) and 6to4 (2002::/16) addresses: by the IPv4 address they embed, which is
// where they lead. In order: the cloud's host agents are refused, whatever else; then the
// server's listeners, but for those AllowServer names; then an address in PrivateAllow is
// dialable; then the server's own addresses and the blocked ranges are refused.
func (r Ranges) Blocked(a netip.Addr, port int) string {
	if !a.IsValid() {
		return "not an IP address"
	}
	a = a.WithZone("").Unmap()
	as := []netip.Addr{a}
	if v4, ok := embedded(a); ok {
		as = append(as, v4)
	}
	for _, x := range as {
		if why := hostAgent(x); why != "" {
			return why
		}
	}
	if why := r.listener(as, port); why != "" {
		return why
	}
	for _, p := range r.PrivateAllow {
		p = unmapPrefix(p)
		for _, x := range as {
			if p.Contains(x) {
				return ""
			}
		}
	}
	if r.Own != nil {
		for _, o := range r.Own() {
			o = o.WithZone("").Unmap()
			for _, x := range as {
				if x == o {
					return whyOwn
				}
			}
		}
	}
	why := ""
	for _, x := range as {
		if why = rangeOf(x); why != "" {
			break
		}
	}
	return why
}

// listener is the name of the server's listener that a connection to one of as (one
// destination's spellings) on port would reach, unless AllowServer names it; or "". A
// listener on an unspecified address is reached through every local address: loopback, the
// unspecified address itself (which Linux connects to loopback) and the server's own.
func (r Ranges) listener(as []netip.Addr, port int) string {
	if r.Listeners == nil {
		return ""
	}
	ls := r.Listeners()
	if len(ls) == 0 {
		return ""
	}
	for _, x := range as {
		if slices.Contains(r.AllowServer, netip.AddrPortFrom(x, uint16(port))) {
			return ""
		}
	}
	local := func(x netip.Addr) bool {
		if x.IsLoopback() || x.IsUnspecified() {
			return true
		}
		if r.Own != nil {
			for _, o := range r.Own() {
				if o.WithZone("").Unmap() == x {
					return true
				}
			}
		}
		return false
	}
	for _, l := range ls {
		la := l.Addr.Addr().WithZone("").Unmap()
		if int(l.Addr.Port()) != port {
			continue
		}
		for _, x := range as {
			if x == la || x.IsUnspecified() || la.IsUnspecified() && local(x) {
				return l.Name
			}
		}
	}
	return ""
}

// hostAgent is the reason of the host agent at a, or "".
func hostAgent(a netip.Addr) string {
	for _, b := range hostAgents {
		if b.prefix.Contains(a) {
			return b.why
		}
	}
	return ""
}

// rangeOf is the reason of the first blocked range holding a.
func rangeOf(a netip.Addr) string {
	for _, b := range blocked {
		if b.prefix.Contains(a) {
			return b.why
		}
	}
	return ""
}

// embedded returns the IPv4 address a NAT64 or 6to4 address a leads to.
func embedded(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case !a.Is6():
		return netip.Addr{}, false
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/errdefs"
)

func TestParseHost(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	name253 := strings.Join([]string{long63, long63, long63, strings.Repeat("b", 61)}, ".") // 253 bytes
	tests := []struct {
		in      string
		name    string // want a name
		addr    string // want an address
		wantErr string // a part of the error
	}{
		{in: "pypi.org", name: "pypi.org"},
		{in: "PyPI.ORG", name: "pypi.org"},
		{in: "pypi.org.", name: "pypi.org"},
		{in: "pypi.org..", wantErr: "label"},
		{in: ".pypi.org", wantErr: "label"},
		{in: "a..b", wantErr: "label"},
		{in: ".", wantErr: "empty"},
		{in: "", wantErr: "empty"},
		{in: "localhost", name: "localhost"},
		{in: "_srv.x-y.example", name: "_srv.x-y.example"},
		{in: "xn--bcher-kva.example", name: "xn--bcher-kva.example"},
		{in: "bücher.example", wantErr: "punycode"},
		{in: "ｅxample.com", wantErr: "punycode"}, // fullwidth e
		{in: "exa mple.com", wantErr: "letters"},
		{in: "example.com/", wantErr: "letters"},
		{in: "user@example.com", wantErr: "letters"},
		{in: "exa%2ecom", wantErr: "letters"},
		{in: "a\x00b.com", wantErr: "letters"},
		{in: name253, name: name253},
		{in: name253 + ".", name: name253},
		{in: name253 + "c", wantErr: "253"},
		{in: long63 + ".com", name: long63 + ".com"},
		{in: long63 + "a.com", wantErr: "label"},
		// IPv4, and the other spellings of it that resolvers take.
		{in: "1.2.3.4", addr: "1.2.3.4"},
		{in: "1.2.3.4.", addr: "1.2.3.4"},
		{in: "127.0.0.1", addr: "127.0.0.1"},
		{in: "2130706433", wantErr: "IPv4"},
		{in: "0177.0.0.1", wantErr: "IPv4"},
		{in: "0x7f.1", wantErr: "IPv4"},
		{in: "0x7f000001", wantErr: "IPv4"},
		{in: "0X7F000001", wantErr: "IPv4"},
		{in: "127.1", wantErr: "IPv4"},
		{in: "127.0.1", wantErr: "IPv4"},
		{in: "1.2.3.04", wantErr: "IPv4"},
		{in: "1.2.3.4.5", wantErr: "IPv4"},
		{in: "1.2.3.256", wantErr: "IPv4"},
		{in: "0", wantErr: "IPv4"},
		{in: "foo.0x1", wantErr: "IPv4"},
		{in: "123.example", name: "123.example"},
		{in: "example.1a", name: "example.1a"},
		// IPv6.
		{in: "::1", addr: "::1"},
		{in: "[::1]", addr: "::1"},
		{in: "[2001:DB8::1]", addr: "2001:db8::1"},
		{in: "::ffff:127.0.0.1", addr: "::ffff:127.0.0.1"},
		{in: "[::ffff:169.254.169.254]", addr: "::ffff:169.254.169.254"},
		{in: "fe80::1%eth0", wantErr: "zone"},
		{in: "[fe80::1%25eth0]", wantErr: "brackets"},
		{in: "[fe80::1%eth0]", wantErr: "brackets"},
		{in: "[1.2.3.4]", wantErr: "brackets"},
		{in: "[pypi.org]", wantErr: "brackets"},
		{in: "[::1", wantErr: "bracket"},
		{in: "[::1]:80", wantErr: "bracket"},
		{in: "[]", wantErr: "brackets"},
		{in: "[", wantErr: "bracket"},
		{in: "::1:", wantErr: "not an IP"},
		{in: "pypi.org:443", wantErr: "not an IP"},
		{in: "1.2.3.4:80", wantErr: "not an IP"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			h, err := ParseHost(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseHost(%q) = %+v, want an error with %q", tt.in, h, tt.wantErr)
				}
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseHost(%q): %v, want invalid argument with %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseHost(%q): %v", tt.in, err)
			}
			if h.Name != tt.name {
				t.Errorf("Name = %q, want %q", h.Name, tt.name)
			}
			if tt.addr != "" && h.Addr != netip.MustParseAddr(tt.addr) || tt.addr == "" && h.Addr.IsValid() {
				t.Errorf("Addr = %v, want %q", h.Addr, tt.addr)
			}
		})
	}
}

func TestBlocked(t *testing.T) {
	own := []netip.Addr{netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::7")}
	r := Ranges{
		PrivateAllow: []netip.Prefix{
			netip.MustParsePrefix("10.1.0.0/16"),
			netip.MustParsePrefix("fd12::/16"),
			netip.MustParsePrefix("203.0.113.0/28"), // holds an own address: the operator's word wins
		},
		Own: func() []netip.Addr { return own },
	}
	tests := []struct {
		addr string
		want string // a part of the reason; "" for dialable
	}{
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"0.1.2.3", "this network"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"10.0.0.1", "private"},
		{"10.1.2.3", ""}, // PrivateAllow
		{"::ffff:10.1.2.3", ""},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"172.32.0.1", ""},
		{"192.168.1.1", "private"},
		{"fc00::1", "private"},
		{"fd12::1", ""}, // PrivateAllow
		{"fd00:ec2::254", "metadata"},
		{"168.63.129.16", "Azure's WireServer (host agent)"},
		{"::ffff:168.63.129.16", "Azure's WireServer"},
		{"64:ff9b::a83f:8110", "Azure's WireServer"},
		{"2002:a83f:8110::1", "Azure's WireServer"},
		{"168.63.129.15", ""},
		{"168.63.129.17", ""},
		{"100.100.100.200", "Alibaba Cloud's metadata address"},
		{"169.254.170.2", "ECS"},
		{"169.254.0.2", "Oracle Cloud's boot volume"},
		{"100.64.0.1", "carrier-grade NAT"},
		{"100.127.255.255", "carrier-grade NAT"},
		{"100.128.0.1", ""},
		{"169.254.169.254", "metadata"},
		{"169.254.1.1", "link-local"},
		{"::ffff:169.254.169.254", "metadata"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fec0::1", "site-local"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},
		{"192.0.0.8", "IETF"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"198.20.0.1", ""},
		{"2001::1", "Teredo"},
		{"2001:0:4136:e378::1", "Teredo"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"::7f00:1", "IPv4-compatible"},
		{"100::1", "discard-only"},
		// NAT64 and 6to4 are judged by the IPv4 address they lead to.
		{"64:ff9b::a9fe:a9fe", "metadata"},
		{"64:ff9b::7f00:1", "loopback"},
		{"64:ff9b::808:808", ""},
		{"64:ff9b::a01:203", ""}, // 10.1.2.3, in PrivateAllow
		{"2002:7f00:1::", "loopback"},
		{"2002:a9fe:a9fe::1", "metadata"},
		{"2002:808:808::1", ""},
		// The server's own addresses, unless PrivateAllow names them.
		{"203.0.113.7", ""},
		{"::ffff:203.0.113.7", ""},
		{"64:ff9b::cb00:7107", ""},
		{"2001:db8::7", "own"},
		{"203.0.113.8", ""},
		// Public, and the documentation ranges tests use as public hosts.
		{"8.8.8.8", ""},
		{"2606:4700:4700::1111", ""},
		{"192.0.2.1", ""},
		{"198.51.100.1", ""},
		{"2001:db8::1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			got := r.Blocked(netip.MustParseAddr(tt.addr), 80)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("Blocked(%s) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
	t.Run("no PrivateAllow", func(t *testing.T) {
		if got := (Ranges{}).Blocked(netip.MustParseAddr("10.1.2.3"), 80); got != whyPrivate {
			t.Errorf("Blocked = %q, want %q", got, whyPrivate)
		}
	})
	t.Run("PrivateAllow written as IPv4-mapped IPv6", func(t *testing.T) {
		r := Ranges{PrivateAllow: []netip.Prefix{netip.MustParsePrefix("::ffff:10.2.0.0/112")}}
		if got := r.Blocked(netip.MustParseAddr("10.2.0.9"), 80); got != "" {
			t.Errorf("Blocked = %q, want dialable", got)
		}
	})
	t.Run("own addresses are asked each time", func(t *testing.T) {
		var own []netip.Addr
		r := Ranges{Own: func() []netip.Addr { return own }}
		a := netip.MustParseAddr("192.0.2.9")
		if got := r.Blocked(a, 80); got != "" {
			t.Fatalf("Blocked = %q before it is an own address", got)
		}
		own = []netip.Addr{a}
		if got := r.Blocked(a, 80); got != whyOwn {
			t.Fatalf("Blocked = %q once it is an own address", got)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		if got := (Ranges{}).Blocked(netip.Addr{}, 80); got == "" {
			t.Error("the zero Addr is not blocked")
		}
	})
}

// TestBlockedHostAgents: the cloud's host agents are refused with their own reason, however
// they are written, whatever the operator allows.
func TestBlockedHostAgents(t *testing.T) {
	open := Ranges{
		// An operator who allowed everything private, and more by mistake.
		PrivateAllow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"),
			netip.MustParsePrefix("168.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16")},
		AllowServer: []netip.AddrPort{netip.MustParseAddrPort("168.63.129.16:80"), netip.MustParseAddrPort("169.254.169.254:80")},
	}
	tests := []struct{ addr, why string }{
		{"168.63.129.16", "Azure's WireServer (host agent)"},
		{"::ffff:168.63.129.16", "Azure's WireServer (host agent)"},
		{"64:ff9b::a83f:8110", "Azure's WireServer (host agent)"},
		{"169.254.169.254", "the cloud metadata address"},
		{"64:ff9b::a9fe:a9fe", "the cloud metadata address"},
		{"fd00:ec2::254", "the cloud metadata address (AWS's, over IPv6)"},
		{"169.254.169.253", "AWS's DNS resolver (host agent)"},
		{"fd00:ec2::253", "AWS's DNS resolver (host agent)"},
		{"169.254.169.123", "AWS's time server (host agent)"},
		{"fd00:ec2::123", "AWS's time server (host agent)"},
		{"169.254.170.2", "AWS ECS's task credentials endpoint (host agent)"},
		{"169.254.170.23", "AWS EKS Pod Identity's credentials agent (host agent)"},
		{"fd00:ec2::23", "AWS EKS Pod Identity's credentials agent (host agent)"},
		{"169.254.0.2", "Oracle Cloud's boot volume (iSCSI, host agent)"},
		{"169.254.2.77", "Oracle Cloud's block volumes (iSCSI, host agent)"},
		{"100.100.100.200", "Alibaba Cloud's metadata address"},
		{"100.96.0.96", "Volcengine's metadata address"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			if got := (Ranges{}).Blocked(a, 80); got != tt.why {
				t.Errorf("Blocked(%s) = %q, want %q", tt.addr, got, tt.why)
			}
			if got := open.Blocked(a, 80); got != tt.why {
				t.Errorf("with everything allowed, Blocked(%s) = %q, want %q", tt.addr, got, tt.why)
			}
		})
	}
	// Their neighbours are what they are.
	for _, addr := range []string{"168.63.129.15", "168.63.129.17", "169.254.169.252", "169.254.0.1", "fd00:ec2::1"} {
		if got := open.Blocked(netip.MustParseAddr(addr), 80); got != "" {
			t.Errorf("with everything allowed, Blocked(%s) = %q, want dialable", addr, got)
		}
	}
}

// TestBlockedListeners: the server's listeners are refused by address and port, inside any
// allowance, a wildcard one through every local address; --egress-allow-server lifts the
// refusal of the one address and port it names.
func TestBlockedListeners(t *testing.T) {
	const api, py = "this cellbox server's API", "this cellbox server's python tool server"
	r := Ranges{
		PrivateAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
			netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("0.0.0.0/8")},
		Own: func() []netip.Addr {
			return []netip.Addr{netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("fe80::7%eth0")}
		},
		Listeners: func() []Listener {
			return []Listener{
				{netip.MustParseAddrPort("127.0.0.1:8080"), api},
				{netip.MustParseAddrPort("[::]:9090"), py},
			}
		},
	}
	tests := []struct {
		dest string
		want string
	}{
		{"127.0.0.1:8080", api},
		{"[::ffff:127.0.0.1]:8080", api},
		{"[64:ff9b::7f00:1]:8080", api},
		{"0.0.0.0:8080", api}, // Linux connects 0.0.0.0 to this machine
		{"127.0.0.1:8081", ""},
		{"127.0.0.2:8080", ""}, // bound to 127.0.0.1 alone
		{"10.0.0.1:8080", ""},
		{"127.0.0.9:9090", py}, // a wildcard listener: every local address
		{"[::1]:9090", py},
		{"203.0.113.7:9090", py},
		{"[fe80::7]:9090", py},
		{"[::]:9090", py},
		{"10.1.2.3:9090", ""}, // another machine
		{"203.0.113.8:9090", ""},
	}
	for _, tt := range tests {
		t.Run(tt.dest, func(t *testing.T) {
			ap := netip.MustParseAddrPort(tt.dest)
			if got := r.Blocked(ap.Addr(), int(ap.Port())); got != tt.want {
				t.Errorf("Blocked(%s) = %q, want %q", tt.dest, got, tt.want)
			}
		})
	}
	t.Run("without an allowance", func(t *testing.T) {
		r := Ranges{Listeners: r.Listeners}
		if got := r.Blocked(netip.MustParseAddr("127.0.0.1"), 8080); got != api {
			t.Errorf("Blocked = %q, want %q", got, api)
		}
	})
	t.Run("allow server", func(t *testing.T) {
		r := r
		r.AllowServer = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080"), netip.MustParseAddrPort("127.0.0.1:9090")}
		for dest, want := range map[string]string{
			"127.0.0.1:8080":          "",
			"[::ffff:127.0.0.1]:8080": "",
			"127.0.0.1:9090":          "",
			"0.0.0.0:8080":            api, // not the address named
			"[::1]:9090":              py,
			"203.0.113.7:9090":        py,
		} {
			ap := netip.MustParseAddrPort(dest)
			if got := r.Blocked(ap.Addr(), int(ap.Port())); got != want {
				t.Errorf("Blocked(%s) = %q, want %q", dest, got, want)
			}
		}
		// It lifts the listener's refusal only: loopback still needs PrivateAllow.
		r.PrivateAllow = nil
		if got := r.Blocked(netip.MustParseAddr("127.0.0.1"), 8080); got != "loopback" {
			t.Errorf("without PrivateAllow, Blocked = %q, want loopback", got)
		}
	})
	t.Run("listeners are asked each time", func(t *testing.T) {
		var ls []Listener
		r := Ranges{PrivateAllow: r.PrivateAllow, Listeners: func() []Listener { return ls }}
		a := netip.MustParseAddr("127.0.0.1")
		if got := r.Blocked(a, 7000); got != "" {
			t.Fatalf("Blocked = %q before the listener opened", got)
		}
		ls = []Listener{{netip.MustParseAddrPort("127.0.0.1:7000"), api}}
		if got := r.Blocked(a, 7000); got != api {
			t.Fatalf("Blocked = %q once it listens", got)
		}
	})
}

func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"pypi.org", "PYPI.org.", "[::1]", "::ffff:1.2.3.4", "fe80::1%eth0", "0x7f.1",
		"2130706433", "127.1", "xn--bcher-kva.example", "bücher.de", "[1.2.3.4]", "a..b", "_a.b-c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHost(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("ParseHost(%q): %v, not invalid argument", s, err)
			}
			return
		}
		if (h.Name == "") == !h.Addr.IsValid() {
			t.Fatalf("ParseHost(%q) = %+v: want exactly one of Name and Addr", s, h)
		}
		if h.Addr.Zone() != "" {
			t.Fatalf("ParseHost(%q) kept a zone", s)
		}
		// What ParseHost gives reads back as itself.
		again, err := ParseHost(h.String())
		if err != nil || again != h {
			t.Fatalf("ParseHost(%q) = %+v, but ParseHost(%q) = %+v, %v", s, h, h.String(), again, err)
		}
		if h.Name != "" {
			if len(h.Name) > maxNameLen || strings.ToLower(h.Name) != h.Name || strings.HasSuffix(h.Name, ".") {
				t.Fatalf("ParseHost(%q) = name %q, not normalised", s, h.Name)
			}
			if _, err := netip.ParseAddr(h.Name); err == nil {
				t.Fatalf("ParseHost(%q) = name %q, which is an address", s, h.Name)
			}
		}
	})
}

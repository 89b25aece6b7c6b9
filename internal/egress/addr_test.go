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
			got := r.Blocked(netip.MustParseAddr(tt.addr))
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("Blocked(%s) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
	t.Run("no PrivateAllow", func(t *testing.T) {
		if got := (Ranges{}).Blocked(netip.MustParseAddr("10.1.2.3")); got != whyPrivate {
			t.Errorf("Blocked = %q, want %q", got, whyPrivate)
		}
	})
	t.Run("PrivateAllow written as IPv4-mapped IPv6", func(t *testing.T) {
		r := Ranges{PrivateAllow: []netip.Prefix{netip.MustParsePrefix("::ffff:10.2.0.0/112")}}
		if got := r.Blocked(netip.MustParseAddr("10.2.0.9")); got != "" {
			t.Errorf("Blocked = %q, want dialable", got)
		}
	})
	t.Run("own addresses are asked each time", func(t *testing.T) {
		var own []netip.Addr
		r := Ranges{Own: func() []netip.Addr { return own }}
		a := netip.MustParseAddr("192.0.2.9")
		if got := r.Blocked(a); got != "" {
			t.Fatalf("Blocked = %q before it is an own address", got)
		}
		own = []netip.Addr{a}
		if got := r.Blocked(a); got != whyOwn {
			t.Fatalf("Blocked = %q once it is an own address", got)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		if got := (Ranges{}).Blocked(netip.Addr{}); got == "" {
			t.Error("the zero Addr is not blocked")
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

package server

import (
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/cluster"
	"github.com/cellbox/cellbox/internal/listen"
)

// Where the other nodes reach this one: --cluster-url when given (a base URL, nothing
// else), else the listen address, which must not be a wildcard.
func TestClusterURL(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	tests := []struct {
		flag string
		addr net.Addr
		want string // the URL, or "error: <part of the message>"
	}{
		{"", tcp("127.0.0.1:8080"), "http://127.0.0.1:8080"},
		{"", tcp("[::1]:8080"), "http://[::1]:8080"},
		{"", tcp("0.0.0.0:8080"), "error: --cluster-url"},
		{"", tcp("[::]:8080"), "error: --cluster-url"},
		{"http://10.0.0.7:8080", tcp("0.0.0.0:8080"), "http://10.0.0.7:8080"},
		{"http://10.0.0.7:8080/", tcp("0.0.0.0:8080"), "http://10.0.0.7:8080"},
		{"https://node-a.cellbox.svc:8443", tcp("0.0.0.0:8080"), "https://node-a.cellbox.svc:8443"},
		{"10.0.0.7:8080", tcp("0.0.0.0:8080"), "error: base URL"},
		{"ftp://10.0.0.7", tcp("0.0.0.0:8080"), "error: base URL"},
		{"http://10.0.0.7:8080/v1", tcp("0.0.0.0:8080"), "error: base URL"},
		{"http://", tcp("0.0.0.0:8080"), "error: base URL"},
		{"http://fd00::7:8080", tcp("[::]:8080"), "error: brackets"},
		{"http://[fd00::7]:8080", tcp("[::]:8080"), "http://[fd00::7]:8080"},
	}
	for _, tt := range tests {
		u, err := clusterURL(tt.flag, tt.addr)
		if want, ok := strings.CutPrefix(tt.want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("clusterURL(%q, %v) = %v, %v; want an error mentioning %q", tt.flag, tt.addr, u, err, want)
			}
			continue
		}
		if err != nil || u.String() != tt.want {
			t.Errorf("clusterURL(%q, %v) = %v, %v; want %s", tt.flag, tt.addr, u, err, tt.want)
		}
	}
}

// The cluster's nodes are listeners the egress gateway refuses: each node's URL, by address,
// its port or the scheme's.
func TestNodeSockets(t *testing.T) {
	member := func(name, u string) cluster.Member {
		m := cluster.Member{Name: name}
		if u != "" {
			m.URL, _ = url.Parse(u)
		}
		return m
	}
	members := []cluster.Member{
		member("a", "http://10.0.0.7:8080"),
		member("b", "https://[fd00::7]"),
		member("c", "http://[::ffff:10.0.0.9]"),
		member("d", "http://node-d.cellbox.svc:8080"), // a name: left out
		member("e", ""),
	}
	got := nodeSockets(func() []cluster.Member { return members })()
	want := []listen.Socket{
		{Addr: netip.MustParseAddrPort("10.0.0.7:8080"), Name: "cellbox node a's API"},
		{Addr: netip.MustParseAddrPort("[fd00::7]:443"), Name: "cellbox node b's API"},
		{Addr: netip.MustParseAddrPort("10.0.0.9:80"), Name: "cellbox node c's API"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("nodeSockets = %+v\nwant %+v", got, want)
	}
}

package server

import (
	"net"
	"strings"
	"testing"
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

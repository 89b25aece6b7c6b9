package egress

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/cellbox/cellbox/api"
)

// socksRaw greets the proxy offering methods and, when it accepts no authentication, sends
// req; it returns the proxy's choice of method and its reply (nil when it closed instead).
func (sb *sbox) socksRaw(methods, req []byte) (byte, []byte) {
	sb.t.Helper()
	c := sb.dial()
	if _, err := c.Write(append([]byte{5, byte(len(methods))}, methods...)); err != nil {
		sb.t.Fatal(err)
	}
	var choice [2]byte
	if _, err := io.ReadFull(c, choice[:]); err != nil {
		sb.t.Fatalf("greeting: %v", err)
	}
	if choice[1] != socksNoAuth {
		return choice[1], nil
	}
	c.Write(req)
	c.(*net.TCPConn).CloseWrite() // a request cut short ends here
	reply := make([]byte, 10)
	if _, err := io.ReadFull(c, reply); err != nil {
		return choice[1], nil
	}
	return choice[1], reply
}

// socksReq is a SOCKS5 request: command cmd to host (a name or an address) and port.
func socksReq(cmd byte, host string, port uint16) []byte {
	req := []byte{5, cmd, 0}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		req = append(append(req, socksIPv4), a.AsSlice()...)
	} else if err == nil {
		req = append(append(req, socksIPv6), a.AsSlice()...)
	} else {
		req = append(append(req, socksDomain, byte(len(host))), host...)
	}
	return binary.BigEndian.AppendUint16(req, port)
}

// TestGatewaySOCKS: SOCKS5 with each address type, through x/net/proxy and curl; refusals
// and what the proxy does not do, with their reply codes.
func TestGatewaySOCKS(t *testing.T) {
	e := newEnv(t, nil)
	a0, a6 := e.h.Addr(0), e.h.Addr6()
	n := api.Network{Egress: "allowlist", Allow: []string{"echo.example", a0.String(), a6.String()}}

	for _, tt := range []struct {
		name, url, host, rule, addr string
	}{
		{"domain", "http://echo.example/", "echo.example", "echo.example", a0.String()},
		{"IPv4", "http://" + a0.String() + "/", a0.String(), a0.String(), a0.String()},
		{"IPv6", "http://[" + a6.String() + "]/", a6.String(), a6.String(), a6.String()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sb := e.session(t, n, Limits{})
			code, body := get(t, sb.socksClient(nil), tt.url)
			if code != 200 {
				t.Fatalf("%d %q", code, body)
			}
			echoOf(t, body)
			r := sb.done()
			wantRecord(t, r, "allowed", tt.rule, "")
			if r.Protocol != "socks5" || r.Host != tt.host || r.Address != tt.addr || r.Port != 80 || r.BytesIn == 0 {
				t.Errorf("record %+v; want %s dialed at %s", r, tt.host, tt.addr)
			}
		})
	}

	t.Run("curl socks5h over TLS", func(t *testing.T) {
		sb := e.session(t, n, Limits{})
		out, err := curl(t, "-x", "socks5h://"+sb.addr, "--cacert", writePEM(t, e.h.CA.PEM()), "https://echo.example/")
		if err != nil {
			t.Fatal(err)
		}
		if !echoOf(t, out).TLS {
			t.Errorf("echo %q: not over TLS", out)
		}
		if r := sb.done(); r.Protocol != "socks5" || r.Port != 443 || r.Intercepted {
			t.Errorf("record %+v", r)
		}
	})

	t.Run("curl socks5 refused", func(t *testing.T) {
		sb := e.session(t, n, Limits{})
		if out, err := curl(t, "-x", "socks5://"+sb.addr, "http://"+e.h.Addr(2).String()+"/"); err == nil {
			t.Errorf("curl through a refusal: %q", out)
		}
		wantRecord(t, sb.last(), "refused", "", e.h.Addr(2).String()+":80 is not in this session's allowlist")
	})

	replies := []struct {
		name    string
		methods []byte
		req     []byte
		choice  byte
		reply   int // -1: the proxy closes without a reply
		reason  string
	}{
		{"refused name", []byte{0}, socksReq(socksConnect, "other.example", 80), 0, socksNotAllowed, "other.example:80 (" + e.h.Addr(2).String() + ") is not in this session's allowlist"},
		{"metadata address", []byte{0}, socksReq(socksConnect, "169.254.169.254", 80), 0, socksNotAllowed, "the address is the cloud metadata address"},
		{"metadata IPv6", []byte{0}, socksReq(socksConnect, "fd00:ec2::254", 80), 0, socksNotAllowed, "the address is the cloud metadata address"},
		{"IPv4-mapped loopback", []byte{0}, socksReq(socksConnect, "::ffff:127.0.0.1", 80), 0, socksNotAllowed, "127.0.0.1:80 is refused"},
		{"name that does not resolve", []byte{0}, socksReq(socksConnect, "nowhere.example", 80), 0, socksUnreachable, "nowhere.example does not resolve"},
		{"decimal spelling", []byte{0}, socksReq(socksConnect, "2130706433", 80), 0, socksNotAllowed, ""},
		{"BIND", []byte{0}, socksReq(2, "echo.example", 80), 0, socksNoCommand, ""},
		{"UDP ASSOCIATE", []byte{0}, socksReq(3, "echo.example", 80), 0, socksNoCommand, ""},
		{"unknown address type", []byte{0}, []byte{5, 1, 0, 9, 1, 2, 3, 4, 0, 80}, 0, socksNoAddressType, ""},
		{"only username and password offered", []byte{2}, nil, socksNoWay, -1, ""},
		{"request of another version", []byte{0, 2}, []byte{4, 1, 0, 1, 203, 0, 113, 2, 0, 80}, 0, -1, ""},
		{"request cut short", []byte{0}, []byte{5, 1, 0, 3, 40, 'e'}, 0, -1, ""},
	}
	for _, tt := range replies {
		t.Run(tt.name, func(t *testing.T) {
			sb := e.session(t, n, Limits{})
			choice, reply := sb.socksRaw(tt.methods, tt.req)
			if choice != tt.choice {
				t.Fatalf("method %#x; want %#x", choice, tt.choice)
			}
			switch {
			case tt.reply < 0 && reply != nil:
				t.Errorf("reply %v; want none", reply)
			case tt.reply >= 0 && (reply == nil || reply[0] != 5 || reply[1] != byte(tt.reply)):
				t.Errorf("reply %v; want code %d", reply, tt.reply)
			}
			if tt.reason != "" {
				wantRecord(t, sb.last(), "refused", "", tt.reason)
			} else if n := sb.records(); n != 0 {
				t.Errorf("%d records; want none", n)
			}
		})
	}
}

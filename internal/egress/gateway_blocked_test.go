package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/testhost"
)

// withGateway is e with a gateway of its own, made from e's Config changed by mod.
func (e *env) withGateway(mod func(*Config)) *env {
	e2 := *e
	mod(&e2.cfg)
	e2.g = New(e2.cfg)
	return &e2
}

// listenHost serves Echo on this machine (not the test host) at addr, and returns where.
func listenHost(t *testing.T, addr string) string {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: testhost.Echo(), ErrorLog: discardLog}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// TestGatewayBlocked: addresses never dialed, however they are written or reached, under
// mode public and under an allowlist that names them; and --egress-private-allow.
func TestGatewayBlocked(t *testing.T) {
	e := newEnv(t, nil)
	// Servers that would answer if the gateway dialed them: this machine's own address on
	// the test host's link, and loopback.
	own := listenHost(t, net.JoinHostPort(e.h.HostAddr().String(), "0"))
	loop := listenHost(t, "127.0.0.1:0")
	ownPort, loopPort := strconv.Itoa(port(own)), strconv.Itoa(port(loop))
	const (
		metadata  = "the cloud metadata address"
		private   = "a private address"
		mine      = "one of the server's own addresses"
		loopOrOwn = "" // loopback, or the server's own: both are true of 127.0.0.1 and ::1
	)
	tests := []struct {
		target string // as CONNECT names it
		dest   string // as the reason names it
		why    string
	}{
		{"169.254.169.254:80", "169.254.169.254:80", metadata},
		{"[fd00:ec2::254]:80", "[fd00:ec2::254]:80", metadata},
		{"meta.example:80", "meta.example:80 (169.254.169.254)", metadata},
		{"meta6.example:80", "meta6.example:80 (fd00:ec2::254)", metadata},
		{"127.0.0.1:" + loopPort, "127.0.0.1:" + loopPort, loopOrOwn},
		{"loop.example:" + loopPort, "loop.example:" + loopPort + " (127.0.0.1)", loopOrOwn},
		{own, own, mine},
		{"myself.example:" + ownPort, "myself.example:" + ownPort + " (" + e.h.HostAddr().String() + ")", mine},
		{"10.1.2.3:80", "10.1.2.3:80", private},
		{"rebind.example:80", "rebind.example:80 (10.0.0.5)", private},
		{"100.64.0.1:80", "100.64.0.1:80", "a carrier-grade NAT address"},
		{"cgnat.example:80", "cgnat.example:80 (100.64.0.1)", "a carrier-grade NAT address"},
		{"[::1]:" + loopPort, "[::1]:" + loopPort, loopOrOwn},
		{"[::ffff:127.0.0.1]:" + loopPort, "127.0.0.1:" + loopPort, loopOrOwn},
		{"mapped6.example:" + loopPort, "mapped6.example:" + loopPort + " (127.0.0.1)", loopOrOwn},
		{"[::ffff:a9fe:a9fe]:80", "169.254.169.254:80", metadata},
		{"[64:ff9b::a9fe:a9fe]:80", "[64:ff9b::a9fe:a9fe]:80", metadata},
	}
	modes := []struct {
		name string
		net  api.Network
	}{
		{"public", api.Network{Egress: "public"}},
		{"allowlist naming them", api.Network{Egress: "allowlist", Allow: []string{
			"169.254.0.0/16", "fd00:ec2::/32", "127.0.0.0/8", "::1", "10.0.0.0/8", "100.64.0.0/10", e.h.HostAddr().String(), "64:ff9b::/96",
			"meta.example", "meta6.example", "loop.example", "myself.example", "rebind.example", "cgnat.example", "mapped6.example"}}},
	}
	for _, m := range modes {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.target, func(t *testing.T) {
				sb := e.session(t, m.net, Limits{})
				code, body, _, _ := sb.connect(tt.target)
				sentence := tt.dest + " is refused: the address is " + tt.why
				wantRefusal(t, code, body, http.StatusForbidden, sentence)
				r := sb.last()
				wantRecord(t, r, "refused", "", sentence)
				if r.Address != "" || r.Protocol != "connect" {
					t.Errorf("record %+v: want nothing dialed", r)
				}
			})
		}
	}

	// Other spellings of an IPv4 address are not names: refused before anything is decided,
	// as CONNECT targets and as URLs.
	spellings := []string{"2130706433", "0177.0.0.1", "0x7f.0.0.1", "127.1", "0251.0376.0251.0376"}
	for _, s := range spellings {
		t.Run("spelling/"+s, func(t *testing.T) {
			sb := e.session(t, api.Network{Egress: "public"}, Limits{})
			const sentence = "is another spelling of an IPv4 address; write the address as a.b.c.d"
			code, body, _, _ := sb.connect(s + ":" + loopPort)
			wantRefusal(t, code, body, http.StatusBadRequest, sentence)
			code, body = get(t, sb.client(nil), "http://"+s+":"+loopPort+"/")
			wantRefusal(t, code, body, http.StatusBadRequest, sentence)
			if n := sb.records(); n != 0 {
				t.Errorf("%d records of a host that is not one", n)
			}
		})
	}

	// Go's client, plain http:// to the metadata address and loopback.
	for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://[::1]:" + loopPort + "/", "http://" + loop + "/"} {
		t.Run("url/"+u, func(t *testing.T) {
			sb := e.session(t, api.Network{Egress: "public"}, Limits{})
			code, body := get(t, sb.client(nil), u)
			wantRefusal(t, code, body, http.StatusForbidden, "is refused: the address is")
			if r := sb.last(); r.Decision != "refused" || r.Address != "" || r.Protocol != "http" {
				t.Errorf("record %+v", r)
			}
		})
	}

	// A name with a private and a public address: only the public one is dialed.
	t.Run("private and public address", func(t *testing.T) {
		sb := e.session(t, api.Network{Egress: "allowlist", Allow: []string{"mixed.example"}}, Limits{})
		for range 3 {
			code, body := get(t, sb.client(nil), "http://mixed.example/")
			if code != 200 || echoOf(t, body).Host != "mixed.example" {
				t.Fatalf("%d %q", code, body)
			}
			r := sb.done()
			wantRecord(t, r, "allowed", "mixed.example", "")
			if r.Address != e.h.Addr(2).String() {
				t.Errorf("dialed %q; want %s, the public address", r.Address, e.h.Addr(2))
			}
		}
	})

	// --egress-private-allow: a mirror on loopback becomes reachable, and nothing else does.
	t.Run("private allow", func(t *testing.T) {
		pe := e.withGateway(func(c *Config) {
			c.Ranges.PrivateAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		})
		e.h.DNS.Set("mirror.example", netip.MustParseAddr("127.0.0.1"))
		sb := pe.session(t, api.Network{Egress: "allowlist", Allow: []string{"mirror.example", "rebind.example"}}, Limits{})
		code, body := get(t, sb.client(nil), "http://mirror.example:"+loopPort+"/simple/")
		if code != 200 || echoOf(t, body).Path != "/simple/" {
			t.Fatalf("%d %q", code, body)
		}
		r := sb.done()
		wantRecord(t, r, "allowed", "mirror.example", "")
		if r.Address != "127.0.0.1" {
			t.Errorf("record %+v: want 127.0.0.1 dialed", r)
		}
		code, body = get(t, sb.client(nil), "http://rebind.example/")
		wantRefusal(t, code, body, http.StatusForbidden, "rebind.example:80 (10.0.0.5) is refused: the address is a private address")
		code, body = get(t, sb.client(nil), "http://127.0.0.2:"+loopPort+"/")
		wantRefusal(t, code, body, http.StatusForbidden, "127.0.0.2:"+loopPort+" is refused: the address is loopback")
	})
}

// TestGatewayResolvesOnlyWhatMayPass: a name the policy cannot allow (refused by name, or
// under an allowlist with no address rule to allow it by its address) is refused without a
// DNS query: else code in a sandbox without internet could send data out in the names it
// asks the server's resolver for.
func TestGatewayResolvesOnlyWhatMayPass(t *testing.T) {
	e := newEnv(t, nil)
	var queries atomic.Int64
	ce := e.withGateway(func(c *Config) {
		dns := e.h.DNSAddr()
		c.Resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			queries.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, dns)
		}}
	})
	tests := []struct {
		name    string
		net     api.Network
		url     string
		code    int
		resolve bool
	}{
		{"none", api.Network{}, "http://data.leak.example/", 403, false},
		{"allowlist of names", api.Network{Egress: "allowlist", Allow: []string{"echo.example"}}, "http://data.leak.example/", 403, false},
		{"denied name", api.Network{Egress: "public", Deny: []string{"*.leak.example"}}, "http://data.leak.example/", 403, false},
		{"allowlist of names, on another port", api.Network{Egress: "allowlist", Allow: []string{"echo.example:443", "10.0.0.0/8:5432"}}, "http://echo.example/", 403, false},
		{"allowed name", api.Network{Egress: "allowlist", Allow: []string{"echo.example"}}, "http://echo.example/", 200, true},
		{"allowlist with an address rule", api.Network{Egress: "allowlist", Allow: []string{e.h.Addr(2).String()}}, "http://other.example/", 200, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := ce.session(t, tt.net, Limits{})
			before := queries.Load()
			code, body := get(t, sb.client(nil), tt.url)
			if code != tt.code {
				t.Errorf("%d %q; want %d", code, body, tt.code)
			}
			if asked := queries.Load() > before; asked != tt.resolve {
				t.Errorf("resolved: %v; want %v", asked, tt.resolve)
			}
		})
	}
}

// noDial makes g fail t if it dials anything: a test of addresses that must be refused
// sends no packet to them, even when the refusal is broken.
func noDial(t *testing.T, g *Gateway) {
	g.dial = func(_ context.Context, _, address string) (net.Conn, error) {
		t.Errorf("the gateway dialed %s", address)
		return nil, errors.New("this test dials nothing")
	}
}

// TestGatewayHostAgents: a public session's requests to Azure's WireServer, by address and
// by names that resolve to it, over CONNECT, plain HTTP and SOCKS5, are refused with its
// name before anything is dialed; under an allowlist that names them, and with an operator's
// allowance that covers them (168.0.0.0/8, all of link-local), too. Nothing is dialed: the
// gateway's dialer fails the test if it is called.
func TestGatewayHostAgents(t *testing.T) {
	e := newEnv(t, nil)
	e.h.DNS.Set("wire.example", netip.MustParseAddr("168.63.129.16"))
	e.h.DNS.Set("wire6.example", netip.MustParseAddr("64:ff9b::a83f:8110"))
	const (
		wire = "Azure's WireServer (host agent)"
		imds = "the cloud metadata address"
	)
	gateways := []struct {
		name string
		env  *env
	}{
		{"no allowance", e.withGateway(func(*Config) {})},
		{"private allow", e.withGateway(func(c *Config) {
			c.Ranges.PrivateAllow = []netip.Prefix{netip.MustParsePrefix("168.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16")}
		})},
	}
	modes := []struct {
		name string
		net  api.Network
	}{
		{"public", api.Network{Egress: "public"}},
		{"allowlist naming them", api.Network{Egress: "allowlist", Allow: []string{
			"168.63.129.16", "169.254.0.0/16", "64:ff9b::/96", "wire.example", "wire6.example", "meta.example"}}},
	}
	targets := []struct {
		target string // as CONNECT names it
		dest   string // as the reason names it
		why    string
	}{
		{"168.63.129.16:80", "168.63.129.16:80", wire},
		{"168.63.129.16:32526", "168.63.129.16:32526", wire},
		{"[::ffff:168.63.129.16]:80", "168.63.129.16:80", wire},
		{"[64:ff9b::a83f:8110]:80", "[64:ff9b::a83f:8110]:80", wire},
		{"wire.example:80", "wire.example:80 (168.63.129.16)", wire},
		{"wire6.example:80", "wire6.example:80 (64:ff9b::a83f:8110)", wire},
		{"169.254.169.254:80", "169.254.169.254:80", imds},
		{"meta.example:80", "meta.example:80 (169.254.169.254)", imds},
	}
	for _, ge := range gateways {
		noDial(t, ge.env.g)
		for _, m := range modes {
			for _, tt := range targets {
				t.Run(ge.name+"/"+m.name+"/"+tt.target, func(t *testing.T) {
					sentence := tt.dest + " is refused: the address is " + tt.why
					sb := ge.env.session(t, m.net, Limits{})
					code, body, _, _ := sb.connect(tt.target)
					wantRefusal(t, code, body, http.StatusForbidden, sentence)
					r := sb.last()
					wantRecord(t, r, "refused", "", sentence)
					if r.Address != "" || r.Protocol != "connect" {
						t.Errorf("record %+v: want nothing dialed", r)
					}
				})
			}
		}
	}
	// The same decision whatever the client speaks: plain HTTP and SOCKS5.
	for _, ge := range gateways {
		for _, u := range []struct{ url, sentence string }{
			{"http://168.63.129.16/machine?comp=goalstate", "168.63.129.16:80 is refused: the address is " + wire},
			{"http://wire.example:32526/vmAgentLog", "wire.example:32526 is refused: the address is " + wire},
		} {
			t.Run(ge.name+"/url/"+u.url, func(t *testing.T) {
				sb := ge.env.session(t, api.Network{Egress: "public"}, Limits{})
				code, body := get(t, sb.client(nil), u.url)
				wantRefusal(t, code, body, http.StatusForbidden, u.sentence)
				if r := sb.last(); r.Decision != "refused" || r.Address != "" || r.Protocol != "http" || !strings.Contains(r.Reason, wire) {
					t.Errorf("record %+v", r)
				}
			})
		}
		for _, host := range []string{"168.63.129.16", "wire.example"} {
			t.Run(ge.name+"/socks5/"+host, func(t *testing.T) {
				sb := ge.env.session(t, api.Network{Egress: "public"}, Limits{})
				_, reply := sb.socksRaw([]byte{socksNoAuth}, socksReq(1, host, 80))
				if len(reply) < 2 || reply[1] != 2 {
					t.Errorf("reply %v; want code 2 (not allowed by ruleset)", reply)
				}
				if r := sb.last(); r.Decision != "refused" || r.Address != "" || r.Protocol != "socks5" || !strings.Contains(r.Reason, wire) {
					t.Errorf("record %+v", r)
				}
			})
		}
	}
}

// TestGatewayServerListeners: with loopback allowed by the operator and by the session, the
// server's own listeners stay out of reach (a wildcard one through every local address),
// another loopback port does not; --egress-allow-server opens the one address and port it
// names.
func TestGatewayServerListeners(t *testing.T) {
	e := newEnv(t, nil)
	api1 := listenHost(t, "127.0.0.1:0") // the server's API, as far as the gateway knows
	wild := listenHost(t, "0.0.0.0:0")   // a listener on every address
	mirror := listenHost(t, "127.0.0.1:0")
	const name = "this cellbox server's API"
	listeners := func() []Listener {
		return []Listener{
			{netip.MustParseAddrPort(api1), name},
			{netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port(wild))), "this cellbox server's python tool server"},
		}
	}
	e.h.DNS.Set("cellbox.example", netip.MustParseAddr("127.0.0.1"))
	host := e.h.HostAddr().String()
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.PrefixFrom(e.h.HostAddr(), 32)}
	n := api.Network{Egress: "allowlist", Allow: []string{"127.0.0.1", host, "cellbox.example"}}
	apiPort, wildPort := strconv.Itoa(port(api1)), strconv.Itoa(port(wild))

	t.Run("refused", func(t *testing.T) {
		le := e.withGateway(func(c *Config) { c.Ranges.PrivateAllow, c.Ranges.Listeners = allow, listeners })
		sb := le.session(t, n, Limits{})
		for _, tt := range []struct{ url, sentence string }{
			{"http://" + api1 + "/v1/sessions", api1 + " is refused: the address is " + name},
			{"http://cellbox.example:" + apiPort + "/v1/sessions", "cellbox.example:" + apiPort + " is refused: the address is " + name},
			{"http://127.0.0.1:" + wildPort + "/sse", "127.0.0.1:" + wildPort + " is refused: the address is this cellbox server's python tool server"},
			{"http://" + net.JoinHostPort(host, wildPort) + "/sse", net.JoinHostPort(host, wildPort) + " is refused: the address is this cellbox server's python tool server"},
		} {
			code, body := get(t, sb.client(nil), tt.url)
			wantRefusal(t, code, body, http.StatusForbidden, tt.sentence)
			if r := sb.last(); r.Decision != "refused" || r.Address != "" || !strings.Contains(r.Reason, "this cellbox server's") {
				t.Errorf("%s: record %+v", tt.url, r)
			}
		}
		code, body, _, _ := sb.connect(api1)
		wantRefusal(t, code, body, http.StatusForbidden, api1+" is refused: the address is "+name)
		// Another loopback port, the mirror the operator allowed loopback for, is reached.
		code, body = get(t, sb.client(nil), "http://"+mirror+"/simple/")
		if code != 200 || echoOf(t, body).Path != "/simple/" {
			t.Fatalf("the mirror: %d %q", code, body)
		}
		wantRecord(t, sb.done(), "allowed", "127.0.0.1", "")
	})

	t.Run("allow server", func(t *testing.T) {
		le := e.withGateway(func(c *Config) {
			c.Ranges.PrivateAllow, c.Ranges.Listeners = allow, listeners
			c.Ranges.AllowServer = []netip.AddrPort{netip.MustParseAddrPort(api1)}
		})
		sb := le.session(t, n, Limits{})
		code, body := get(t, sb.client(nil), "http://"+api1+"/v1/sessions")
		if code != 200 || echoOf(t, body).Path != "/v1/sessions" {
			t.Fatalf("the API named by --egress-allow-server: %d %q", code, body)
		}
		wantRecord(t, sb.done(), "allowed", "127.0.0.1", "")
		// Only the address and port it names.
		code, body = get(t, sb.client(nil), "http://127.0.0.1:"+wildPort+"/sse")
		wantRefusal(t, code, body, http.StatusForbidden, "127.0.0.1:"+wildPort+" is refused: the address is this cellbox server's python tool server")
	})
}

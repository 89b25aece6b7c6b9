// Package listen opens the server's TCP listeners, and only it does: each is listed while it
// is open, with what it serves, so that the egress gateway refuses it as a destination
// (docs/ARCHITECTURE.md, "Egress"). The other nodes of a cluster are listed too, by whoever
// knows them (Peers). The list is the process's: every server in it, and whatever else it
// listens on for them, is the control plane. A test (listen_test.go) fails when production
// code opens a TCP listener anywhere else, so a listener added later is listed by
// construction.
//
// Not for: the guest's listeners (inside the sandbox), Unix sockets (the gateway dials TCP
// only), or the listeners of tests.
package listen

import (
	"net"
	"net/netip"
	"sync"
)

// Socket is a listener of the server, or of another node of its cluster.
type Socket struct {
	// Addr is the address as bound: an unspecified address (0.0.0.0, ::) listens on every
	// local address.
	Addr netip.AddrPort
	// Name says whose it is, to follow "the address is": "this cellbox server's API".
	Name string
}

var (
	mu    sync.Mutex
	open  = map[*listener]Socket{}
	peers = map[*func() []Socket]struct{}{}
)

// TCP listens on addr (host:port, as net.Listen takes it) and lists the socket, as name
// says, until the listener is closed.
func TCP(name, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, err
	}
	l := &listener{Listener: ln}
	mu.Lock()
	open[l] = Socket{Addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), Name: name}
	mu.Unlock()
	return l, nil
}

// listener takes itself off the list when it is closed.
type listener struct {
	net.Listener
	once sync.Once
}

func (l *listener) Close() error {
	l.once.Do(func() {
		mu.Lock()
		delete(open, l)
		mu.Unlock()
	})
	return l.Listener.Close()
}

// Peers adds f's sockets to the list (the other nodes of a cluster, as its membership says
// now), until the returned func is called.
func Peers(f func() []Socket) (remove func()) {
	p := &f
	mu.Lock()
	peers[p] = struct{}{}
	mu.Unlock()
	return func() {
		mu.Lock()
		delete(peers, p)
		mu.Unlock()
	}
}

// Sockets lists the listeners open now in this process, then the peers'.
func Sockets() []Socket {
	mu.Lock()
	out := make([]Socket, 0, len(open))
	for _, s := range open {
		out = append(out, s)
	}
	fs := make([]func() []Socket, 0, len(peers))
	for p := range peers {
		fs = append(fs, *p)
	}
	mu.Unlock()
	for _, f := range fs {
		out = append(out, f()...)
	}
	return out
}

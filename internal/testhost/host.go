// Package testhost gives tests real servers on test hosts: network namespaces on this machine
// with their own "public" addresses (203.0.113.0/24 and 2001:db8:cb::/48, the documentation
// ranges), reached from the host over a veth pair. A test points the egress gateway (which runs
// on the host, in the cellbox server) at them: a DNS server, HTTP and HTTPS servers with a test
// root CA, a PEP 503 index, a git smart-HTTP repository, and upstreams that misbehave on
// purpose. No traffic leaves the machine. Only tests import it, as internal/testbin.
//
// Not for: production code, or anything that should run without root.
package testhost

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/internal/testbin"
)

// Slots is how many Hosts this machine can hold at once, across all test processes: each
// takes one /29 of 203.0.113.0/24.
const Slots = 32

// Host is a network namespace with addresses of its own, for servers a test starts in it.
type Host struct {
	slot  int
	lock  *os.File // flock'ed while the Host lives: the slot is ours
	nsfd  int      // the namespace, for setns
	dir   string
	names struct{ netns, hostLink string }

	DNS *DNS // the DNS server on port 53 of Addr(0), UDP and TCP
	CA  *CA  // the test root that ServeTLS's certificates chain to
}

// New makes a Host and removes it when the test ends. It needs root and iproute2's ip.
func New(t testing.TB) *Host {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("test hosts are network namespaces, which only Linux has")
	}
	testbin.NeedRoot(t, "test hosts are network namespaces with a veth pair")
	testbin.NeedProgram(t, "ip", "iproute2")
	h := &Host{nsfd: -1, dir: t.TempDir()}
	if err := h.take(); err != nil {
		t.Fatalf("testhost: %v", err)
	}
	t.Cleanup(h.remove)
	if err := h.setUp(); err != nil {
		t.Fatalf("testhost: set up slot %d: %v", h.slot, err)
	}
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	h.CA = ca
	if err := os.WriteFile(h.CAFile(), ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(h.dir, "no-certs"), 0o755); err != nil {
		t.Fatal(err)
	}
	bundle, err := os.ReadFile(hostRoots)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if len(bundle) > 0 && !strings.HasSuffix(string(bundle), "\n") {
		bundle = append(bundle, '\n')
	}
	if err := os.WriteFile(h.BundleFile(), append(bundle, ca.PEM()...), 0o644); err != nil {
		t.Fatal(err)
	}
	h.DNS = newDNS()
	h.DNS.serve(t, h, netip.AddrPortFrom(h.Addr(0), 53))
	return h
}

// hostRoots is Debian's bundle of the host's trusted roots.
const hostRoots = "/etc/ssl/certs/ca-certificates.crt"

// take locks the first free slot and removes what a test that crashed holding it left.
func (h *Host) take() error {
	for k := range Slots {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("cellbox-testhost-%d.lock", k)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return err
		}
		// A lock, not a file's existence: the kernel releases it when a test process dies.
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return fmt.Errorf("lock slot %d: %w", k, err)
		}
		h.slot, h.lock = k, f
		h.names.netns = fmt.Sprintf("cbth%d", k)
		h.names.hostLink = fmt.Sprintf("cbth%dh", k)
		h.clear()
		return nil
	}
	return fmt.Errorf("all %d slots are taken by other tests", Slots)
}

// clear removes the slot's veth pair and namespace, if any; errors mean there were none.
func (h *Host) clear() {
	// Deleting one end of a veth pair deletes both. The host's end goes first: a socket
	// still open in the namespace keeps the namespace (and an interface in it) alive after
	// its name is gone.
	exec.Command("ip", "link", "del", h.names.hostLink).Run()
	exec.Command("ip", "netns", "del", h.names.netns).Run()
}

func (h *Host) setUp() error {
	ns, hl := h.names.netns, h.names.hostLink
	host4, host6 := h.HostAddr(), h.hostAddr6()
	steps := [][]string{
		{"netns", "add", ns},
		{"link", "add", hl, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"addr", "add", host4.String() + "/29", "dev", hl},
		{"addr", "add", host6.String() + "/64", "dev", hl, "nodad"},
		{"link", "set", hl, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", h.Addr(0).String() + "/29", "dev", "eth0"},
		{"-n", ns, "addr", "add", h.Addr(1).String() + "/29", "dev", "eth0"},
		{"-n", ns, "addr", "add", h.Addr(2).String() + "/29", "dev", "eth0"},
		{"-n", ns, "addr", "add", h.Addr6().String() + "/64", "dev", "eth0", "nodad"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", host4.String()},
		{"-n", ns, "-6", "route", "add", "default", "via", host6.String()},
	}
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the namespace: %w", err)
	}
	h.nsfd = fd
	return nil
}

func (h *Host) remove() {
	if h.nsfd >= 0 {
		unix.Close(h.nsfd)
	}
	h.clear()
	h.lock.Close() // and with it the lock
}

// Slot is the Host's slot, 0 to Slots-1; no two live Hosts on this machine share one.
func (h *Host) Slot() int { return h.slot }

// Addr is one of the Host's IPv4 addresses: i is 0, 1 or 2 (203.0.113.8k+2, +3, +4 for slot k).
func (h *Host) Addr(i int) netip.Addr {
	if i < 0 || i > 2 {
		panic(fmt.Sprintf("testhost: Addr(%d): a Host has addresses 0 to 2", i))
	}
	return netip.AddrFrom4([4]byte{203, 0, 113, byte(8*h.slot + 2 + i)})
}

// Addr6 is the Host's IPv6 address, 2001:db8:cb:k::2 for slot k.
func (h *Host) Addr6() netip.Addr { return h.prefix6(2) }

// HostAddr is the host's end of the veth pair, 203.0.113.8k+1: an address of this machine
// itself, which the egress gateway must refuse to dial.
func (h *Host) HostAddr() netip.Addr {
	return netip.AddrFrom4([4]byte{203, 0, 113, byte(8*h.slot + 1)})
}

func (h *Host) hostAddr6() netip.Addr { return h.prefix6(1) }

// prefix6 is 2001:db8:cb:k::last.
func (h *Host) prefix6(last byte) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0xcb, 0, byte(h.slot), 15: last})
}

// DNSAddr is the Host's DNS server, "203.0.113.x:53", for the gateway's --egress-dns.
func (h *Host) DNSAddr() string { return netip.AddrPortFrom(h.Addr(0), 53).String() }

// CAFile is a PEM file holding only the test root. For a process that should trust it and
// nothing else, use RootsEnv: SSL_CERT_FILE alone is not enough.
func (h *Host) CAFile() string { return filepath.Join(h.dir, "ca.pem") }

// RootsEnv is the environment that makes a Go process on Linux (a cellbox server) trust the
// test root and no other: SSL_CERT_FILE=CAFile, and SSL_CERT_DIR an empty folder, since Go's
// crypto/x509 reads the folders (/etc/ssl/certs) besides the file SSL_CERT_FILE names.
func (h *Host) RootsEnv() []string {
	return []string{"SSL_CERT_FILE=" + h.CAFile(), "SSL_CERT_DIR=" + filepath.Join(h.dir, "no-certs")}
}

// BundleFile is a PEM file holding the host's roots (Debian's bundle, where there is one)
// and the test root.
func (h *Host) BundleFile() string { return filepath.Join(h.dir, "bundle.pem") }

// Shape caps what the Host sends (toward the host: downloads) at rate, e.g. "1gbit", with
// a token bucket on its end of the veth pair: a link like a server's uplink rather than
// memory speed. It needs tc (iproute2).
func (h *Host) Shape(t testing.TB, rate string) {
	t.Helper()
	args := []string{"netns", "exec", h.names.netns, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
		"rate", rate, "burst", "4mb", "latency", "100ms"}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("shape the test host's link: %v: %s", err, out)
	}
}

package guest

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// The egress proxy's guest half. The sandbox has no interface but loopback; the guest
// listens on it (Options.Egress) and hands each connection, as it is, to the server over a
// stream of the attached connection (guestproto.OpEgress). It parses nothing: the request
// (HTTP or SOCKS5), the policy and the dialing are the server's. Code in the sandbox finds
// the proxy through its environment (egressEnv) and trusts the session's certificate
// authority through a bundle the guest keeps (OpTrust).

// systemBundle is where Debian (and so the images) keep the system's roots.
const systemBundle = "/etc/ssl/certs/ca-certificates.crt"

// bundleName is the trust bundle's file in the kernel's private folder.
const bundleName = "ca-certificates.crt"

// drainAfterEOF is how long a client may go on sending after the server ended its side,
// before the guest closes the connection.
const drainAfterEOF = 5 * time.Second

// startEgress listens on addr and serves connections until the listener is closed.
func (s *server) startEgress(addr string) error {
	// Plain TCP: Go listens with MPTCP where the kernel has it, and CRIU (a checkpoint of
	// the sandbox) cannot save an MPTCP socket; the proxy is on loopback, where MPTCP
	// gains nothing.
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	if err := s.writeBundle(""); err != nil {
		ln.Close()
		return err
	}
	s.egressLn = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				s.log.Warn("egress proxy: accept", "error", err)
				time.Sleep(100 * time.Millisecond) // out of descriptors: don't spin
				continue
			}
			go s.egressConn(c)
		}
	}()
	return nil
}

// egressConn joins c to a new stream toward the server. With no server attached, c is
// closed: the client sees the proxy close the connection.
func (s *server) egressConn(c net.Conn) {
	defer c.Close()
	sess := s.mux.Load()
	if sess == nil {
		return
	}
	st, err := sess.OpenStream()
	if err != nil {
		return
	}
	defer st.Close()
	if err := guestproto.WriteJSON(st, guestproto.Request{Op: guestproto.OpEgress}); err != nil {
		return
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		pipe(st, c)
		st.Close() // the client's half-close, passed on
	}()
	pipe(c, st)
	// The server is done: pass that on, and give the client a moment to finish reading
	// and close; closing with its data unread would reset the connection.
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(drainAfterEOF))
	<-sent
}

// bundlePath is the trust bundle's path; "" without an egress proxy.
func (s *server) bundlePath() string {
	if s.egressLn == nil {
		return ""
	}
	return filepath.Join(s.tmp, bundleName)
}

// writeBundle writes the trust bundle: the system's roots, then ca (PEM) if any. It is
// replaced whole, so a client never reads half of it.
func (s *server) writeBundle(ca string) error {
	roots, err := os.ReadFile(systemBundle)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(roots) > 0 && roots[len(roots)-1] != '\n' {
		roots = append(roots, '\n')
	}
	data := append(roots, ca...)
	path := filepath.Join(s.tmp, bundleName)
	tmp := path + ".new"
	os.Remove(tmp)
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// trust answers OpTrust.
func (s *server) trust(ca string) guestproto.Message {
	if s.egressLn == nil {
		return errMsg(api.CodeFailedPrecondition, "this sandbox has no egress proxy")
	}
	if len(ca) > 64<<10 {
		return errMsg(api.CodeInvalidArgument, "the certificate authority is too large")
	}
	if err := s.writeBundle(ca); err != nil {
		s.log.Warn("write the trust bundle", "error", err)
		return errMsg(api.CodeUnavailable, "the guest could not write the trust bundle")
	}
	return guestproto.Message{OK: true}
}

// egressEnv is what code in the sandbox needs to use the proxy at addr and trust the
// bundle: the variables curl, pip, git, requests, httpx, urllib and Node read. Empty
// without a proxy.
func egressEnv(addr, bundle string) map[string]string {
	if addr == "" {
		return nil
	}
	proxy, socks := "http://"+addr, "socks5h://"+addr
	local := "localhost,127.0.0.1,::1"
	env := map[string]string{
		"HTTP_PROXY": proxy, "http_proxy": proxy, // curl reads only the lower-case one
		"HTTPS_PROXY": proxy, "https_proxy": proxy,
		"ALL_PROXY": socks, "all_proxy": socks,
		"NO_PROXY": local, "no_proxy": local,
		"NODE_USE_ENV_PROXY": "1", // Node's fetch and http honour the variables above
	}
	if bundle != "" {
		for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"} {
			env[k] = bundle
		}
	}
	return env
}

// setMux records the connection whose streams carry egress: the latest attached one.
func (s *server) setMux(sess *yamux.Session) { s.mux.Store(sess) }

// clearMux forgets sess if it is still the current one.
func (s *server) clearMux(sess *yamux.Session) { s.mux.CompareAndSwap(sess, nil) }

// pipe copies src to dst through a buffer of 256 KiB (not the 32 KiB of dst's ReadFrom):
// fewer reads, writes and yamux frames per byte.
func pipe(dst io.Writer, src io.Reader) {
	b := make([]byte, 256<<10)
	io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, b)
}

package egress

import (
	"context"
	"encoding/binary"
	"io"
	"net/netip"
	"time"
)

// SOCKS5 (RFC 1928), CONNECT only, without authentication: the sandbox's proxy is its
// own, and the session is known by the channel the connection came over.

const (
	socksVersion = 0x05
	socksNoAuth  = 0x00
	socksNoWay   = 0xff

	socksConnect = 0x01

	socksIPv4   = 0x01
	socksDomain = 0x03
	socksIPv6   = 0x04

	socksOK            = 0x00
	socksFailure       = 0x01
	socksNotAllowed    = 0x02
	socksUnreachable   = 0x04
	socksTTLExpired    = 0x06
	socksNoCommand     = 0x07
	socksNoAddressType = 0x08
)

// serveSOCKS reads one SOCKS5 request from cl and runs its tunnel.
func (g *Gateway) serveSOCKS(s *sess, cl *client, over bool) {
	cl.SetReadDeadline(deadline(g.cfg.HeaderTimeout))
	var hdr [2]byte
	if _, err := io.ReadFull(cl, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(cl, methods); err != nil {
		return
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == socksNoAuth
	}
	if !noAuth {
		cl.Write([]byte{socksVersion, socksNoWay})
		return
	}
	if _, err := cl.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return
	}
	var req [4]byte
	if _, err := io.ReadFull(cl, req[:]); err != nil {
		return
	}
	if req[0] != socksVersion {
		return
	}
	var host Host
	switch req[3] {
	case socksIPv4:
		var a [4]byte
		if _, err := io.ReadFull(cl, a[:]); err != nil {
			return
		}
		host = Host{Addr: netip.AddrFrom4(a)}
	case socksIPv6:
		var a [16]byte
		if _, err := io.ReadFull(cl, a[:]); err != nil {
			return
		}
		host = Host{Addr: netip.AddrFrom16(a).Unmap()}
	case socksDomain:
		var n [1]byte
		if _, err := io.ReadFull(cl, n[:]); err != nil {
			return
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(cl, name); err != nil {
			return
		}
		h, err := ParseHost(string(name))
		if err != nil {
			socksReply(cl, socksNotAllowed)
			return
		}
		host = h
	default:
		socksReply(cl, socksNoAddressType)
		return
	}
	var port [2]byte
	if _, err := io.ReadFull(cl, port[:]); err != nil {
		return
	}
	cl.SetReadDeadline(time.Time{})
	if req[1] != socksConnect {
		socksReply(cl, socksNoCommand) // no BIND, no UDP ASSOCIATE: TCP connections only
		return
	}
	if over {
		g.refuseOver(s, host, int(binary.BigEndian.Uint16(port[:])), "socks5")
		socksReply(cl, socksFailure)
		return
	}
	ctx := context.Background()
	f, up, fail := g.open(ctx, s, host, int(binary.BigEndian.Uint16(port[:])), "socks5")
	if fail != nil {
		code := map[failKind]byte{failRefused: socksNotAllowed, failLimit: socksNotAllowed,
			failUnreachable: socksUnreachable, failTimeout: socksTTLExpired}[fail.kind]
		socksReply(cl, code)
		return
	}
	defer f.finish()
	f.onKill(func() { cl.Close() })
	if err := socksReply(cl, socksOK); err != nil {
		return
	}
	g.tunnel(ctx, f, cl, up)
}

// socksReply answers a request with code; the bound address is not told (0.0.0.0:0).
func socksReply(w io.Writer, code byte) error {
	_, err := w.Write([]byte{socksVersion, code, 0, socksIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

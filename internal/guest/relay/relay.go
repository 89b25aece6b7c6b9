// Package relay is `cellbox guest --connect`: it joins a process's stdin and stdout to the
// Unix socket of a guest that listens in the same sandbox, for a backend that can start a
// process there (the engine's exec) but cannot reach the socket from outside. The backend
// reads ExitNotListening from the exec's status, so both sides share this leaf package and
// the backend links none of the guest.
//
// Not for: the guest protocol that crosses the relay (package guestproto).
package relay

import (
	"errors"
	"io"
	"net"
)

// ExitNotListening is the exit status of `cellbox guest --connect` when no guest listens
// at the path (yet): the caller may try again.
const ExitNotListening = 3

// Connect joins r and w to the Unix socket at path until the guest there closes the
// connection: a relay for a backend that can start a process in the sandbox (the engine's
// exec) but cannot reach the socket from outside. What crosses it is the guest protocol,
// attach handshake first, so the relay itself proves nothing and needs no token.
func Connect(path string, r io.Reader, w io.Writer) error {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() {
		io.Copy(conn, r)
		// The server closed its side: let the guest see the end of the stream.
		conn.(*net.UnixConn).CloseWrite()
	}()
	_, err = io.Copy(w, conn)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

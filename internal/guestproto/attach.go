package guestproto

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// The attach handshake opens every connection to a guest that listens on a socket (a
// sandbox that outlives the server process, see `cellbox guest --listen`): the server
// writes one line, the guest answers one line, then both start the multiplexer.
//
//	server → guest  {"op":"attach","version":4,"token":"<hex>"}\n
//	guest → server  {"ok":true}\n   or   {"error":{"code":...,"message":...}}\n
//
// The token is a secret the backend gave the guest when it started the sandbox; only the
// host's root can read it. The guest drops a connection whose first line is anything else.
// Both sides read the line a byte at a time, so not one byte of the multiplexer's is
// consumed by it.

// OpAttach is the only request of the attach handshake.
const OpAttach = "attach"

// maxAttachLine caps the handshake's lines.
const maxAttachLine = 1024

// Attach is the server's handshake line.
type Attach struct {
	Op      string `json:"op"`
	Version int    `json:"version"`
	Token   string `json:"token"`
}

// ErrBadAttach is a handshake the guest refused: wrong token, version or shape.
var ErrBadAttach = errors.New("attach refused")

// ClientAttach writes the server's side of the handshake on conn and reads the guest's
// answer. The caller sets conn's deadline.
func ClientAttach(conn io.ReadWriter, token string) error {
	if err := WriteJSON(conn, Attach{Op: OpAttach, Version: Version, Token: token}); err != nil {
		return fmt.Errorf("attach to guest: %w", err)
	}
	line, err := readLineBytewise(conn, maxAttachLine)
	if err != nil {
		return fmt.Errorf("attach to guest: %w: %w", err, errdefs.ErrUnavailable)
	}
	var m Message
	if err := json.Unmarshal(line, &m); err != nil {
		return fmt.Errorf("attach to guest: undecodable answer: %w", errdefs.ErrUnavailable)
	}
	if m.Error != nil {
		return fmt.Errorf("attach to guest: %w: %s: %w", ErrBadAttach, clip(m.Error.Message), errdefs.ErrUnavailable)
	}
	if !m.OK {
		return fmt.Errorf("attach to guest: no ok in answer: %w", errdefs.ErrUnavailable)
	}
	return nil
}

// ServerAttach reads the server's handshake line from conn and checks it against token
// (compared in constant time). It answers ok, or an error and returns ErrBadAttach; the
// caller then closes conn. The caller sets conn's deadline.
func ServerAttach(conn io.ReadWriter, token string) error {
	line, err := readLineBytewise(conn, maxAttachLine)
	if err != nil {
		return fmt.Errorf("read attach line: %w", err)
	}
	a, err := ParseAttach(line)
	if err == nil && subtle.ConstantTimeCompare([]byte(a.Token), []byte(token)) != 1 {
		err = fmt.Errorf("%w: wrong token", ErrBadAttach)
	}
	if err != nil {
		WriteJSON(conn, Message{Error: &Error{Code: api.CodeUnauthenticated, Message: err.Error()}})
		return err
	}
	return WriteJSON(conn, Message{OK: true})
}

// ParseAttach decodes and checks a handshake line (not the token's value).
func ParseAttach(line []byte) (Attach, error) {
	var a Attach
	if err := json.Unmarshal(line, &a); err != nil {
		return Attach{}, fmt.Errorf("%w: not a JSON object", ErrBadAttach)
	}
	switch {
	case a.Op != OpAttach:
		return Attach{}, fmt.Errorf("%w: op %q, want %q", ErrBadAttach, clip(a.Op), OpAttach)
	case a.Version != Version:
		return Attach{}, fmt.Errorf("%w: server speaks protocol version %d, guest %d", ErrBadAttach, a.Version, Version)
	case a.Token == "":
		return Attach{}, fmt.Errorf("%w: no token", ErrBadAttach)
	}
	return a, nil
}

// readLineBytewise reads up to and without '\n', at most max bytes, one byte per read.
func readLineBytewise(r io.Reader, max int) ([]byte, error) {
	var line []byte
	var b [1]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			if errors.Is(err, io.EOF) && len(line) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if b[0] == '\n' {
			return line, nil
		}
		if len(line) == max {
			return nil, ErrMessageTooLarge
		}
		line = append(line, b[0])
	}
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

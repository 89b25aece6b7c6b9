package guestproto

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
)

// attachPair runs ServerAttach (the guest's side, with token want) against ClientAttach
// (the server's side, sending token) over a real in-memory connection.
func attachPair(t *testing.T, want, token string) (clientErr, serverErr error) {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		err := ServerAttach(s, want)
		s.Close()
		done <- err
	}()
	clientErr = ClientAttach(c, token)
	return clientErr, <-done
}

func TestAttach(t *testing.T) {
	if cerr, serr := attachPair(t, "secret", "secret"); cerr != nil || serr != nil {
		t.Fatalf("right token: client %v, guest %v", cerr, serr)
	}
	cerr, serr := attachPair(t, "secret", "guess")
	if !errors.Is(serr, ErrBadAttach) || !errors.Is(cerr, ErrBadAttach) || !strings.Contains(cerr.Error(), "wrong token") {
		t.Fatalf("wrong token: client %v, guest %v; want both refused", cerr, serr)
	}
	if strings.Contains(cerr.Error(), "secret") {
		t.Errorf("the refusal shows the token: %v", cerr)
	}
}

// versioned puts this protocol's version for @V and the one before for @OLD.
func versioned(s string) string {
	return strings.NewReplacer("@V", strconv.Itoa(Version), "@OLD", strconv.Itoa(Version-1)).Replace(s)
}

// The guest refuses any first line but a well-formed attach, and never reads past it.
func TestServerAttachRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"empty", "\n"},
		{"not json", "GET / HTTP/1.1\r\n"},
		{"other op", `{"op":"hello","version":@V,"token":"secret"}` + "\n"},
		{"old version", `{"op":"attach","version":@OLD,"token":"secret"}` + "\n"},
		{"no token", `{"op":"attach","version":@V}` + "\n"},
		{"wrong token", `{"op":"attach","version":@V,"token":"secreT"}` + "\n"},
		{"token prefix", `{"op":"attach","version":@V,"token":"secre"}` + "\n"},
		{"too long", `{"op":"attach","version":@V,"token":"` + strings.Repeat("a", 2000) + `"}` + "\n"},
		{"no newline", `{"op":"attach","version":@V,"token":"secret"}`},
		{"nothing", ""},
	} {
		tc.in = versioned(tc.in)
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := ServerAttach(struct {
				io.Reader
				io.Writer
			}{strings.NewReader(tc.in), &out}, "secret")
			if err == nil {
				t.Fatalf("accepted %q", tc.in)
			}
			if strings.Contains(out.String(), `"ok"`) {
				t.Errorf("answered ok: %s", out.String())
			}
		})
	}
	// A good line followed by more bytes: those stay unread for the multiplexer.
	r := strings.NewReader(versioned(`{"op":"attach","version":@V,"token":"secret"}` + "\nYAMUX"))
	var out bytes.Buffer
	if err := ServerAttach(struct {
		io.Reader
		io.Writer
	}{r, &out}, "secret"); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "YAMUX" {
		t.Errorf("left %q unread, want YAMUX", rest)
	}
	if out.String() != `{"ok":true}`+"\n" {
		t.Errorf("answer %q", out.String())
	}
}

// FuzzServerAttach: whatever a connecting process sends, the guest accepts only the exact
// token, and never reads more than one capped line.
func FuzzServerAttach(f *testing.F) {
	f.Add([]byte(versioned(`{"op":"attach","version":@V,"token":"secret"}` + "\n")))
	f.Add([]byte(versioned(`{"op":"attach","version":@V,"token":"secret","token":"x"}` + "\n")))
	f.Add([]byte(versioned(`{"op":"attach","version":@V,"token":"secret\u0000"}` + "\n")))
	f.Add([]byte("\x00\x00\x00\x0c"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		var out bytes.Buffer
		err := ServerAttach(struct {
			io.Reader
			io.Writer
		}{r, &out}, "secret")
		read := len(in) - r.Len()
		if read > maxAttachLine+1 {
			t.Fatalf("read %d bytes", read)
		}
		if err == nil {
			a, perr := ParseAttach(in[:read-1])
			if perr != nil || a.Token != "secret" {
				t.Fatalf("accepted %q", in[:read])
			}
		}
	})
}

package links

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A signature holds for its link alone, until it expires, with its tenant's key, across a
// restart, and no longer once the key is rotated.
func TestSignCheck(t *testing.T) {
	dir := t.TempDir()
	s := New(dir)
	now := time.Unix(1_800_000_000, 0)
	l := Link{Method: Get, Session: "0123456789abcdef0123456789abcdef", Path: "plots/a.png", Expires: now.Add(time.Hour)}
	sig, err := s.Sign("alice", l)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check("alice", l, sig, now); err != nil {
		t.Fatalf("the link as signed: %v", err)
	}
	changed := map[string]Link{
		"method":  {Put, l.Session, l.Path, l.Expires},
		"session": {l.Method, "0123456789abcdef0123456789abcdee", l.Path, l.Expires},
		"path":    {l.Method, l.Session, "plots/b.png", l.Expires},
		"parent":  {l.Method, l.Session, "plots", l.Expires},
		"expiry":  {l.Method, l.Session, l.Path, l.Expires.Add(time.Second)},
	}
	for what, other := range changed {
		if err := s.Check("alice", other, sig, now); !errors.Is(err, ErrSignature) {
			t.Errorf("another %s: %v", what, err)
		}
	}
	for _, bad := range []string{"", "x", sig[:len(sig)-1], strings.Repeat("A", len(sig)), sig + "A"} {
		if err := s.Check("alice", l, bad, now); !errors.Is(err, ErrSignature) {
			t.Errorf("signature %q: %v", bad, err)
		}
	}
	if err := s.Check("bob", l, sig, now); !errors.Is(err, ErrSignature) {
		t.Errorf("bob's key: %v", err)
	}
	if err := s.Check("alice", l, sig, l.Expires); !errors.Is(err, ErrExpired) {
		t.Errorf("at its expiry: %v", err)
	}
	// The key outlives the Signer (a server restart).
	if err := New(dir).Check("alice", l, sig, now); err != nil {
		t.Errorf("after a restart: %v", err)
	}
	if err := s.Rotate("alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.Check("alice", l, sig, now); !errors.Is(err, ErrSignature) {
		t.Errorf("after a rotation: %v", err)
	}
	if err := New(dir).Check("alice", l, sig, now); !errors.Is(err, ErrSignature) {
		t.Errorf("after a rotation and a restart: %v", err)
	}
	fresh, _ := s.Sign("alice", l)
	if err := New(dir).Check("alice", l, fresh, now); err != nil {
		t.Errorf("a link signed after the rotation: %v", err)
	}
}

// Without a dir, keys live as long as the Signer.
func TestInMemory(t *testing.T) {
	s := New("")
	l := Link{Method: Put, Session: "s", Path: "a", Expires: time.Now().Add(time.Minute)}
	sig, err := s.Sign("", l)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check("", l, sig, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := New("").Check("", l, sig, time.Now()); !errors.Is(err, ErrSignature) {
		t.Errorf("another Signer: %v", err)
	}
}

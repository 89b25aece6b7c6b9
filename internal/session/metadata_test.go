package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// TestMetadata: what a session is created with comes back whole from Create, Get, List
// and its record; a caller changing its map afterwards changes nothing.
func TestMetadata(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	md := map[string]string{"user": "ada", "run": "7", "ünï cødé key": "ünï cødé value", "empty": ""}
	req := api.CreateSessionRequest{Metadata: maps.Clone(md)}
	s, err := m.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	req.Metadata["user"] = "mallory"
	if !maps.Equal(s.Metadata, md) {
		t.Errorf("create: %v, want %v", s.Metadata, md)
	}
	got, err := m.Get(ctx, s.ID)
	if err != nil || !maps.Equal(got.Metadata, md) {
		t.Errorf("get: %v, %v; want %v", got, err, md)
	}
	got.Metadata["user"] = "mallory"
	if l := m.List(ctx); len(l) != 1 || !maps.Equal(l[0].Metadata, md) {
		t.Errorf("list: %+v; want %v", l, md)
	}
	var rec record
	sess, _ := m.lookup(ctx, s.ID)
	b, _ := json.Marshal(sess.recordLocked())
	if err := json.Unmarshal(b, &rec); err != nil || !maps.Equal(rec.Metadata, md) {
		t.Errorf("record: %s, %v", b, err)
	}

	plain, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil || plain.Metadata != nil {
		t.Fatalf("a session without metadata: %+v, %v", plain, err)
	}
	if b, _ := json.Marshal(plain); strings.Contains(string(b), "metadata") {
		t.Errorf("no metadata is shown as %s", b)
	}
}

// TestAttackMetadata: metadata past the limits is refused with invalid_argument and a
// message saying what to change, before any sandbox starts; what is at the limits passes.
func TestAttackMetadata(t *testing.T) {
	many := func(n, valBytes int) map[string]string {
		md := map[string]string{}
		for i := range n {
			md[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", valBytes)
		}
		return md
	}
	tests := []struct {
		name string
		md   map[string]string
		want string // in the error; "" for metadata that passes
	}{
		{"65 entries", many(65, 1), "metadata has 65 entries; at most 64"},
		{"huge value", map[string]string{"a": strings.Repeat("x", 64<<20)}, `metadata "a" is 67108864 bytes; at most 1024`},
		{"huge key", map[string]string{strings.Repeat("k", 1<<20): "x"}, `metadata key "kkkk`},
		{"key of 257 bytes", map[string]string{strings.Repeat("k", 257): "x"}, "is 257 bytes; at most 256"},
		{"value of 1025 bytes", map[string]string{"a": strings.Repeat("x", 1025)}, "is 1025 bytes; at most 1024"},
		{"empty key", map[string]string{"": "x"}, "empty key"},
		{"NUL in key", map[string]string{"a\x00b": "x"}, "NUL byte"},
		{"NUL in value", map[string]string{"a": "x\x00"}, "NUL byte"},
		{"not UTF-8", map[string]string{"a": "\xff\xfe"}, "not UTF-8"},
		{"over 16 KiB in all", many(17, 1000), "at most 16384"},
		{"at the limits", map[string]string{strings.Repeat("k", 256): strings.Repeat("v", 1024)}, ""},
		{"64 entries in 16 KiB", many(64, 250), ""},
	}
	for _, tt := range tests {
		t.Run("attack/"+tt.name, func(t *testing.T) {
			err := checkMetadata(tt.md)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v; want invalid argument saying %q", err, tt.want)
			}
			if len(err.Error()) > 300 {
				t.Errorf("the message quotes the input at length: %d bytes", len(err.Error()))
			}
		})
	}

	// Through Create: refused before a sandbox starts.
	m := newManager(t, nil)
	_, err := m.Create(context.Background(), api.CreateSessionRequest{Metadata: map[string]string{"a": "\x00"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("create: %v, want invalid argument", err)
	}
	if n, _ := m.Stats(); n != 0 {
		t.Errorf("%d sessions after a refused create", n)
	}
}

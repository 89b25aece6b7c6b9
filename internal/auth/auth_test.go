package auth

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	keyA = "cbx_0123456789abcdef0123456789abcdef01234567"
	keyB = "e2b_89abcdef0123456789abcdef0123456789abcdef"
	keyC = "a-long-enough-key!"
	keyD = "0123456789abcdef" // could pass for a name
)

func TestParseFile(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		names map[string]string // key → tenant
		err   string            // what the error says; "" when none is expected
	}{
		{"names and comments", "# the team\n" + keyA + " alice\n\n   \n" + keyB + "\tbob # the E2B key\n",
			map[string]string{keyA: "alice", keyB: "bob"}, ""},
		{"derived name", keyC + "\n", map[string]string{keyC: derivedName(keyC)}, ""},
		{"CRLF", keyA + " alice\r\n" + keyB + "\r\n", map[string]string{keyA: "alice", keyB: derivedName(keyB)}, ""},
		{"BOM", "\xef\xbb\xbf" + keyA + " alice\n", map[string]string{keyA: "alice"}, ""},
		{"no keys", "# nothing yet\n\n", nil, ""},
		{"short key", keyA + "\nshort-key\n", nil, "line 2 of keys: a key has 16 to 256 characters; this one has 9"},
		{"control character in key", keyA[:10] + "\x01" + keyA[10:] + " alice", nil, "line 1 of keys: a key is printable ASCII"},
		{"not ASCII", "clé-de-seize-octets!\n", nil, "line 1 of keys: a key is printable ASCII"},
		{"same key twice", keyA + " alice\n" + keyB + " bob\n" + keyA + " carol\n", nil, "line 3 of keys: the same key as line 1 of keys"},
		{"same name twice", keyA + " alice\n# x\n" + keyB + " alice\n", nil, "line 3 of keys: the same name as line 1 of keys"},
		{"two keys on a line", keyA + " " + keyB + "\n", nil, "line 1 of keys: a name is 1 to 32"},
		{"a key as a name", keyD + " " + keyD + "\n", nil, "line 1 of keys: the name is a key"},
		{"another key as a name", keyA + " " + keyD + "\n" + keyD + " carol\n", nil, "line 1 of keys: the name is a key"},
		{"three fields", keyA + " alice bob\n", nil, "line 1 of keys: give a key and at most one name"},
		{"bad name", keyA + " al/ice\n", nil, "line 1 of keys: a name is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, err := parseFile([]byte(tt.file), "keys")
			var k *Keys
			if err == nil {
				k, err = build(es)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				for _, key := range []string{keyA, keyB, keyC, "short-key"} {
					if strings.Contains(err.Error(), key) {
						t.Errorf("the error quotes a key: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.Len() != len(tt.names) {
				t.Errorf("%d keys, want %d", k.Len(), len(tt.names))
			}
			for key, name := range tt.names {
				if got, ok := k.Lookup(key); !ok || got != name {
					t.Errorf("Lookup = %q, %v; want %q", got, ok, name)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(file, []byte(keyA+" alice\n"), 0o600)
	k, err := Load(" "+keyB+", ,"+keyC+" ", file)
	if err != nil {
		t.Fatal(err)
	}
	for key, name := range map[string]string{keyA: "alice", keyB: derivedName(keyB), keyC: derivedName(keyC)} {
		if got, ok := k.Lookup(key); !ok || got != name {
			t.Errorf("Lookup = %q, %v; want %q", got, ok, name)
		}
	}
	if k, err := Load("", ""); k != nil || err != nil || k.Len() != 0 {
		t.Errorf("no keys: %v, %v", k, err)
	}
	if _, ok := (*Keys)(nil).Lookup(keyA); ok {
		t.Error("nil Keys found a key")
	}
	if _, err := Load(keyA, file); err == nil || !strings.Contains(err.Error(), "line 1 of "+file+": the same key as item 1 of CELLBOX_API_KEYS") {
		t.Errorf("a key in both: %v", err)
	}
	if _, err := Load(keyB+",tooshort", ""); err == nil || !strings.Contains(err.Error(), "item 2 of CELLBOX_API_KEYS: a key has 16") || strings.Contains(err.Error(), "tooshort") {
		t.Errorf("short key in the list: %v", err)
	}
	if _, err := Load("", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file is no error")
	}
}

// TestAttackKeyLookup presents keys that are wrong in every way that matters: a prefix of a
// key, a key with a byte changed, another case, a name, an empty key. And it checks that a
// lookup compares the presented key with every configured one, not stopping at a match,
// so its time does not tell which key matched.
func TestAttackKeyLookup(t *testing.T) {
	k, err := Load(keyA+","+keyB+","+keyC, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", keyA[:len(keyA)-1], keyA + "0", strings.ToUpper(keyA), keyB[:len(keyB)-1] + "0", derivedName(keyA), " " + keyC} {
		if name, ok := k.Lookup(bad); ok {
			t.Errorf("Lookup(%q) found tenant %q", bad, name)
		}
	}
	calls := 0
	compare = func(x, y []byte) int { calls++; return cmp(x, y) }
	defer func() { compare = cmp }()
	for _, key := range []string{keyA, keyC, "wrong"} {
		calls = 0
		k.Lookup(key)
		if calls != 3 {
			t.Errorf("a lookup compared %d keys, want all 3", calls)
		}
	}
}

var cmp = compare

func TestNewKey(t *testing.T) {
	shape := regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)
	a, b := NewKey("e2b_"), NewKey("e2b_")
	if !shape.MatchString(a) || a == b {
		t.Errorf("NewKey: %q, %q", a, b)
	}
	if _, err := Load(a+","+NewKey("cbx_"), ""); err != nil {
		t.Errorf("new keys refused: %v", err)
	}
}

// FuzzParseKeys: the file parser never panics, every key it accepts is found again under
// its name, and no error quotes what could be a key.
func FuzzParseKeys(f *testing.F) {
	for _, s := range []string{
		keyA + " alice\n" + keyB + "\r\n# c\n",
		"\xef\xbb\xbf" + keyC + " x # y",
		keyA + " a\n" + keyA + " b\n",
		keyA + " a\n" + keyB + " a\n",
		"short\n",
		keyA + " " + keyB,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		es, err := parseFile([]byte(data), "keys")
		var k *Keys
		if err == nil {
			k, err = build(es)
		}
		if err != nil {
			for _, w := range strings.FieldsFunc(data, func(r rune) bool { return r <= ' ' || r == ',' || r == '#' }) {
				if len(w) >= MinKeyLen && strings.Contains(err.Error(), w) {
					t.Fatalf("error %q quotes %q of the input", err, w)
				}
			}
			return
		}
		if k.Len() != len(es) {
			t.Fatalf("%d entries, %d keys", len(es), k.Len())
		}
		for _, e := range es {
			if checkKey(e.key) != nil || !ValidName(e.name) || !strings.Contains(data, e.key) {
				t.Fatalf("accepted key %q name %q", e.key, e.name)
			}
			if _, ok := k.Lookup(e.name); ok {
				t.Fatalf("accepted a key as the name %q", e.name)
			}
			if name, ok := k.Lookup(e.key); !ok || name != e.name {
				t.Fatalf("Lookup(%q) = %q, %v; want %q", e.key, name, ok, e.name)
			}
		}
	})
}

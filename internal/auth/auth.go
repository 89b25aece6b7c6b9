// Package auth holds the API keys of a cellbox server: it reads them from an --api-keys file
// and from CELLBOX_API_KEYS, and finds the tenant a presented key belongs to, in constant
// time. A tenant is a name: the one the operator wrote next to the key, or one derived from
// a hash of the key. Keys themselves never appear in a name, an error or a log line.
//
// Not for: HTTP (package httpapi reads the headers), or what a tenant may do (package
// session keeps each tenant to its own sessions and caps).
package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Bounds of a key and of a tenant's name.
const (
	MinKeyLen  = 16
	maxKeyLen  = 256
	MaxNameLen = 32
)

// Keys is a set of API keys, each naming its tenant. A nil *Keys holds none.
type Keys struct {
	digests [][sha256.Size]byte // SHA-256 of each key: what Lookup compares
	names   []string
}

// entry is one key and its tenant, as read.
type entry struct {
	key, name string
	where     string // "line 3 of FILE", "item 2 of CELLBOX_API_KEYS"
}

// Load reads the keys of list (comma-separated, as in CELLBOX_API_KEYS) and of the file
// at path ("" for none). It returns nil when neither holds a key.
func Load(list, path string) (*Keys, error) {
	es, err := parseList(list)
	if err != nil {
		return nil, err
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read the keys file: %w", err)
		}
		fes, err := parseFile(data, path)
		if err != nil {
			return nil, err
		}
		es = append(es, fes...)
	}
	return build(es)
}

// parseList reads comma-separated keys; blanks around them and empty items are ignored.
func parseList(list string) ([]entry, error) {
	var es []entry
	for i, k := range strings.Split(list, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		where := fmt.Sprintf("item %d of CELLBOX_API_KEYS", i+1)
		if err := checkKey(k); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		es = append(es, entry{key: k, name: derivedName(k), where: where})
	}
	return es, nil
}

// parseFile reads a keys file: one key a line, optionally followed by the tenant's name;
// blank lines and everything from a word starting with # are ignored. A UTF-8 BOM and CRLF
// line ends are accepted.
func parseFile(data []byte, path string) ([]entry, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	var es []entry
	for i, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		for j, f := range fields {
			if strings.HasPrefix(f, "#") {
				fields = fields[:j]
				break
			}
		}
		if len(fields) == 0 {
			continue
		}
		where := fmt.Sprintf("line %d of %s", i+1, path)
		if len(fields) > 2 {
			return nil, fmt.Errorf("%s: give a key and at most one name after it", where)
		}
		if err := checkKey(fields[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		e := entry{key: fields[0], name: derivedName(fields[0]), where: where}
		if len(fields) == 2 {
			if !ValidName(fields[1]) {
				return nil, fmt.Errorf("%s: a name is 1 to %d letters, digits, '.', '_' or '-'", where, MaxNameLen)
			}
			e.name = fields[1]
		}
		es = append(es, e)
	}
	return es, nil
}

// checkKey says what is wrong with a key, without quoting it.
func checkKey(k string) error {
	if len(k) < MinKeyLen || len(k) > maxKeyLen {
		return fmt.Errorf("a key has %d to %d characters; this one has %d (make one with: cellbox keygen)", MinKeyLen, maxKeyLen, len(k))
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] > '~' {
			return errors.New("a key is printable ASCII without spaces (make one with: cellbox keygen)")
		}
	}
	return nil
}

// ValidName reports whether n is a tenant's name: 1 to MaxNameLen letters, digits, '.', '_'
// or '-'.
func ValidName(n string) bool {
	if n == "" || len(n) > MaxNameLen {
		return false
	}
	for _, c := range n {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// derivedName is the name of a key given without one: a short hash, never the key.
func derivedName(k string) string {
	d := sha256.Sum256([]byte(k))
	return "key-" + hex.EncodeToString(d[:4])
}

// build refuses a key given twice and a name given to two keys, naming where.
func build(es []entry) (*Keys, error) {
	if len(es) == 0 {
		return nil, nil
	}
	k := &Keys{}
	keyAt := map[[sha256.Size]byte]string{}
	nameAt := map[string]string{}
	for _, e := range es {
		d := sha256.Sum256([]byte(e.key))
		if at, ok := keyAt[d]; ok {
			return nil, fmt.Errorf("%s: the same key as %s", e.where, at)
		}
		if at, ok := nameAt[e.name]; ok {
			return nil, fmt.Errorf("%s: the same name as %s; each key needs its own", e.where, at)
		}
		keyAt[d], nameAt[e.name] = e.where, e.where
		k.digests = append(k.digests, d)
		k.names = append(k.names, e.name)
	}
	for _, e := range es { // "KEY1 KEY2" on one line would log KEY2 as a name
		if _, ok := keyAt[sha256.Sum256([]byte(e.name))]; ok {
			return nil, fmt.Errorf("%s: the name is a key; write one key a line", e.where)
		}
	}
	return k, nil
}

// Len is the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.digests)
}

// Has reports whether a key names tenant.
func (k *Keys) Has(tenant string) bool {
	return k != nil && slices.Contains(k.names, tenant)
}

// compare is subtle.ConstantTimeCompare; a test counts its calls.
var compare = subtle.ConstantTimeCompare

// Lookup returns the tenant of key. It compares the key's SHA-256 digest with every
// configured key's, without stopping at a match, so its time does not depend on which key
// (if any) matches or on how much of one does.
func (k *Keys) Lookup(key string) (tenant string, ok bool) {
	if k == nil {
		return "", false
	}
	d := sha256.Sum256([]byte(key))
	found := -1
	for i := range k.digests {
		found = subtle.ConstantTimeSelect(compare(d[:], k.digests[i][:]), i, found)
	}
	if found < 0 {
		return "", false
	}
	return k.names[found], true
}

// NewKey returns a new random key: prefix and 40 lowercase hex digits (160 bits).
func NewKey(prefix string) string {
	b := make([]byte, 20)
	rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return prefix + hex.EncodeToString(b)
}

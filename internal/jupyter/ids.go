package jupyter

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"fmt"
	"strings"
)

// Kernel ids are session ids sealed with a block cipher: 16 bytes, written as a UUID, as
// Jupyter's clients expect. A session id is 24 hex digits, or in a cluster 32 (the node's
// tag first); the block is the id's bytes, after four zero bytes for the shorter. AES under
// the server's key (Options.IDKey) is a permutation of blocks: no table to keep, ids
// survive restarts and moves between nodes (which share the key), and a kernel id cannot be
// told from a session id (seen in file links and E2B hosts) without the key, nor the other
// way round. Anyone may hold a session id; only its tenant is shown its kernel id.
type idCodec struct{ block cipher.Block }

func newIDCodec(key []byte) (*idCodec, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("jupyter kernel id key: %w", err)
	}
	return &idCodec{block: b}, nil
}

// kernel returns session id's kernel id; false for an id of another form (none a server
// makes).
func (c *idCodec) kernel(sid string) (string, bool) {
	raw, err := hex.DecodeString(sid)
	if err != nil || sid != strings.ToLower(sid) {
		return "", false
	}
	var b [16]byte
	switch len(raw) {
	case 12:
		copy(b[4:], raw)
	case 16:
		copy(b[:], raw)
		if b[0]|b[1]|b[2]|b[3] == 0 {
			return "", false // would read back as a short id
		}
	default:
		return "", false
	}
	c.block.Encrypt(b[:], b[:])
	return formatUUID(b), true
}

// session returns the session id kernel id kid seals; false when kid is not a UUID.
func (c *idCodec) session(kid string) (string, bool) {
	if len(kid) != 36 || kid[8] != '-' || kid[13] != '-' || kid[18] != '-' || kid[23] != '-' {
		return "", false
	}
	raw, err := hex.DecodeString(strings.ReplaceAll(kid, "-", ""))
	if err != nil || len(raw) != 16 {
		return "", false
	}
	var b [16]byte
	c.block.Decrypt(b[:], raw)
	if b[0]|b[1]|b[2]|b[3] == 0 {
		return hex.EncodeToString(b[4:]), true
	}
	return hex.EncodeToString(b[:]), true
}

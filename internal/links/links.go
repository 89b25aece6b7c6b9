// Package links signs and checks URLs to one file of a session's workspace, for one method
// (GET to download, PUT to upload) until an expiry: a link a person or another program can
// use without an API key. Each tenant signs with a key of its own, kept in the state dir,
// which the tenant can replace (Rotate): every link it signed before then stops working.
// Not for: serving the files (package httpapi), E2B's own signatures (package e2b).
package links

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/statefile"
)

// Methods a link can be for.
const (
	Get = "GET" // download; HEAD too
	Put = "PUT" // upload
)

// Bounds of a link's life.
const (
	DefaultTTL = time.Hour
	MaxTTL     = 7 * 24 * time.Hour
)

// Signer keeps the tenants' keys: in memory, and in dir when it is not "" (one file a
// tenant, named by a hash of it), so links outlive a restart.
type Signer struct {
	dir  string
	mu   sync.Mutex
	keys map[string][]byte
}

// New returns a Signer keeping its keys in dir ("": in memory only).
func New(dir string) *Signer {
	return &Signer{dir: dir, keys: map[string][]byte{}}
}

// Link is what a signature covers: one method on one file of one session, until Expires.
type Link struct {
	Method  string
	Session string
	Path    string // clean, relative to the workspace (workspace.Clean)
	Expires time.Time
}

// message is the signed text: the fields, each on its own line, none of which holds one.
func (l Link) message() []byte {
	return []byte("cellbox link v1\n" + l.Method + "\n" + l.Session + "\n" + l.Path + "\n" + strconv.FormatInt(l.Expires.Unix(), 10))
}

// Sign returns the signature of l with tenant's key, base64url without padding.
func (s *Signer) Sign(tenant string, l Link) (string, error) {
	key, err := s.key(tenant, false)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(mac(key, l)), nil
}

func mac(key []byte, l Link) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(l.message())
	return h.Sum(nil)
}

// Errors of Check, each with errdefs' kind.
var (
	ErrExpired   = fmt.Errorf("the link has expired: ask for a new one: %w", errdefs.ErrPermissionDenied)
	ErrSignature = fmt.Errorf("the link's signature does not match: the link was changed, is for another file or method, or its key was rotated since: %w", errdefs.ErrPermissionDenied)
)

// WellFormed says whether sig has the shape of a signature, whoever made it: a check
// before any lookup.
func WellFormed(sig string) bool {
	got, err := base64.RawURLEncoding.DecodeString(sig)
	return err == nil && len(got) == sha256.Size
}

// Check says whether sig is tenant's signature of l, and l not expired at now.
func (s *Signer) Check(tenant string, l Link, sig string, now time.Time) error {
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return ErrSignature
	}
	key, err := s.key(tenant, true)
	if errors.Is(err, fs.ErrNotExist) {
		return ErrSignature // it never signed a link
	}
	if err != nil {
		return err
	}
	if !hmac.Equal(got, mac(key, l)) {
		return ErrSignature
	}
	if !now.Before(l.Expires) {
		return ErrExpired
	}
	return nil
}

// Rotate gives tenant a new key: the links it signed before stop working.
func (s *Signer) Rotate(tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	key, err := s.newKey(tenant)
	if err != nil {
		return err
	}
	s.keys[tenant] = key
	return nil
}

// key returns tenant's key; a tenant without one gets one, but for existing, which finds
// none (fs.ErrNotExist).
func (s *Signer) key(tenant string, existing bool) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.keys[tenant]; ok {
		return k, nil
	}
	if s.dir != "" {
		k, err := os.ReadFile(s.path(tenant))
		if err == nil && len(k) == 32 {
			s.keys[tenant] = k
			return k, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read a link key: %w", err)
		}
	}
	if existing {
		return nil, fs.ErrNotExist
	}
	k, err := s.newKey(tenant)
	if err != nil {
		return nil, err
	}
	s.keys[tenant] = k
	return k, nil
}

// newKey makes a key for tenant and keeps it in dir; the caller holds mu.
func (s *Signer) newKey(tenant string) ([]byte, error) {
	k := make([]byte, 32)
	rand.Read(k)
	if s.dir == "" {
		return k, nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("link keys: %w", err)
	}
	if err := statefile.Write(s.path(tenant), k, 0o600); err != nil {
		return nil, fmt.Errorf("write a link key: %w", err)
	}
	return k, nil
}

func (s *Signer) path(tenant string) string {
	sum := sha256.Sum256([]byte("cellbox link key\x00" + tenant))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16])+".key")
}

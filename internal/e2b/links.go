package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/workspace"
)

// E2B's file links (Sandbox.downloadUrl, uploadUrl): the SDK signs them itself, with the
// sandbox's access token, as "v1_" and the unpadded base64 of SHA-256 of
// "path:operation:user:token[:expiration]" (operation "read" or "write", expiration in Unix
// seconds when the link has one), and sends them to envd's GET or POST /files without the
// token. Such a URL names the sandbox only by its host (E2B's "<port>-<id>.<domain>");
// with E2B_SANDBOX_URL it names none, and the sandbox is found by the signature.

// hostSandbox parses E2B's sandbox host name, "<port>-<sandbox id>.<domain>", for the two
// ports cellbox serves (a host of the operator's that merely starts with digits and a dash
// is not taken for one).
var hostSandbox = regexp.MustCompile(`^(49983|49999)-([0-9a-zA-Z]{8,64})\.`)

// sandboxOfHost returns the sandbox id and port that r's Host names, if it names one.
func sandboxOfHost(r *http.Request) (id, port string, ok bool) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	m := hostSandbox.FindStringSubmatch(host)
	if m == nil {
		return "", "", false
	}
	return m[2], m[1], true
}

// isFileLink: r is a request of an E2B file link (envd's /files with a signature).
func isFileLink(r *http.Request) bool {
	return r.URL.Path == "/files" && (r.Method == http.MethodGet || r.Method == http.MethodPost) && r.URL.Query().Has("signature")
}

// fileLink is the signed part of a file link's query, parsed once.
type fileLink struct {
	path, user, exp, sig string
}

// maxLinkUser bounds a link's user name (the SDK sends "user", or the one a program asks).
const maxLinkUser = 64

// parseFileLink reads r's link, or says why it is not one cellbox takes. The user may hold
// no colon: E2B joins the signed fields with colons, so "a.txt:write:x" read by "user"
// would sign the same text as "a.txt" written by "x:read:user".
func parseFileLink(r *http.Request) (fileLink, error) {
	q := r.URL.Query()
	l := fileLink{path: q.Get("path"), user: q.Get("username"), exp: q.Get("signature_expiration"), sig: q.Get("signature")}
	switch {
	case len(l.path) > workspace.MaxPathLen || len(l.user) > maxLinkUser || len(l.sig) > 64 || len(l.exp) > 20:
		return l, fmt.Errorf("this file link is longer than any the SDK makes: %w", errdefs.ErrInvalidArgument)
	case strings.Contains(l.user, ":"):
		return l, fmt.Errorf("a file link's username may hold no colon: %w", errdefs.ErrInvalidArgument)
	}
	return l, nil
}

// signer hashes the fields of l before the token once, for signatures with many tokens.
type signer struct {
	l      fileLink
	prefix [2][]byte // the SHA-256 state after "path:op:user:", for read and write
}

func newSigner(l fileLink) *signer {
	s := &signer{l: l}
	for i, op := range []string{"read", "write"} {
		h := sha256.New()
		h.Write([]byte(l.path + ":" + op + ":" + l.user + ":"))
		s.prefix[i], _ = h.(encoding.BinaryMarshaler).MarshalBinary()
	}
	return s
}

// signature is the signature E2B's SDK makes of the link for op ("read" or "write") with
// token.
func (s *signer) signature(op, token string) string {
	h := sha256.New()
	i := 0
	if op == "write" {
		i = 1
	}
	h.(encoding.BinaryUnmarshaler).UnmarshalBinary(s.prefix[i])
	h.Write([]byte(token))
	if s.l.exp != "" {
		h.Write([]byte(":" + s.l.exp))
	}
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(h.Sum(nil)), "=")
}

func (s *signer) signedWith(op, token string) bool {
	return subtle.ConstantTimeCompare([]byte(s.l.sig), []byte(s.signature(op, token))) == 1
}

// linkOp is the operation r does: "read" (GET) or "write" (POST).
func linkOp(r *http.Request) string {
	if r.Method == http.MethodPost {
		return "write"
	}
	return "read"
}

// checkFileLink says whether r is a file link signed with token, and not expired.
func checkFileLink(r *http.Request, token string, now time.Time) error {
	l, err := parseFileLink(r)
	if err != nil {
		return err
	}
	if !newSigner(l).signedWith(linkOp(r), token) {
		return fmt.Errorf("the signature of this file link does not match: it was changed, or is for another path, operation or user: %w", errdefs.ErrPermissionDenied)
	}
	if l.exp != "" {
		at, err := strconv.ParseInt(l.exp, 10, 64)
		if err != nil || !now.Before(time.Unix(at, 0)) {
			return fmt.Errorf("this file link has expired: %w", errdefs.ErrPermissionDenied)
		}
	}
	return nil
}

// scans bounds the signature scans that run at once: each costs O(sessions), and anyone
// may ask for one. scanners bounds those running or waiting: past them a link is refused
// at once, rather than queued behind whoever sends them without end.
var (
	scans    = make(chan struct{}, 2)
	scanners = make(chan struct{}, 16)
)

// errScansBusy refuses a file link that names no sandbox while the scans are full.
var errScansBusy = errors.New("too many file links that name no sandbox are being checked at once: retry in a moment (links carry their sandbox in their host when E2B_DOMAIN is set, and need no scan)")

// sandboxOfLink finds the live sandbox a file link that names none was signed for ("": none
// here), for either operation and expired or not, so that its sandbox says what is wrong
// with it: each session's token is tried, two hashes of a few bytes each past the shared
// prefix. At most two scans run at once, and a few more wait their turn; past that,
// errScansBusy.
func (h *Handler) sandboxOfLink(r *http.Request) (string, error) {
	l, err := parseFileLink(r)
	if err != nil {
		return "", nil
	}
	select {
	case scanners <- struct{}{}:
		defer func() { <-scanners }()
	default:
		return "", errScansBusy
	}
	select {
	case scans <- struct{}{}:
		defer func() { <-scans }()
	case <-r.Context().Done():
		return "", nil
	}
	s := newSigner(l)
	found := ""
	h.m.Owners(func(id, tenant string) bool {
		tok := h.token(tenant, id)
		if s.signedWith("read", tok) || s.signedWith("write", tok) {
			found = id
			return false
		}
		return true
	})
	return found, nil
}

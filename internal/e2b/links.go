package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
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

// linkSignature is the signature E2B's SDK makes of a file link of r's query for op
// ("read" or "write") with token.
func linkSignature(r *http.Request, op, token string) string {
	q := r.URL.Query()
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + token
	if exp := q.Get("signature_expiration"); exp != "" {
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// linkOp is the operation r does: "read" (GET) or "write" (POST).
func linkOp(r *http.Request) string {
	if r.Method == http.MethodPost {
		return "write"
	}
	return "read"
}

func signedWith(r *http.Request, op, token string) bool {
	return subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("signature")), []byte(linkSignature(r, op, token))) == 1
}

// checkFileLink says whether r is a file link signed with token, and not expired.
func checkFileLink(r *http.Request, token string, now time.Time) error {
	if !signedWith(r, linkOp(r), token) {
		return fmt.Errorf("the signature of this file link does not match: it was changed, or is for another path, operation or user: %w", errdefs.ErrPermissionDenied)
	}
	if exp := r.URL.Query().Get("signature_expiration"); exp != "" {
		at, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || !now.Before(time.Unix(at, 0)) {
			return fmt.Errorf("this file link has expired: %w", errdefs.ErrPermissionDenied)
		}
	}
	return nil
}

// sandboxOfLink finds the live sandbox a file link that names none was signed for ("": none
// here), for either operation and expired or not, so that its sandbox says what is wrong
// with it: each session's token is tried, O(sessions) hashes, on a request that carries a
// signature at all.
func (h *Handler) sandboxOfLink(r *http.Request) string {
	found := ""
	h.m.Owners(func(id, tenant string) bool {
		tok := h.token(tenant, id)
		if signedWith(r, "read", tok) || signedWith(r, "write", tok) {
			found = id
			return false
		}
		return true
	})
	return found
}

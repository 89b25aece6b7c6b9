// Package e2b serves an E2B-compatible API over the session manager, so that programs
// written against E2B's own SDKs (npm `e2b` and `@e2b/code-interpreter`) run on cellbox
// with three environment variables changed: an E2B sandbox is a cellbox session.
//
// Two kinds of requests reach it on the REST server's address:
//   - the control plane (E2B_API_URL): /sandboxes and /v2/sandboxes, authenticated by the
//     server's API keys like every REST call (the SDK sends X-API-Key);
//   - sandbox traffic (E2B_SANDBOX_URL): any request with an E2b-Sandbox-Id header, routed
//     by E2b-Sandbox-Port to the code interpreter (49999) or to envd (49983: files, and the
//     Connect RPC services process.Process and filesystem.Filesystem). The SDK sends no API
//     key there: the sandbox's access token, given at create, authenticates it.
//
// docs/e2b-wire.md records the protocol as the SDKs speak it; docs/e2b.md says what is
// supported. Not for: anything a session does (package session), or cellbox's own REST API
// (package httpapi).
package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/errdefs/errhttp"
	"github.com/cellbox/cellbox/internal/session"
)

// Ports of a sandbox that E2B's SDKs address, in the E2b-Sandbox-Port header.
const (
	portEnvd        = "49983"
	portInterpreter = "49999"
)

// envdVersion is the envd version cellbox reports. The SDK gates features on it: 0.4.0
// keeps uploads multipart and the default user implicit (see docs/e2b-wire.md).
const envdVersion = "0.4.0"

// Options configures the handler.
type Options struct {
	// StateDir holds the key that sandbox access tokens derive from (e2b/token.key), so
	// tokens stay valid across restarts, as sessions do.
	StateDir       string
	MaxBodyBytes   int64 // a JSON request body
	MaxUploadBytes int64 // one uploaded file
	// MaxExecTimeout bounds a code execution or a command; the SDK's own timeouts are
	// client-side, so each runs up to this unless the client goes away first.
	MaxExecTimeout time.Duration
	// MaxIdleTimeout is the idle timeout of E2B sandboxes: their E2B timeout (a lifetime)
	// is what ends them.
	MaxIdleTimeout time.Duration
	// Elsewhere returns the caller's sessions on a cluster's other nodes, which the
	// request's forwarding gathered into its context, so that the sandbox list is the
	// cluster's (httpapi.Elsewhere); nil outside a cluster.
	Elsewhere func(context.Context) []api.Session
	Logger    *slog.Logger
}

// Handler serves the E2B-compatible API.
type Handler struct {
	m    *session.Manager
	opts Options
	log  *slog.Logger
	key  []byte // HMAC key of the access tokens

	control     http.Handler
	interpreter http.Handler
	envd        http.Handler

	live  sessionEvents // the manager, for the sandbox state (state.go)
	mu    sync.Mutex
	boxes map[string]*sandboxState // by session id
}

// New returns the handler. It creates the token key in opts.StateDir on first use.
func New(m *session.Manager, opts Options) (*Handler, error) {
	key, err := loadKey(filepath.Join(opts.StateDir, "e2b", "token.key"))
	if err != nil {
		return nil, err
	}
	h := &Handler{m: m, opts: opts, log: opts.Logger, key: key, boxes: map[string]*sandboxState{}}
	h.follow(m)
	h.control = h.controlRoutes()
	h.interpreter = h.interpreterRoutes()
	h.envd = h.envdRoutes()
	return h, nil
}

// loadKey reads the token key, creating it (32 random bytes, mode 0600) when missing.
func loadKey(path string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("e2b token key: %w", err)
	}
	b, err := os.ReadFile(path)
	if err == nil && len(b) == 32 {
		return b, nil
	}
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("e2b token key %s: unreadable or not 32 bytes; remove it to make a new one (E2B sandboxes' tokens change)", path)
	}
	b = make([]byte, 32)
	rand.Read(b)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) { // another process made it meanwhile
			return loadKey(path)
		}
		return nil, fmt.Errorf("e2b token key: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("e2b token key: %w", err)
	}
	return b, nil
}

// token is the access token of a tenant's sandbox: what envd and the code interpreter
// check. Derived, not stored: valid as long as the key and the session are.
func (h *Handler) token(tenant, id string) string {
	mac := hmac.New(sha256.New, h.key)
	mac.Write([]byte("cellbox e2b access token\x00" + tenant + "\x00" + id))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// Claims says whether r is for this handler, and whether it must carry an API key (the
// control plane does; sandbox traffic carries its sandbox's access token instead).
//
// Sandbox traffic that names its sandbox in its Host (E2B's "<port>-<id>.<domain>", as a
// browser sends a file link) rather than in headers is given the headers here, so that
// routing and ServeHTTP see one shape; a file link that names no sandbox (links.go) is
// claimed, and its sandbox found when it is served, after the server's own refusals.
func (h *Handler) Claims(r *http.Request) (claimed, needsKey bool) {
	if r.Header.Get("E2b-Sandbox-Id") != "" {
		return true, false
	}
	if id, port, ok := sandboxOfHost(r); ok {
		r.Header.Set("E2b-Sandbox-Id", id)
		r.Header.Set("E2b-Sandbox-Port", port)
		return true, false
	}
	if isFileLink(r) {
		return true, false // the sandbox is found by its signature (ServeHTTP)
	}
	p := r.URL.Path
	for _, prefix := range []string{"/sandboxes", "/v2/sandboxes"} {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return true, true
		}
	}
	return false, false
}

// ServeHTTP serves a request Claims claimed. Control-plane requests arrive with their
// API key's tenant in the context (session.WithTenant).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("E2b-Sandbox-Id") == "" && isFileLink(r) {
		id, err := h.sandboxOfLink(r)
		if err != nil {
			writeProxyError(w, http.StatusServiceUnavailable, "", err.Error())
			return
		}
		if id != "" {
			r.Header.Set("E2b-Sandbox-Id", id)
			r.Header.Set("E2b-Sandbox-Port", portEnvd)
		}
		h.sandboxTraffic(w, r)
		return
	}
	if r.Header.Get("E2b-Sandbox-Id") == "" {
		h.control.ServeHTTP(w, r)
		return
	}
	h.sandboxTraffic(w, r)
}

// WriteError answers a claimed request with err in the control plane's shape, for
// refusals made before the handler runs (a wrong API key).
func (h *Handler) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	h.writeError(w, r, err)
}

type sandboxKey struct{}

// sandboxID is the sandbox a request of sandbox traffic is for.
func sandboxID(ctx context.Context) string {
	id, _ := ctx.Value(sandboxKey{}).(string)
	return id
}

// sandboxTraffic authenticates a request for a sandbox and routes it by port.
func (h *Handler) sandboxTraffic(w http.ResponseWriter, r *http.Request) {
	// With a trailing slash in E2B_SANDBOX_URL the SDK asks for //execute.
	for strings.HasPrefix(r.URL.Path, "//") {
		r.URL.Path = r.URL.Path[1:]
		r.URL.RawPath = ""
	}
	id := r.Header.Get("E2b-Sandbox-Id")
	port := r.Header.Get("E2b-Sandbox-Port")
	if id == "" { // a file link that matches no sandbox here (Claims)
		writeProxyError(w, http.StatusNotFound, "", "no sandbox on this server has a file link with this signature: "+
			"it was changed, its sandbox is gone, or, with several servers, it names no sandbox (set E2B_DOMAIN so that links carry the sandbox in their host)")
		return
	}
	tenant, ok := h.m.Owner(id)
	if !ok {
		// E2B's proxy answers 502 for a sandbox that is not running; the SDK reads it as
		// "the sandbox was killed or timed out".
		writeProxyError(w, http.StatusBadGateway, id, "the sandbox was not found: it never existed, was killed, or its timeout passed")
		return
	}
	health := r.Method == http.MethodGet && r.URL.Path == "/health" && port == portEnvd
	tokenSent := r.Header.Get("X-Access-Token") != "" || r.Header.Get("E2B-Traffic-Access-Token") != ""
	if !health && !tokenSent && port == portEnvd && isFileLink(r) {
		if err := checkFileLink(r, h.token(tenant, id), time.Now()); err != nil {
			writeProxyError(w, http.StatusForbidden, id, strings.TrimSuffix(err.Error(), ": "+errdefs.ErrPermissionDenied.Error()))
			return
		}
	} else if !health {
		tok := r.Header.Get("X-Access-Token")
		if tok == "" {
			tok = r.Header.Get("E2B-Traffic-Access-Token")
		}
		if !hmac.Equal([]byte(tok), []byte(h.token(tenant, id))) {
			msg := "missing access token: send the envdAccessToken of the sandbox in X-Access-Token"
			if tok != "" {
				msg = "the access token is not this sandbox's"
			}
			writeProxyError(w, http.StatusUnauthorized, id, msg)
			return
		}
	}
	ctx := context.WithValue(session.WithTenant(r.Context(), tenant), sandboxKey{}, id)
	r = r.WithContext(ctx)
	switch port {
	case portEnvd:
		h.envd.ServeHTTP(w, r)
	case portInterpreter:
		h.interpreter.ServeHTTP(w, r)
	default:
		if port == "" {
			port = "(none)"
		}
		writeProxyError(w, http.StatusBadGateway, id, fmt.Sprintf("nothing listens on port %s of a cellbox sandbox: only envd (%s) and the code interpreter (%s) are served", port, portEnvd, portInterpreter))
	}
}

// writeProxyError answers sandbox traffic that reaches no sandbox, as E2B's proxy does.
func writeProxyError(w http.ResponseWriter, status int, id, msg string) {
	writeJSON(w, status, map[string]any{"sandboxId": id, "message": msg, "code": status})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":500,"message":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// message is err's text for a user; an unclassified error is logged and not shown.
func (h *Handler) message(r *http.Request, err error) string {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Sprintf("request body is larger than this server's limit of %d bytes", mbe.Limit)
	}
	return errdefs.Public(h.log, err, "method", r.Method, "path", r.URL.Path)
}

// status is the HTTP status of err.
func status(err error) int {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge
	}
	return errhttp.ToHTTP(err)
}

// decode reads a JSON body of at most MaxBodyBytes into v. Unknown fields are ignored:
// the SDKs send options cellbox has no use for. An empty body leaves v as it is.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes)
	err := json.NewDecoder(r.Body).Decode(v)
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return nil
	case errors.As(err, new(*http.MaxBytesError)):
		return err
	}
	return fmt.Errorf("request body is not valid JSON for this call: %s: %w", err.Error(), errdefs.ErrInvalidArgument)
}

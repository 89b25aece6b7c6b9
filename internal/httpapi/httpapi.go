// Package httpapi serves cellbox's REST API v1 (JSON, with Server-Sent Events for
// executions), its OpenAPI document, /healthz and /metrics over a session.Manager.
//
// With API keys configured, one middleware checks the key of every request (MCP at /mcp
// included) before anything reads its body, and hands its tenant on in the request's
// context (session.WithTenant). Errors become HTTP statuses in exactly one place
// (writeError). Not for: MCP, or anything that decides what a session does (package session).
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/errdefs/errhttp"
	"github.com/cellbox/cellbox/internal/links"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/move"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/tool"
)

// Options configures the handler.
type Options struct {
	MaxBodyBytes   int64 // a JSON request body
	MaxUploadBytes int64 // one uploaded file
	Logger         *slog.Logger
	Gatherer       prometheus.Gatherer // for /metrics; nil: none
	MCP            http.Handler        // MCP over streamable HTTP, served at /mcp; nil: none
	MCPSSE         http.Handler        // MCP over the older HTTP+SSE transport, served at /mcp/sse; nil: none
	// LoopbackOnly refuses requests whose Host is not a loopback name or address: set it
	// when listening on loopback, so that a web page cannot reach the API by DNS rebinding.
	LoopbackOnly bool
	// Keys, when it holds any, are the API keys every request but GET /healthz must carry
	// (Authorization: Bearer KEY, or X-API-Key: KEY); nil: no keys, everyone is tenant "".
	Keys *auth.Keys
	// MetricsPublic serves /metrics without a key even with Keys.
	MetricsPublic bool
	// E2B serves the E2B-compatible API (package e2b) on the same address; nil: none.
	E2B FrontDoor
	// Jupyter serves Jupyter's kernel API (package jupyter) at /api/kernels and
	// /api/kernelspecs; nil: none. It reads its own token (KeyReader) and names the
	// session of a kernel's requests (SessionFinder), for the cluster's routing.
	Jupyter FrontDoor
	// OpenAI serves OpenAI's Containers and Files APIs (package openai) at /v1/containers
	// and /v1/files, behind the same API-key check as REST (refusals in REST's error shape,
	// whose error.message OpenAI's SDKs read); nil: none.
	OpenAI http.Handler

	// Tools says what the tool descriptions of /v1/tools and /v1/agent state (limits).
	Tools tool.Options
	// NewProvider returns the model provider of /v1/agent named name ("" for the server's
	// default) and its default model; nil: /v1/agent answers unavailable.
	NewProvider func(name string) (p llm.Provider, model string, err error)
	// Providers lists the model APIs the server can use, for GET /v1/providers; nil: none.
	Providers func() []api.Provider
	// Conversations keeps the conversations of /v1/conversations; nil: none (unavailable).
	Conversations Conversations
	// Web is the browser page, served at GET / and GET /assets/ without an API key; nil:
	// none.
	Web http.Handler
	// Cluster, when this server is a node of one, sends each request on a session to the
	// session's node, new sessions to the node with the most room, and gathers the session
	// list from every node (forward.go); nil: a single server.
	Cluster Cluster
	// Moves, in a cluster whose nodes share a secret, checks the signatures of the sessions
	// other nodes move here (PUT /v1/cluster/sessions/{id}, package move); nil: none moves
	// here.
	Moves *move.Verifier
	// Tenants reports whether a tenant exists on this server (a session moved here of any
	// other is refused).
	Tenants func(name string) bool
	// LinkKeys is the folder of the tenants' keys that sign links (links.go); "": keys in
	// memory, whose links end with the process.
	LinkKeys string
	// PublicURL is the scheme and host links point to ("https://cellbox.example.com"); "":
	// the ones each request came to.
	PublicURL string
}

// FrontDoor is another API on the same address: it claims its own requests (and says
// whether they need an API key: those that do not authenticate themselves) and answers
// refusals in its own error shape.
type FrontDoor interface {
	http.Handler
	Claims(r *http.Request) (claimed, needsKey bool)
	WriteError(w http.ResponseWriter, r *http.Request, err error)
}

// KeyReader is a front door whose clients carry the API key their own way (Jupyter's
// token): the key its requests present, if any.
type KeyReader interface {
	PresentedKey(r *http.Request) (key string, ok bool)
}

// SessionFinder is a front door whose paths name sessions other than by their ids
// (Jupyter's kernel ids): the session a request is on, for the cluster's routing.
type SessionFinder interface {
	SessionOf(r *http.Request) (id string, ok bool)
}

type server struct {
	m     *session.Manager
	opts  Options
	log   *slog.Logger
	fwd   *http.Transport // to the other nodes of the cluster
	links *links.Signer
}

// New returns the API's handler.
func New(m *session.Manager, opts Options) http.Handler {
	s := &server{m: m, opts: opts, log: opts.Logger, links: links.New(opts.LinkKeys)}
	if opts.Cluster != nil {
		s.fwd = newForwarder()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", s.createSession)
	mux.HandleFunc("GET /v1/sessions", s.listSessions)
	mux.HandleFunc("GET /v1/sessions/{id}", s.getSession)
	mux.HandleFunc("PATCH /v1/sessions/{id}", s.updateSession)
	mux.HandleFunc("DELETE /v1/sessions/{id}", s.deleteSession)
	mux.HandleFunc("GET /v1/sessions/{id}/egress", s.egressLog)
	mux.HandleFunc("POST /v1/sessions/{id}/execute", s.execute)
	mux.HandleFunc("POST /v1/sessions/{id}/interrupt", s.interrupt)
	mux.HandleFunc("POST /v1/sessions/{id}/restart", s.restart)
	mux.HandleFunc("POST /v1/sessions/{id}/pause", s.pause)
	mux.HandleFunc("POST /v1/sessions/{id}/resume", s.resume)
	mux.HandleFunc("POST /v1/sessions/{id}/fork", s.fork)
	mux.HandleFunc("POST /v1/sessions/{id}/complete", s.complete)
	mux.HandleFunc("POST /v1/sessions/{id}/inspect", s.inspect)
	mux.HandleFunc("POST /v1/sessions/{id}/commands", s.command)
	mux.HandleFunc("DELETE /v1/sessions/{id}/contexts/{name}", s.deleteContext)
	mux.HandleFunc("GET /v1/sessions/{id}/tools", s.sessionTools)
	mux.HandleFunc("POST /v1/sessions/{id}/tools/{name}/call", s.callTool)
	mux.HandleFunc("POST /v1/sessions/{id}/tools/{name}/save", s.saveTool)
	mux.HandleFunc("POST /v1/sessions/{id}/tools/load", s.loadTools)
	mux.HandleFunc("GET /v1/saved-tools", s.listSavedTools)
	mux.HandleFunc("GET /v1/saved-tools/{name}", s.getSavedTool)
	mux.HandleFunc("DELETE /v1/saved-tools/{name}", s.deleteSavedTool)
	mux.HandleFunc("GET /v1/sessions/{id}/files", s.listFiles)
	mux.HandleFunc("PUT /v1/sessions/{id}/files/{path...}", s.putFile)
	mux.HandleFunc("GET /v1/sessions/{id}/files/{path...}", s.getFile)
	mux.HandleFunc("DELETE /v1/sessions/{id}/files/{path...}", s.deleteFile)
	mux.HandleFunc("POST /v1/sessions/{id}/links", s.createLink)
	mux.HandleFunc("POST /v1/links/rotate", s.rotateLinks)
	mux.HandleFunc("POST /v1/execute", s.oneShot)
	mux.HandleFunc("POST "+notebookPath, s.executeNotebook)
	mux.HandleFunc("GET /v1/tools", s.tools)
	mux.HandleFunc("POST /v1/agent", s.agent)
	mux.HandleFunc("GET /v1/providers", s.providers)
	mux.HandleFunc("GET /v1/cluster", s.clusterView)
	if opts.Cluster != nil && opts.Moves != nil {
		mux.HandleFunc("PUT "+move.Path+"{id}", s.moveIn)
	}
	mux.HandleFunc("POST /v1/conversations", s.conversations(s.createConversation))
	mux.HandleFunc("GET /v1/conversations", s.conversations(s.listConversations))
	mux.HandleFunc("GET /v1/conversations/{id}", s.conversations(s.getConversation))
	mux.HandleFunc("PATCH /v1/conversations/{id}", s.conversations(s.updateConversation))
	mux.HandleFunc("DELETE /v1/conversations/{id}", s.conversations(s.deleteConversation))
	mux.HandleFunc("POST /v1/conversations/{id}/messages", s.conversations(s.sendMessage))
	mux.HandleFunc("POST /v1/conversations/{id}/approvals", s.conversations(s.decide))
	mux.HandleFunc("POST /v1/conversations/{id}/stop", s.conversations(s.stopConversation))
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	if opts.Web != nil {
		mux.Handle("GET /{$}", opts.Web)
		mux.Handle("GET /assets/", opts.Web)
	}
	mux.HandleFunc("GET /healthz", s.health)
	if opts.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	}
	if opts.MCP != nil {
		mux.Handle("/mcp", opts.MCP)
	}
	if opts.MCPSSE != nil {
		mux.Handle("/mcp/sse", opts.MCPSSE)
	}
	if opts.OpenAI != nil {
		for _, p := range []string{"/v1/containers", "/v1/containers/", "/v1/files", "/v1/files/", "/v1/responses", "/v1/responses/"} {
			mux.Handle(p, opts.OpenAI)
		}
	}
	return s.wrap(mux)
}

// wrap adds request logging, refuses what must not be served and requests without a valid
// API key, and turns the mux's plain-text 404 and 405 into the error shape.
func (s *server) wrap(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &statusWriter{ResponseWriter: w}
		r = withTrace(r, start)
		defer func() {
			s.log.Debug("http request", "method", r.Method, "path", r.URL.Path, "status", rw.status, "duration_ms", time.Since(start).Milliseconds())
		}()
		for _, fd := range []FrontDoor{s.opts.E2B, s.opts.Jupyter} {
			if fd == nil {
				continue
			}
			if claimed, needsKey := fd.Claims(r); claimed {
				err := s.refuse(r)
				if err == nil && needsKey {
					if r, err = s.authenticateFor(r, fd); err != nil {
						rw.Header().Set("WWW-Authenticate", `Bearer realm="cellbox"`)
					}
				} else if err == nil {
					// Checked (a token, a link) on the node of its session: until then, no one.
					r = r.WithContext(context.WithValue(r.Context(), anonymous{}, true))
				}
				if err != nil {
					fd.WriteError(rw, r, err)
					return
				}
				routed := false
				if fd == s.opts.E2B {
					r, routed = s.routeE2B(rw, r)
				} else {
					r, routed = s.routeJupyter(rw, r)
				}
				if !routed {
					fd.ServeHTTP(rw, r)
				}
				return
			}
		}
		_, pattern := mux.Handler(r)
		if err := s.refuse(r); err != nil {
			s.writeError(rw, r, err)
		} else if r, err = s.authenticate(r, pattern); err != nil {
			rw.Header().Set("WWW-Authenticate", `Bearer realm="cellbox"`)
			s.writeError(rw, r, err)
		} else if pattern == "" {
			// Tell 405 from 404 the way the mux would, but with the error shape.
			code, msg := http.StatusNotFound, fmt.Sprintf("no route %s %s: see GET /v1/openapi.json", r.Method, r.URL.Path)
			for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
				probe := r.Clone(r.Context())
				probe.Method = m
				if _, p := mux.Handler(probe); p != "" && m != r.Method {
					code, msg = http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path)
					break
				}
			}
			writeJSON(rw, code, api.ErrorBody{Error: api.ErrorDetail{Code: errhttp.Code(code), Message: msg}})
		} else if r, routed := s.routeInCluster(rw, r, pattern); !routed {
			if r.Context().Value(linkPending{}) != nil { // a link to no session of the cluster's
				s.writeError(rw, r, noLinkSession(idIn(r.URL.Path, "/v1/sessions/")))
				return
			}
			mux.ServeHTTP(rw, r)
		}
	})
}

// crossOrigin refuses state-changing requests that a browser sends for another site's page
// (by Sec-Fetch-Site, else Origin): no web page may run code or spend the model key.
var crossOrigin = http.NewCrossOriginProtection()

// refuse says why a request must not be served, or nil.
func (s *server) refuse(r *http.Request) error {
	if s.opts.LoopbackOnly && !loopbackHost(r.Host) {
		return fmt.Errorf("this server listens on loopback only and refuses Host %q (a guard against DNS rebinding): use localhost or 127.0.0.1: %w", r.Host, errdefs.ErrPermissionDenied)
	}
	if err := crossOrigin.Check(r); err != nil {
		return fmt.Errorf("cross-origin requests from web pages are refused: %w", errdefs.ErrPermissionDenied)
	}
	return nil
}

// authenticate returns r with the tenant of its API key in its context (r itself with an
// error when the key is missing or wrong). Without keys
// configured every request is the keyless tenant's; with keys, only GET /healthz, the web
// page (it asks for a key, and holds no data) and /metrics with MetricsPublic may come
// without one.
func (s *server) authenticate(r *http.Request, pattern string) (*http.Request, error) {
	if isLink(r, pattern) {
		return s.authenticateLink(r)
	}
	if s.opts.Keys.Len() == 0 || pattern == "GET /healthz" || (pattern == "GET /metrics" && s.opts.MetricsPublic) ||
		pattern == "PUT "+move.Path+"{id}" || // the cluster's secret, checked by moveIn
		pattern == "GET /{$}" || pattern == "GET /assets/" {
		return r, nil
	}
	key, ok := presentedKey(r.Header)
	if !ok {
		return r, fmt.Errorf("this server needs an API key: send the header Authorization: Bearer KEY (or X-API-Key: KEY): %w", errdefs.ErrUnauthenticated)
	}
	return s.withKey(r, key)
}

// authenticateFor is authenticate for a front door's request that needs a key, read the
// door's way when it has one (KeyReader).
func (s *server) authenticateFor(r *http.Request, fd FrontDoor) (*http.Request, error) {
	kr, ok := fd.(KeyReader)
	if !ok || s.opts.Keys.Len() == 0 {
		return s.authenticate(r, "")
	}
	key, ok := kr.PresentedKey(r)
	if !ok {
		return r, fmt.Errorf("this server needs an API key: send the header Authorization: token KEY (or the query's token=KEY): %w", errdefs.ErrUnauthenticated)
	}
	return s.withKey(r, key)
}

// withKey returns r with key's tenant in its context, or an error for a key that is none
// of this server's.
func (s *server) withKey(r *http.Request, key string) (*http.Request, error) {
	tenant, ok := s.opts.Keys.Lookup(key)
	if !ok {
		return r, fmt.Errorf("the API key is not one of this server's: %w", errdefs.ErrUnauthenticated)
	}
	return r.WithContext(session.WithTenant(r.Context(), tenant)), nil
}

// presentedKey is the key of Authorization: Bearer KEY, else of X-API-Key: KEY.
func presentedKey(h http.Header) (string, bool) {
	if a := h.Get("Authorization"); a != "" {
		f := strings.Fields(a)
		if len(f) != 2 || !strings.EqualFold(f[0], "Bearer") {
			return "", false
		}
		return f[1], true
	}
	k := h.Get("X-API-Key")
	return k, k != ""
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// errorDetail classifies err; an unclassified error is logged and not shown in detail.
func (s *server) errorDetail(r *http.Request, err error) api.ErrorDetail {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = fmt.Errorf("request body is larger than this server's limit of %d bytes: %w", mbe.Limit, errdefs.ErrTooLarge)
	}
	if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
		err = fmt.Errorf("request canceled: %w", errdefs.ErrCanceled)
	}
	code := errdefs.Code(err)
	return api.ErrorDetail{Code: code, Message: errdefs.Public(s.log, err, "method", r.Method, "path", r.URL.Path)}
}

func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	d := s.errorDetail(r, err)
	writeJSON(w, errhttp.Status(d.Code), api.ErrorBody{Error: d})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encode response"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// decode reads a JSON body of at most MaxBodyBytes into v, refusing unknown fields so a
// typo is an error rather than a silently ignored setting.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	return s.decodeJSON(w, r, v, false)
}

// decodeJSON is decode, with the numbers of values of type any kept as json.Number
// (numbers), and at most maxBody bytes.
func (s *server) decodeJSON(w http.ResponseWriter, r *http.Request, v any, numbers bool) error {
	r.Body = http.MaxBytesReader(w, r.Body, s.maxBody(r))
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if numbers {
		dec.UseNumber()
	}
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return errEmptyBody
		}
		return fmt.Errorf("request body is not valid JSON for this call: %s: %w", err.Error(), errdefs.ErrInvalidArgument)
	}
	if dec.More() {
		return fmt.Errorf("request body has data after the JSON object: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

var errEmptyBody = fmt.Errorf("request body is empty; send a JSON object: %w", errdefs.ErrInvalidArgument)

// decodeOptional is decode for calls whose body may be empty.
func (s *server) decodeOptional(w http.ResponseWriter, r *http.Request, v any) error {
	if err := s.decode(w, r, v); err != nil && err != errEmptyBody {
		return err
	}
	return nil
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	n, pool := s.m.Stats()
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Backend: s.m.Backend(), Sessions: n, Pool: pool})
}

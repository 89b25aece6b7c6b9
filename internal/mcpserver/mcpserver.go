// Package mcpserver serves cellbox over the Model Context Protocol with the official Go
// SDK: the python and shell tools of package tool, run in sessions of the session manager,
// and a session's workspace files as resources. One Server gives both transports: Run on
// stdio (cellbox mcp) and Handler for streamable HTTP (/mcp on cellbox serve).
//
// Each MCP connection gets its own session, started at its first tool call and ended when
// the connection closes; a call that names a session_id runs in that session instead, when
// the session belongs to the connection's tenant (see Handler). A
// failure of the code, of the call's arguments or of the service is a result with isError
// set, written for the model; a protocol problem stays a protocol error.
//
// Each connection has its own SDK server, whose tools are python, shell and the tools of
// the connection's session (functions its kernel offers: from cellbox import tool), so
// that the SDK sends that connection notifications/tools/list_changed when they change
// (sessiontools.go).
//
// Not for: REST (package httpapi), the tool definitions and result text (package tool), or
// deciding anything about sessions (package session).
package mcpserver

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/tool"
)

// Version is the server version announced to MCP clients (set with -ldflags -X).
var Version = "dev"

// Options configure a Server. Zero values take defaults.
type Options struct {
	Logger *slog.Logger
	// TimeoutS and MemoryMB are the limits the tool descriptions state (the manager applies
	// them); 0 leaves them out.
	TimeoutS float64
	MemoryMB int
	// Languages are the languages whose tools are offered beside python and shell.
	Languages []string
	// SessionTimeout closes an MCP session over HTTP that sent no request for this long,
	// which ends its cellbox session too; 0: never (the manager's idle timeout still ends
	// the cellbox session).
	SessionTimeout time.Duration
	// Render bounds what one tool result carries (tool.RenderLimits defaults).
	Render tool.RenderLimits
	// IDPrefix, when set, starts every MCP session id over HTTP, which is then it and 24
	// random hex digits: in a cluster, the node's tag (config.Config.SessionIDPrefix), so that
	// any node can tell an MCP session's node from its Mcp-Session-Id.
	IDPrefix string
	// MaxConnections caps the MCP connections (sessions of the protocol, over HTTP or SSE)
	// one tenant has open at once: each keeps a server of its tools until it closes or is
	// idle for SessionTimeout, whether or not it ever runs code. 0: DefaultMaxConnections.
	MaxConnections int
}

// DefaultMaxConnections is Options.MaxConnections when it is 0.
const DefaultMaxConnections = 256

// Sessions is what the MCP server needs of the session manager (*session.Manager).
type Sessions interface {
	tool.Runner
	Create(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error)
	Get(ctx context.Context, id string) (*api.Session, error)
	Delete(ctx context.Context, id string) error
	ListFiles(ctx context.Context, id, path string) (*api.FileList, error)
	GetFile(ctx context.Context, id, path string) (*api.FileInfo, io.ReadCloser, error)
	// Subscribe tells f of sessions created and ended, and of their tools changing
	// (session.Manager.Subscribe).
	Subscribe(f func(session.Event)) (stop func())
	// Tools and CallTool are a session's tools (session.Manager's).
	Tools(ctx context.Context, id string) ([]api.SessionTool, error)
	CallTool(ctx context.Context, id, name string, req api.ToolCallRequest, onOutput func(api.Output)) (*api.ToolCallResult, error)
}

// Server is cellbox's MCP server over a session manager.
type Server struct {
	m     Sessions
	opts  Options
	log   *slog.Logger
	srv   *mcp.Server // answers the SDK's questions about requests to existing connections; never connected
	http  http.Handler
	bound http.Handler    // http, for requests with a tenant: see Handler
	stop  context.Context // done at Close: ends the open event streams
	halt  context.CancelFunc
	quit  func() // ends the subscription to session events

	mu     sync.Mutex
	conns  map[*mcp.ServerSession]*conn
	sse    map[string]*mcp.SSEHandler // by tenant (see SSE)
	closed bool                       // Close was called: the manager ends the sessions now
	ending sync.WaitGroup             // connections that closed, ending their sessions
}

// conn is what a server keeps of one MCP connection.
type conn struct {
	srv    *mcp.Server        // the connection's own: its tool list is the connection's
	tenant string             // of the requests that opened it; the SDK refuses other tenants'
	ss     *mcp.ServerSession // its MCP session, from its first request
	mu     sync.Mutex         // held while the connection's own session starts
	own    string             // the session this connection started; "" before its first tool call
	last   string             // the session of its latest tool call: the one its resources list
	ended  session.EndReason  // why its own session ended, until the next call is told
	closed bool

	toolsMu sync.Mutex                 // held while the session's tools on srv change
	listed  map[string]api.SessionTool // the session tools on srv now, by name
}

// instructions tell a model how to use the server (MCP's initialize result).
const instructions = "cellbox runs Python (a stateful IPython session, like a notebook) and shell commands " +
	"in a sandbox. Its internet access is what the session's network policy allows (by default none), through " +
	"the proxy that HTTP_PROXY and HTTPS_PROXY already name; a refused host answers 403 Forbidden from the proxy. " +
	"This connection has its own session, started at the first " +
	"tool call: variables and the files in " + api.WorkspaceDir + " persist between calls. The session's " +
	"files are resources (cellbox://<session_id>" + api.WorkspaceDir + "/<path>). A tool result with " +
	"isError set means the code failed (an exception, a timeout, ...) or the call could not run: read it, fix, retry. " +
	"Functions the session's Python code marks with @tool (from cellbox import tool) become tools of this server " +
	"beside python and shell, called with their own arguments; the tool list changes as they are defined."

// New returns a server over m.
func New(m Sessions, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{m: m, opts: opts, log: log, conns: map[*mcp.ServerSession]*conn{}, sse: map[string]*mcp.SSEHandler{}}
	s.stop, s.halt = context.WithCancel(context.Background())
	s.quit = m.Subscribe(s.sessionEvent)
	s.srv = s.newMCP(nil)
	s.http = mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		// The SDK asks for a server at every request; only one without a session id opens
		// a connection (the others go to the server their connection has).
		if r.Header.Get("Mcp-Session-Id") != "" {
			return s.srv
		}
		return s.newMCP(nil)
	},
		&mcp.StreamableHTTPOptions{SessionTimeout: opts.SessionTimeout, Logger: sdkLogger(log)})
	s.bound = mcpauth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*mcpauth.TokenInfo, error) {
		return &mcpauth.TokenInfo{UserID: session.Tenant(ctx)}, nil
	}, &mcpauth.RequireBearerTokenOptions{AllowMissingExpiration: true})(s.http)
	return s
}

// newMCP is an SDK server with cellbox's tools and resources, for one connection (its
// tools become the connection's session's: see syncTools). Each request runs as the
// tenant of its token info (see Handler), or as *fixed when it is set (the SSE transport,
// whose requests carry none: see SSE).
func (s *Server) newMCP(fixed *string) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "cellbox", Title: "cellbox code interpreter", Version: Version},
		&mcp.ServerOptions{
			Instructions: instructions,
			Logger:       sdkLogger(s.log),
			// Tools (their list changes with the session's) and resources, no logging.
			Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}, Resources: &mcp.ResourceCapabilities{}},
			GetSessionID: sessionIDs(s.opts.IDPrefix),
		})
	c := &conn{srv: srv, listed: map[string]api.SessionTool{}}
	builtins := tool.Definitions(tool.Options{TimeoutS: s.opts.TimeoutS, MemoryMB: s.opts.MemoryMB, SessionID: true, Languages: s.opts.Languages})
	for _, d := range builtins {
		srv.AddTool(&mcp.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return s.callTool(ctx, c, req, builtins)
			})
	}
	srv.AddResourceTemplate(&mcp.ResourceTemplate{
		Name:        "workspace-file",
		Title:       "A workspace file",
		Description: "A file in a session's workspace (" + api.WorkspaceDir + "), readable when it is at most " + maxReadText + ".",
		URITemplate: uriTemplate,
	}, s.readResource)
	// Every request runs as its tenant (see Handler). resources/list answers with the files
	// of the connection's session, which the SDK's fixed list of resources cannot.
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			t := tenant(req)
			if fixed != nil {
				t = *fixed
			}
			ctx = session.WithTenant(ctx, t)
			if method == "initialize" && req.GetSession() != nil {
				// Counted from its start, whether it ever calls a tool or not (Handler's cap).
				if ss, ok := req.GetSession().(*mcp.ServerSession); ok && s.attach(ctx, c, ss) == nil {
					return nil, errClosed
				}
			}
			if r, ok := req.(*mcp.ListResourcesRequest); ok && method == "resources/list" {
				return s.listResources(ctx, c, r)
			}
			return next(ctx, method, req)
		}
	})
	return srv
}

// SSE serves MCP's older HTTP+SSE transport (mounted at /mcp/sse; vLLM's tool server client
// and many MCP clients speak it): a GET opens the event stream and names the endpoint, POST
// ?sessionid= carries the client's messages. Each tenant has its own handler: a POST
// naming another tenant's session finds none (404), and every call runs as the tenant
// whose key opened the stream.
func (s *Server) SSE() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // the event stream: it ends at Close
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(s.stop, cancel)()
			r = r.WithContext(ctx)
		}
		if r.Method == http.MethodGet && s.connectionsFull(w, r) {
			return
		}
		s.sseFor(session.Tenant(r.Context())).ServeHTTP(w, r)
	})
}

// connectionsFull answers r, a request that opens a connection, with 429 when its tenant
// has as many open as it may (Options.MaxConnections).
func (s *Server) connectionsFull(w http.ResponseWriter, r *http.Request) bool {
	max := cmp.Or(s.opts.MaxConnections, DefaultMaxConnections)
	t := session.Tenant(r.Context())
	s.mu.Lock()
	n := 0
	for _, c := range s.conns {
		if c.tenant == t {
			n++
		}
	}
	s.mu.Unlock()
	if n < max {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -32000,
		"message": fmt.Sprintf("this API key has %d MCP connections open, as many as it may: close one (DELETE with its Mcp-Session-Id) or let one go idle, then retry", n)}})
	return true
}

// sseFor is tenant's SSE handler, made at its first request.
func (s *Server) sseFor(tenant string) *mcp.SSEHandler {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.sse[tenant]
	if h == nil {
		// The SDK asks for a server at each GET: each event stream is a connection.
		h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s.newMCP(&tenant) }, nil)
		s.sse[tenant] = h
	}
	return h
}

// sessionIDs makes MCP session ids that start with prefix; nil (the SDK's own) without one.
func sessionIDs(prefix string) func() string {
	if prefix == "" {
		return nil
	}
	return func() string {
		b := make([]byte, 12)
		rand.Read(b)
		return prefix + hex.EncodeToString(b)
	}
}

// tenant is the tenant of a request: the user of its token info (see Handler); "" on stdio
// and without API keys.
func tenant(req mcp.Request) string {
	if e := req.GetExtra(); e != nil && e.TokenInfo != nil {
		return e.TokenInfo.UserID
	}
	return ""
}

// Handler serves MCP over streamable HTTP (mounted at /mcp). Requests to a loopback
// address must carry a loopback Host header (DNS rebinding protection).
//
// A request whose context has a tenant (session.WithTenant: the API checked its key) goes
// through the SDK's bearer token middleware, which hands the tenant on as the token's user:
// the SDK binds each MCP session to the user that opened it and refuses (403) requests of
// any other, and each tool call runs as that tenant.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // the event stream a client keeps open: it ends at Close
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(s.stop, cancel)()
			r = r.WithContext(ctx)
		}
		if r.Header.Get("Mcp-Session-Id") == "" && r.Method == http.MethodPost && s.connectionsFull(w, r) {
			return
		}
		if session.Tenant(r.Context()) == "" {
			s.http.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Authorization") == "" { // the key came as X-API-Key; the SDK reads Authorization
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+r.Header.Get("X-API-Key"))
		}
		s.bound.ServeHTTP(w, r)
	})
}

// Run serves one connection over t (stdio: &mcp.IOTransport{...}) until it closes or ctx
// ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	return s.newMCP(nil).Run(ctx, t)
}

// Close prepares the server's end, before the HTTP server's Shutdown and the manager's:
// the open event streams end (an HTTP server could not shut down while they last), new tool
// calls are refused, and the sessions are left to the manager, which interrupts running
// cells, so that their calls get their results. Sessions of connections that closed before
// are ended when Close returns. The connections themselves are not closed: the SDK would
// drop the results of calls still running.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.halt()
	s.ending.Wait()
	s.quit()
}

// sessionEvent forgets an ended session in every connection that used it: a connection
// whose own session ended starts a new one at its next call (and tells the model why), and
// its resources list nothing until then. When a session's tools change, the connections
// that work in it list them anew.
func (s *Server) sessionEvent(ev session.Event) {
	if ev.Kind == session.ToolsChanged {
		s.toolsChanged(ev.SessionID)
		return
	}
	if ev.Kind != session.SessionEnded {
		return
	}
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		changed := c.own == ev.SessionID || c.last == ev.SessionID
		if c.own == ev.SessionID {
			c.own, c.ended = "", ev.Reason
		}
		if c.last == ev.SessionID {
			c.last = ""
		}
		c.mu.Unlock()
		if changed {
			s.syncTools(session.WithTenant(context.Background(), c.tenant), c)
		}
	}
}

// attach returns c, the state of the connection of MCP session ss, watching for its end
// from its first request; nil once the server is closed. ctx is a request's, with the
// connection's tenant.
func (s *Server) attach(ctx context.Context, c *conn, ss *mcp.ServerSession) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if c.ss == nil {
		c.tenant, c.ss = session.Tenant(ctx), ss
		s.conns[ss] = c
		go s.watch(ss, c)
	}
	return c
}

// watch ends the connection's session when the connection closes.
func (s *Server) watch(ss *mcp.ServerSession, c *conn) {
	ss.Wait()
	c.mu.Lock() // after a session being started
	c.closed = true
	own := c.own
	c.mu.Unlock()
	s.mu.Lock()
	delete(s.conns, ss)
	if s.closed || own == "" {
		s.mu.Unlock()
		return
	}
	s.ending.Add(1)
	s.mu.Unlock()
	defer s.ending.Done()
	ctx, cancel := context.WithTimeout(session.WithTenant(context.Background(), c.tenant), 30*time.Second)
	defer cancel()
	if err := s.m.Delete(ctx, own); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		s.log.Warn("end the session of a closed MCP connection", "session_id", own, "err", err)
	}
}

var errClosed = fmt.Errorf("the connection or the server is closing: %w", errdefs.ErrUnavailable)

// ownSession returns the connection's session, starting it at the first call, or again when
// it ended (idle too long, or deleted over REST). When it starts one, note says so for the
// model, with the session's id.
func (s *Server) ownSession(ctx context.Context, c *conn) (id, note string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", "", errClosed
	}
	if c.own != "" {
		// The session's end clears c.own (sessionEvent); this is for the moment before the
		// server hears of it.
		if _, err := s.m.Get(ctx, c.own); err == nil {
			return c.own, "", nil
		}
		c.own, c.ended = "", "ended"
	}
	if c.ended != "" {
		note = "[note: this connection's earlier session had ended (" + endedWhy(c.ended) + "), so this call ran in a new one: variables and files from before are gone]\n"
		c.ended = ""
	}
	sess, err := s.m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		return "", "", err
	}
	c.own = sess.ID
	s.log.Debug("mcp connection started its session", "session_id", sess.ID)
	note += "[session_id: " + sess.ID + " is this connection's session. Another connection can use it, while this one is open, by passing it as session_id.]"
	return sess.ID, note, nil
}

// endedWhy says why a session ended, for the model.
func endedWhy(r session.EndReason) string {
	switch r {
	case session.EndDeleted:
		return "it was deleted"
	case session.EndIdle:
		return "idle too long"
	case session.EndLifetime:
		return "its lifetime ran out"
	case session.EndFailed:
		return "its sandbox failed and could not be replaced"
	case session.EndServerExit:
		return "the server stopped"
	case session.EndPausedRetention:
		return "it stayed paused longer than the server keeps paused sessions"
	case session.EndMoved:
		return "it moved to another node of the cluster"
	}
	return "idle too long, or deleted"
}

// session returns the session a call or a read is about: the connection's latest.
func (c *conn) session() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != "" {
		return c.last
	}
	return c.own
}

func (c *conn) used(id string) {
	c.mu.Lock()
	c.last = id
	c.mu.Unlock()
}

// sdkLogger is the SDK's logger: its warnings and errors only. Its info lines, one per
// connection, would reuse the key session_id for MCP's own session ids.
func sdkLogger(log *slog.Logger) *slog.Logger {
	return slog.New(warnHandler{log.Handler()})
}

type warnHandler struct{ slog.Handler }

func (h warnHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return warnHandler{h.Handler.WithAttrs(as)}
}

func (h warnHandler) WithGroup(name string) slog.Handler {
	return warnHandler{h.Handler.WithGroup(name)}
}

package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/cluster"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Cluster is what the API needs of the cluster this server is a node of (package cluster):
// which node has a session, which take new ones, and every node, for lists.
type Cluster interface {
	Name() string
	Route(sessionID string) (*cluster.Member, error)
	Place() []cluster.Member
	Placed(node string)
	Members() []cluster.Member
	Nudge()
}

// ForwardedHeader marks a request one node forwards to another, with the sender's name. A
// node serves such a request itself, whatever it is: a request is forwarded at most once.
const ForwardedHeader = "Cellbox-Forwarded-By"

// newForwarder is the transport requests to other nodes go over: connections are kept, and
// a node that does not accept one within 5 s is taken for down. No response deadline: an
// execution may run for --max-exec-timeout.
func newForwarder() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
	}
}

// routeInCluster serves r on the node it belongs to, when that is another node, and
// reports whether it did (false: serve the request it returns here). Requests on a session or a conversation go
// to its node (the id says which), and so do an agent run and a new conversation in a
// session of another node; new sessions and one-shot executions go to the node with the
// most room; the lists of sessions and of conversations are gathered from every node.
func (s *server) routeInCluster(w http.ResponseWriter, r *http.Request, pattern string) (*http.Request, bool) {
	if s.opts.Cluster == nil {
		return r, false
	}
	openAI := s.opts.OpenAI != nil && strings.HasPrefix(pattern, "/v1/") // its patterns are paths alone
	if openAI {
		// Served here, forwarded or not, it may need a file another node keeps (OpenOnNode).
		r = r.WithContext(context.WithValue(r.Context(), nodesKey{}, s))
	}
	if r.Header.Get(ForwardedHeader) != "" {
		// Sent here by a node that has not yet seen that the session moved (a drain) to a
		// node other than this one: not served here, where it is not (never two hops).
		if id := idIn(r.URL.Path, "/v1/sessions/"); strings.Contains(pattern, " /v1/sessions/{id}") && !s.m.Has(id) {
			if m, _ := s.opts.Cluster.Route(id); m != nil {
				s.writeError(w, r, fmt.Errorf("this session moved to cluster node %s a moment ago: retry: %w", m.Name, errdefs.ErrUnavailable))
				return r, true
			}
		}
		return r, false
	}
	switch {
	case pattern == "POST /v1/sessions" || pattern == "POST /v1/execute":
		return r, s.place(w, r, s.writeError)
	case pattern == "POST /v1/agent" || pattern == "POST /v1/conversations":
		return r, s.toSessionNode(w, r)
	case pattern == "POST "+notebookPath:
		// In the session it names, else in a new one: new work.
		id, ok := s.sessionInBody(w, r)
		switch {
		case !ok:
			return r, true
		case id == "":
			return r, s.place(w, r, s.writeError)
		}
		return r, s.toNodeOf(w, r, id, s.writeError)
	case pattern == "GET /v1/sessions":
		s.listSessionsInCluster(w, r)
		return r, true
	case pattern == "GET /v1/conversations" && s.opts.Conversations != nil:
		s.listConversationsInCluster(w, r)
		return r, true
	case strings.Contains(pattern, " /v1/sessions/{id}"):
		return r, s.toNodeOf(w, r, idIn(r.URL.Path, "/v1/sessions/"), s.writeError)
	case strings.Contains(pattern, " /v1/conversations/{id}"):
		// conv_ and the node's tag: the tag as a session id carries it.
		return r, s.toNodeOf(w, r, strings.TrimPrefix(idIn(r.URL.Path, "/v1/conversations/"), "conv_"), s.writeError)
	case pattern == "/mcp" && r.Header.Get("Mcp-Session-Id") != "":
		// An MCP session (and the cellbox session it works in) is on the node that made it.
		return r, s.toNodeOf(w, r, r.Header.Get("Mcp-Session-Id"), s.writeError)
	case openAI:
		return s.routeOpenAI(w, r)
	}
	return r, false
}

// routeOpenAI is routeInCluster for OpenAI's APIs (package openai): a container is a
// session, and file and response ids carry their node's tag as session ids do, so calls on
// one go to its node; new containers go to the node with the most room, new files and
// responses stay here (a response that goes on from another, or runs in a named container,
// goes to that one's node); the lists of containers and files have every node's. Routing
// failures are answered in cellbox's error shape, whose error.message OpenAI's SDKs read.
func (s *server) routeOpenAI(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	p := r.URL.Path
	switch {
	case p == "/v1/containers" && r.Method == http.MethodPost:
		return r, s.place(w, r, s.writeError)
	case p == "/v1/containers" && r.Method == http.MethodGet:
		return r.WithContext(s.elsewhereSessions(r)), false
	case strings.HasPrefix(p, "/v1/containers/"):
		return r, s.toNodeOf(w, r, strings.TrimPrefix(idIn(p, "/v1/containers/"), "cntr_"), s.writeError)
	case p == "/v1/files" && r.Method == http.MethodGet:
		items, unavailable := s.gatherItems(r, "/v1/files?limit=10000")
		if len(unavailable) > 0 { // OpenAI's list has no place to say so
			s.log.Warn("OpenAI file list without the files of cluster nodes that are down or did not answer", "nodes", unavailable)
		}
		return r.WithContext(context.WithValue(r.Context(), itemsKey{}, items)), false
	case strings.HasPrefix(p, "/v1/files/"):
		return r, s.toNodeOf(w, r, strings.TrimPrefix(idIn(p, "/v1/files/"), "file-"), s.writeError)
	case strings.HasPrefix(p, "/v1/responses/"):
		return r, s.toNodeOf(w, r, strings.TrimPrefix(idIn(p, "/v1/responses/"), "resp_"), s.writeError)
	case p == "/v1/responses" && r.Method == http.MethodPost:
		return r, s.toResponseNode(w, r)
	}
	return r, false
}

// elsewhereSessions returns r's context with the caller's sessions on the other nodes.
func (s *server) elsewhereSessions(r *http.Request) context.Context {
	theirs, unavailable := gather[api.SessionList](s, r, "/v1/sessions")
	if len(unavailable) > 0 { // the front doors' lists have no place to say so
		s.log.Warn("a list without the sessions of cluster nodes that are down or did not answer", "path", r.URL.Path, "nodes", unavailable)
	}
	var all []api.Session
	for _, l := range theirs {
		all = append(all, l.Sessions...)
	}
	return withElsewhere(r.Context(), all)
}

type itemsKey struct{}

// ElsewhereItems returns the items of a list on the other nodes of the cluster that the
// cluster forwarding put in the context of a list request (OpenAI's files list), as JSON;
// none outside a cluster.
func ElsewhereItems(ctx context.Context) []json.RawMessage {
	items, _ := ctx.Value(itemsKey{}).([]json.RawMessage)
	return items
}

// gatherItems gathers the data of an OpenAI list (path, with its query) from every other
// node.
func (s *server) gatherItems(r *http.Request, path string) ([]json.RawMessage, []string) {
	type list struct {
		Data []json.RawMessage `json:"data"`
	}
	theirs, unavailable := gather[list](s, r, path)
	var items []json.RawMessage
	for _, l := range theirs {
		items = append(items, l.Data...)
	}
	return items, unavailable
}

type nodesKey struct{}

// OpenOnNode GETs path on the cluster node that keeps id (a session id, or another id with
// its node's tag: a file's, a response's, without their prefix) with r's key, when that is
// another node, and returns its answer, whatever its status; nil, nil when id is this
// node's, or outside a cluster. A node that is down is an error (unavailable).
func OpenOnNode(r *http.Request, id, path string) (*http.Response, error) {
	s, _ := r.Context().Value(nodesKey{}).(*server)
	if s == nil {
		return nil, nil
	}
	m, err := s.opts.Cluster.Route(id)
	if err != nil || m == nil {
		return nil, err
	}
	return s.getOn(r.Context(), r, *m, path)
}

// keepBody reads r's body, at most maxBody, and puts it back for whoever serves r; false
// when it could not be read (r is answered).
func (s *server) keepBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody(r)))
	if err != nil {
		s.writeError(w, r, err)
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, true
}

// toResponseNode forwards a new response to the node of the response it goes on from, else
// of the container its code_interpreter names; the body, at most maxBody, is read for
// that and kept for whoever serves it. Anything else is served here.
func (s *server) toResponseNode(w http.ResponseWriter, r *http.Request) bool {
	body, ok := s.keepBody(w, r)
	if !ok {
		return true
	}
	var req struct {
		PreviousResponseID string `json:"previous_response_id"`
		Tools              []struct {
			Type      string          `json:"type"`
			Container json.RawMessage `json:"container"`
		} `json:"tools"`
	}
	if json.Unmarshal(body, &req) != nil {
		return false
	}
	if id, ok := strings.CutPrefix(req.PreviousResponseID, "resp_"); ok {
		return s.toNodeOf(w, r, id, s.writeError)
	}
	for _, t := range req.Tools {
		var named string
		if t.Type == "code_interpreter" && json.Unmarshal(t.Container, &named) == nil {
			if id, ok := strings.CutPrefix(named, "cntr_"); ok {
				return s.toNodeOf(w, r, id, s.writeError)
			}
		}
	}
	return false
}

// idIn is the path segment after prefix.
func idIn(path, prefix string) string {
	rest, _ := strings.CutPrefix(path, prefix)
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// failer answers a request with an error, in its API's shape (cellbox's, or E2B's).
type failer func(w http.ResponseWriter, r *http.Request, err error)

// toNodeOf forwards r to the node session id names, when that is another node.
func (s *server) toNodeOf(w http.ResponseWriter, r *http.Request, id string, fail failer) bool {
	if s.m.Has(id) { // moved here, before this node's own Lease says so
		return false
	}
	m, err := s.opts.Cluster.Route(id)
	if err != nil {
		if isAnonymous(r) {
			// Whoever sent it has shown no key yet (its token or link is checked on the
			// session's node): told as much as of a session that never was, not which node
			// has it or how that node is.
			err = fmt.Errorf("no session %.64s: %w", id, errdefs.ErrNotFound)
		}
		fail(w, r, err)
		return true
	}
	if m == nil {
		return false
	}
	s.forward(w, r, *m, false, fail)
	return true
}

// anonymous marks a request that carries no API key: its credential (an E2B sandbox's
// token) only the node of its session can check.
type anonymous struct{}

// isAnonymous: r is a request of no key whose credential is checked on its session's node.
func isAnonymous(r *http.Request) bool {
	return r.Context().Value(anonymous{}) != nil || r.Context().Value(linkPending{}) != nil
}

// routeE2B is routeInCluster for the E2B API: sandbox traffic and calls on a sandbox go to
// its node (a sandbox is a session, its id the session's), new sandboxes to the node with
// the most room, and the list has every node's sandboxes (package e2b cuts the pages). It
// returns r, with the other nodes' sessions in its context for the list.
func (s *server) routeE2B(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	fd := s.opts.E2B
	if s.opts.Cluster == nil || r.Header.Get(ForwardedHeader) != "" {
		return r, false
	}
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		return r, s.toNodeOf(w, r, id, fd.WriteError)
	}
	p := strings.TrimPrefix(r.URL.Path, "/v2")
	switch {
	case p == "/sandboxes" && r.Method == http.MethodPost:
		return r, s.place(w, r, fd.WriteError)
	case p == "/sandboxes" && r.Method == http.MethodGet:
		return r.WithContext(s.elsewhereSessions(r)), false
	case strings.HasPrefix(p, "/sandboxes/"):
		return r, s.toNodeOf(w, r, idIn(p, "/sandboxes/"), fd.WriteError)
	}
	return r, false
}

// routeJupyter is routeInCluster for Jupyter's kernel API (package jupyter): a kernel is a
// session, and its requests (its websocket too: the proxy carries the upgrade) go to the
// session's node; new kernels go to the node with the most room, and the kernel list has
// every node's.
func (s *server) routeJupyter(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	fd := s.opts.Jupyter
	if s.opts.Cluster == nil || r.Header.Get(ForwardedHeader) != "" {
		return r, false
	}
	switch {
	case r.URL.Path == "/api/kernels" && r.Method == http.MethodPost:
		return r, s.place(w, r, fd.WriteError)
	case r.URL.Path == "/api/kernels" && r.Method == http.MethodGet:
		return r.WithContext(s.elsewhereSessions(r)), false
	}
	if sf, ok := fd.(SessionFinder); ok {
		if id, ok := sf.SessionOf(r); ok {
			return r, s.toNodeOf(w, r, id, fd.WriteError)
		}
	}
	return r, false
}

type elsewhereKey struct{}

// withElsewhere returns ctx carrying the caller's sessions on the other nodes of a cluster,
// for a front door's list that is the whole cluster's (the E2B API's, whose pages it cuts
// itself).
func withElsewhere(ctx context.Context, sessions []api.Session) context.Context {
	return context.WithValue(ctx, elsewhereKey{}, sessions)
}

// Elsewhere returns the caller's sessions on the other nodes of the cluster that the
// cluster forwarding put in the context of a front door's list request; none outside a
// cluster.
func Elsewhere(ctx context.Context) []api.Session {
	s, _ := ctx.Value(elsewhereKey{}).([]api.Session)
	return s
}

// toSessionNode forwards a request whose body names a session_id of another node to that
// node (an agent run, a conversation: they work in the session, where it is).
func (s *server) toSessionNode(w http.ResponseWriter, r *http.Request) bool {
	id, ok := s.sessionInBody(w, r)
	if !ok {
		return true
	}
	return id != "" && s.toNodeOf(w, r, id, s.writeError)
}

// sessionInBody is the session_id r's body names ("" none, or a body that does not parse:
// served here, which says why). The body, at most maxBody, is read for that and kept for
// whoever serves r; ok is false when it could not be read (r is answered).
func (s *server) sessionInBody(w http.ResponseWriter, r *http.Request) (id string, ok bool) {
	body, ok := s.keepBody(w, r)
	if !ok {
		return "", false
	}
	var req struct {
		SessionID string `json:"session_id"`
	}
	if json.Unmarshal(body, &req) != nil {
		return "", true
	}
	return req.SessionID, true
}

// place sends a request that starts new work to the node with the most room, trying the
// next when one does not answer or refuses it as full (429: its Lease said it had room, but
// others' sessions came first, or the tenant is at its cap there); the body, at most
// maxBody, is kept for that. The last node's answer is the client's, whatever it is.
func (s *server) place(w http.ResponseWriter, r *http.Request, fail failer) bool {
	c := s.opts.Cluster
	nodes := c.Place()
	if len(nodes) == 0 || nodes[0].Here {
		return false // here has the most room, or no node says it has any: here says why
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody(r)))
	if err != nil {
		fail(w, r, err)
		return true
	}
	var errs []error
	for i, m := range nodes {
		r.Body = io.NopCloser(bytes.NewReader(body))
		if m.Here {
			return false
		}
		c.Placed(m.Name) // at once: the next request weighs it, though this one is in flight
		err := s.forward(w, r, m, i < len(nodes)-1, fail)
		if err == nil {
			return true
		}
		errs = append(errs, err)
	}
	fail(w, r, fmt.Errorf("no cluster node with room answered: %w: %w", errors.Join(errs...), errdefs.ErrUnavailable))
	return true
}

// forward proxies r to node m, streaming both ways (uploads, downloads and SSE are not
// buffered), with the client's Host (the owner checks Origin against it). A node that
// fails is answered here as unavailable. With retry (placing new work, another node to
// try), a node that could not be connected to, so has seen nothing of r, or that refused r
// with 429, so did nothing of it, is an error returned with nothing written, and the caller
// tries another. Otherwise r is never sent twice: code might run twice.
func (s *server) forward(w http.ResponseWriter, r *http.Request, m cluster.Member, retry bool, fail failer) error {
	var failed error
	p := &httputil.ReverseProxy{
		Transport:     s.fwd,
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			if retry && res.StatusCode == http.StatusTooManyRequests {
				return errRefused
			}
			return nil
		},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(m.URL)
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(ForwardedHeader, s.opts.Cluster.Name())
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client went away
			}
			if errors.Is(err, errRefused) {
				failed = fmt.Errorf("cluster node %s is full", m.Name)
				return
			}
			s.log.Warn("forward to another cluster node", "node", m.Name, "path", r.URL.Path, "err", err)
			var op *net.OpError
			if retry && errors.As(err, &op) && op.Op == "dial" {
				failed = fmt.Errorf("cluster node %s did not answer", m.Name)
				return
			}
			fail(w, r, fmt.Errorf("cluster node %s, which has this request's session or took its work, failed to answer it: %w", m.Name, errdefs.ErrUnavailable))
		},
	}
	// The body streams to the node while its answer may already stream back (an SSE cell
	// that starts printing before the upload behind it ends, or only the transport's last
	// read for EOF still to come). By default an HTTP/1 server takes a request's body from
	// the handler once the response's header is out, and the transport, failing to read
	// it, closes the connection mid-answer. Full duplex leaves the body readable.
	http.NewResponseController(w).EnableFullDuplex()
	p.ServeHTTP(w, r)
	return failed
}

// errRefused is a node's 429 to new work that another node may take.
var errRefused = errors.New("refused: too many requests")

// listSessionsInCluster answers GET /v1/sessions with the caller's sessions on every node,
// oldest first. Nodes that are down or do not answer are named in unavailable_nodes; their
// sessions are missing from the list.
func (s *server) listSessionsInCluster(w http.ResponseWriter, r *http.Request) {
	list := api.SessionList{Sessions: s.m.List(r.Context())}
	theirs, unavailable := gather[api.SessionList](s, r, r.URL.Path)
	for _, l := range theirs {
		list.Sessions = append(list.Sessions, l.Sessions...)
	}
	sort.SliceStable(list.Sessions, func(i, j int) bool { return list.Sessions[i].CreatedAt.Before(list.Sessions[j].CreatedAt) })
	if list.Sessions == nil {
		list.Sessions = []api.Session{}
	}
	list.UnavailableNodes = unavailable
	writeJSON(w, http.StatusOK, list)
}

// listConversationsInCluster answers GET /v1/conversations as listSessionsInCluster does
// the sessions, most recently active first, as one node lists them.
func (s *server) listConversationsInCluster(w http.ResponseWriter, r *http.Request) {
	list := api.ConversationList{Conversations: s.opts.Conversations.List(r.Context(), r.URL.Query().Get("session_id"))}
	theirs, unavailable := gather[api.ConversationList](s, r, r.URL.Path)
	for _, l := range theirs {
		list.Conversations = append(list.Conversations, l.Conversations...)
	}
	sort.Slice(list.Conversations, func(i, j int) bool { // as one node lists them
		a, b := list.Conversations[i], list.Conversations[j]
		if !a.UpdatedAt.Equal(b.UpdatedAt) {
			return a.UpdatedAt.After(b.UpdatedAt)
		}
		return a.ID < b.ID
	})
	if list.Conversations == nil {
		list.Conversations = []api.Conversation{}
	}
	list.UnavailableNodes = unavailable
	writeJSON(w, http.StatusOK, list)
}

// gather sends a GET of path (a list; r's query when it is r's path) to every other live
// node, with r's key, and returns their lists and, sorted, the nodes down or failing to
// answer.
func gather[L any](s *server, r *http.Request, path string) (lists []L, unavailable []string) {
	var mu sync.Mutex
	s.eachOther(r, func(_ context.Context, m cluster.Member) error {
		l, err := listOn[L](s, r, m, path)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		lists = append(lists, l)
		return nil
	}, &unavailable)
	return lists, unavailable
}

// eachOther runs do for every other node of the cluster, at once, each within 10 s; the
// nodes that are down or whose do failed (logged) are added to unavailable, in name order.
func (s *server) eachOther(r *http.Request, do func(context.Context, cluster.Member) error, unavailable *[]string) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	fail := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		*unavailable = append(*unavailable, name)
	}
	for _, m := range s.opts.Cluster.Members() {
		switch {
		case m.Here:
			continue
		case !m.Live:
			fail(m.Name)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			if err := do(ctx, m); err != nil {
				s.log.Warn("a call to another cluster node", "node", m.Name, "path", r.URL.Path, "err", err)
				fail(m.Name)
			}
		}()
	}
	wg.Wait()
	sort.Strings(*unavailable)
}

// listOn sends a GET of path (a list; r's query when it is r's path) to node m, with r's key.
func listOn[L any](s *server, r *http.Request, m cluster.Member, path string) (L, error) {
	var list L
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if path == r.URL.Path {
		path += "?" + r.URL.RawQuery
	}
	res, err := s.getOn(ctx, r, m, path)
	if err != nil {
		return list, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return list, fmt.Errorf("HTTP %d", res.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 64<<20)).Decode(&list); err != nil {
		return list, fmt.Errorf("decode its list: %w", err)
	}
	return list, nil
}

// getOn sends a GET of path (and query) to node m, with r's key.
func (s *server) getOn(ctx context.Context, r *http.Request, m cluster.Member, path string) (*http.Response, error) {
	return s.sendOn(ctx, r, m, http.MethodGet, path)
}

// sendOn sends a request without a body of method and path (and query) to node m, with
// r's key, marked forwarded: m serves it itself.
func (s *server) sendOn(ctx context.Context, r *http.Request, m cluster.Member, method, path string) (*http.Response, error) {
	p, query, _ := strings.Cut(path, "?")
	u := m.URL.JoinPath(p)
	u.RawQuery = query
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for _, h := range []string{"Authorization", "X-Api-Key"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set(ForwardedHeader, s.opts.Cluster.Name())
	res, err := (&http.Client{Transport: s.fwd}).Do(req)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("a request to another cluster node", "node", m.Name, "method", method, "path", p, "err", err)
		}
		return nil, fmt.Errorf("cluster node %s did not answer: %w", m.Name, errdefs.ErrUnavailable)
	}
	return res, nil
}

// clusterView answers GET /v1/cluster: every node, as this one sees them.
func (s *server) clusterView(w http.ResponseWriter, r *http.Request) {
	c := s.opts.Cluster
	if c == nil {
		s.writeError(w, r, fmt.Errorf("this server is not a cluster node (see --cluster): %w", errdefs.ErrNotFound))
		return
	}
	view := api.ClusterView{Node: c.Name(), Nodes: []api.ClusterNode{}}
	for _, m := range c.Members() {
		view.Nodes = append(view.Nodes, api.ClusterNode{Name: m.Name, Live: m.Live, Stopping: m.Stopping, Draining: m.Draining,
			Sessions: m.Sessions, Room: m.Room, Warm: m.Warm, RenewedAt: m.Renewed.UTC()})
	}
	writeJSON(w, http.StatusOK, view)
}

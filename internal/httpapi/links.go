package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/cluster"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/links"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/tool"
	"github.com/cellbox/cellbox/internal/workspace"
)

// Links: signed URLs to one file of a session and one method (package links). A link is
// the file route itself, GET or PUT /v1/sessions/{id}/files/{path}, with ?expires= (Unix
// seconds) and &signature=; a request that carries them and no API key is the link's
// tenant's (authenticateLink). Links are signed and checked on the session's node, with
// the tenant's key there: in a cluster a link reaches it through any node.

// The file routes a link can be for.
const (
	patternGetFile = "GET /v1/sessions/{id}/files/{path...}"
	patternPutFile = "PUT /v1/sessions/{id}/files/{path...}"
)

// linkPending marks a link's request that this node could not check, as its session is
// not here: routeInCluster must forward it to the session's node, or it is refused.
type linkPending struct{}

// isLink: r is a link's request (a file route with a signature, and no API key).
func isLink(r *http.Request, pattern string) bool {
	if pattern != patternGetFile && pattern != patternPutFile {
		return false
	}
	if _, ok := presentedKey(r.Header); ok {
		return false
	}
	return r.URL.Query().Has("signature")
}

// authenticateLink checks a link's request; r comes back with the link's tenant in its
// context, or, in a cluster, marked linkPending when the session is not on this node.
func (s *server) authenticateLink(r *http.Request) (*http.Request, error) {
	// The id and the file as the router splits them: by the escaped path, so that a %2F in
	// the id cannot move the split.
	rest, _ := strings.CutPrefix(r.URL.EscapedPath(), "/v1/sessions/")
	escID, escFile, ok := strings.Cut(rest, "/files/")
	id, err1 := url.PathUnescape(escID)
	file, err2 := url.PathUnescape(escFile)
	if !ok || err1 != nil || err2 != nil || id == "" || strings.Contains(id, "/") {
		return r, fmt.Errorf("not a link: %w", errdefs.ErrNotFound)
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if !links.WellFormed(sig) {
		return r, links.ErrSignature
	}
	rel, err := workspace.Clean(file)
	if err != nil || rel == "." {
		return r, fmt.Errorf("the link names no file of the workspace: %w", errdefs.ErrInvalidArgument)
	}
	exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil {
		return r, fmt.Errorf("the link has no expiry (expires=, in Unix seconds): %w", errdefs.ErrPermissionDenied)
	}
	tenant, ok := s.m.Owner(id)
	if !ok {
		if s.opts.Cluster != nil && r.Header.Get(ForwardedHeader) == "" {
			return r.WithContext(context.WithValue(r.Context(), linkPending{}, true)), nil
		}
		return r, noLinkSession(id)
	}
	method := links.Get
	if r.Method == http.MethodPut {
		method = links.Put
	}
	l := links.Link{Method: method, Session: id, Path: rel, Expires: time.Unix(exp, 0)}
	if err := s.links.Check(tenant, l, sig, time.Now()); err != nil {
		return r, err
	}
	return r.WithContext(session.WithTenant(r.Context(), tenant)), nil
}

func noLinkSession(id string) error {
	if len(id) > 64 {
		id = id[:64] + "..."
	}
	return fmt.Errorf("no session %s: the link's session has ended (or never was), and its files with it: %w", id, errdefs.ErrNotFound)
}

// createLink answers POST /v1/sessions/{id}/links with a signed URL (api.Link).
func (s *server) createLink(w http.ResponseWriter, r *http.Request) {
	var req api.LinkRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	method := strings.ToUpper(req.Method)
	switch method {
	case "":
		method = links.Get
	case links.Get, links.Put:
	default:
		s.writeError(w, r, fmt.Errorf("method %q: a link is for GET (to download) or PUT (to upload): %w", req.Method, errdefs.ErrInvalidArgument))
		return
	}
	ttl := links.DefaultTTL
	if req.ExpiresInS != 0 {
		// Compared as given: a huge one would overflow a Duration.
		if !(req.ExpiresInS >= 1 && req.ExpiresInS <= links.MaxTTL.Seconds()) {
			s.writeError(w, r, fmt.Errorf("expires_in_s is %g: give 1 to %d seconds: %w", req.ExpiresInS, int(links.MaxTTL.Seconds()), errdefs.ErrInvalidArgument))
			return
		}
		ttl = time.Duration(req.ExpiresInS * float64(time.Second))
	}
	rel, err := workspace.Clean(req.Path)
	if err != nil || rel == "." {
		s.writeError(w, r, fmt.Errorf("path %q: give a file of the workspace (under %s): %w", req.Path, api.WorkspaceDir, errdefs.ErrInvalidArgument))
		return
	}
	id := r.PathValue("id")
	if _, err := s.m.Get(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	link, err := s.link(r, id, rel, method, ttl)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, link)
}

// link signs a link to the file rel of session id (the caller's, checked) for method.
func (s *server) link(r *http.Request, id, rel, method string, ttl time.Duration) (*api.Link, error) {
	exp := time.Now().Add(ttl).Truncate(time.Second)
	sig, err := s.links.Sign(session.Tenant(r.Context()), links.Link{Method: method, Session: id, Path: rel, Expires: exp})
	if err != nil {
		return nil, err
	}
	segs := strings.Split(rel, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	u := s.baseURL(r) + "/v1/sessions/" + url.PathEscape(id) + "/files/" + strings.Join(segs, "/") +
		"?expires=" + strconv.FormatInt(exp.Unix(), 10) + "&signature=" + sig
	return &api.Link{URL: u, Method: method, Path: api.WorkspaceDir + "/" + rel, ExpiresAt: exp.UTC()}, nil
}

// baseURL is where the links of r point (BaseURL).
func (s *server) baseURL(r *http.Request) string { return BaseURL(s.opts.PublicURL, r) }

// BaseURL is where URLs in the answer to r point: publicURL (--public-url), or the scheme
// and host r came to (a request another node forwarded: the first node's, as it says).
func BaseURL(publicURL string, r *http.Request) string {
	if publicURL != "" {
		return strings.TrimRight(publicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if p := r.Header.Get("X-Forwarded-Proto"); r.Header.Get(ForwardedHeader) != "" && (p == "http" || p == "https") {
		scheme = p
	}
	return scheme + "://" + r.Host
}

// addLinks gives each file of files that a run of session id created or changed a link to
// download it; a file that cannot be signed keeps none (logged).
func (s *server) addLinks(r *http.Request, id string, files []api.FileChange) {
	for i, f := range files {
		if f.Change == api.ChangeDeleted || f.URL != "" { // an artifacts store's URL outlives the session
			continue
		}
		rel, err := workspace.Clean(f.Path)
		if err != nil {
			continue
		}
		l, err := s.link(r, id, rel, links.Get, links.DefaultTTL)
		if err != nil {
			s.log.Warn("sign a link", "session_id", id, "err", err)
			continue
		}
		files[i].URL = l.URL
	}
}

// rotateLinks answers POST /v1/links/rotate: the caller's links, signed before, stop
// working (on every node of a cluster).
func (s *server) rotateLinks(w http.ResponseWriter, r *http.Request) {
	if err := s.links.Rotate(session.Tenant(r.Context())); err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.clusterWide(r) {
		var unavailable []string
		s.eachOther(r, func(ctx context.Context, m cluster.Member) error {
			res, err := s.sendOn(ctx, r, m, http.MethodPost, "/v1/links/rotate")
			if err != nil {
				return err
			}
			res.Body.Close()
			if res.StatusCode != http.StatusNoContent {
				return fmt.Errorf("HTTP %d", res.StatusCode)
			}
			return nil
		}, &unavailable)
		if len(unavailable) > 0 {
			s.writeError(w, r, fmt.Errorf("the link key was replaced where it could be, but cluster nodes %s did not answer: links to their sessions still work; rotate again when they are back: %w",
				strings.Join(unavailable, ", "), errdefs.ErrUnavailable))
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// linkingRunner is the agent's runner when a request asks for links: each file a call
// changes gets one as it happens, so the model reads it in the call's result and can hand
// it on, and the answer's files carry them.
type linkingRunner struct {
	tool.ToolRunner
	s *server
	r *http.Request
}

func (l linkingRunner) Execute(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	req.Links = true // an artifacts store's uploads are awaited too
	res, err := l.ToolRunner.Execute(ctx, id, req, onOutput)
	if err == nil {
		l.s.addLinks(l.r, id, res.Files)
	}
	return res, err
}

func (l linkingRunner) Command(ctx context.Context, id string, req api.CommandRequest) (*api.CommandResult, error) {
	req.Links = true
	res, err := l.ToolRunner.Command(ctx, id, req)
	if err == nil {
		l.s.addLinks(l.r, id, res.Files)
	}
	return res, err
}

func (l linkingRunner) CallTool(ctx context.Context, id, name string, req api.ToolCallRequest, onOutput func(api.Output)) (*api.ToolCallResult, error) {
	req.Links = true
	res, err := l.ToolRunner.CallTool(ctx, id, name, req, onOutput)
	if err == nil {
		l.s.addLinks(l.r, id, res.Files)
	}
	return res, err
}

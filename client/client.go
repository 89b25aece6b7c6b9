// Package client is the Go SDK of cellbox's REST API v1: sessions, executions (whole or
// streamed as they run), commands and workspace files. It imports only the standard library
// and the wire types of package api.
//
// Failures of user code are not errors: they are a Status in the result (api.StatusError,
// api.StatusTimeout, ...). An error means the request failed; when the server said why, it
// is an *Error carrying the stable code of the API's error shape:
//
//	c := client.New("http://127.0.0.1:8080")
//	s, err := c.CreateSession(ctx, api.CreateSessionRequest{})
//	if err != nil {
//		return err
//	}
//	defer c.DeleteSession(context.WithoutCancel(ctx), s.ID)
//	res, err := c.ExecuteStream(ctx, s.ID, api.ExecuteRequest{Code: "print(6*7)"},
//		func(o api.Output) { fmt.Print(o.Text) }) // "42\n" as soon as it is printed
//	if client.IsNotFound(err) {
//		// the session ended meanwhile
//	}
//
// Not for: anything the server decides (limits, timeouts, paths); the client passes
// requests through and leaves their checks to the server.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/cellbox/cellbox/api"
)

// Client talks to one cellbox server. It is safe for concurrent use.
type Client struct {
	base   string
	hc     *http.Client
	header http.Header
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests through hc instead of http.DefaultClient. Give it no
// overall Timeout if you stream long executions; use the context of each call instead.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithAPIKey sends key with every request (Authorization: Bearer key), for a server that
// requires API keys. An empty key sends nothing.
func WithAPIKey(key string) Option {
	return func(c *Client) {
		if key != "" {
			c.header.Set("Authorization", "Bearer "+key)
		}
	}
}

// WithHeader adds a header to every request, e.g. WithHeader("Authorization", "Bearer "+key).
func WithHeader(key, value string) Option { return func(c *Client) { c.header.Add(key, value) } }

// New returns a client of the server at baseURL, e.g. "http://127.0.0.1:8080".
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), hc: http.DefaultClient, header: http.Header{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// CreateSession starts a stateful session.
func (c *Client) CreateSession(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error) {
	return call[api.Session](ctx, c, http.MethodPost, "/v1/sessions", req)
}

// ListSessions describes every live session, oldest first.
func (c *Client) ListSessions(ctx context.Context) ([]api.Session, error) {
	l, err := call[api.SessionList](ctx, c, http.MethodGet, "/v1/sessions", nil)
	if err != nil {
		return nil, err
	}
	return l.Sessions, nil
}

// SessionList is ListSessions with what a cluster adds: the nodes that did not answer, whose
// sessions are missing.
func (c *Client) SessionList(ctx context.Context) (*api.SessionList, error) {
	return call[api.SessionList](ctx, c, http.MethodGet, "/v1/sessions", nil)
}

// Cluster describes the nodes of the cluster the server is one of (not found on a single
// server).
func (c *Client) Cluster(ctx context.Context) (*api.ClusterView, error) {
	return call[api.ClusterView](ctx, c, http.MethodGet, "/v1/cluster", nil)
}

// GetSession describes one session.
func (c *Client) GetSession(ctx context.Context, id string) (*api.Session, error) {
	return call[api.Session](ctx, c, http.MethodGet, sessionPath(id, ""), nil)
}

// UpdateSession changes a session: with req.LifetimeS, it ends that many seconds from
// now, busy or idle, replacing its earlier deadline; with req.Network, its egress policy is
// replaced at once (open connections the new one refuses are closed). It returns the
// session as it now is.
func (c *Client) UpdateSession(ctx context.Context, id string, req api.UpdateSessionRequest) (*api.Session, error) {
	return call[api.Session](ctx, c, http.MethodPatch, sessionPath(id, ""), req)
}

// EgressLog is a session's egress policy, its use and its recent connections, newest
// first.
func (c *Client) EgressLog(ctx context.Context, id string) (*api.EgressLog, error) {
	return call[api.EgressLog](ctx, c, http.MethodGet, sessionPath(id, "/egress"), nil)
}

// DeleteSession ends a session; its workspace is kept for the server's retention period.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	_, err := call[struct{}](ctx, c, http.MethodDelete, sessionPath(id, ""), nil)
	return err
}

// Interrupt stops the session's running cell, if any; the kernel's state is kept.
func (c *Client) Interrupt(ctx context.Context, id string) (*api.Session, error) {
	return call[api.Session](ctx, c, http.MethodPost, sessionPath(id, "/interrupt"), nil)
}

// Restart gives the session a fresh kernel; workspace files are kept.
func (c *Client) Restart(ctx context.Context, id string) (*api.Session, error) {
	return call[api.Session](ctx, c, http.MethodPost, sessionPath(id, "/restart"), nil)
}

// Pause writes the session's sandbox to disk and frees its memory (state "paused"); any
// call on the session, or Resume, resumes it with its variables as they were. The session
// must have been created pausable (idle_action "pause") on a runc server; under gVisor any
// session may be paused.
func (c *Client) Pause(ctx context.Context, id string) (*api.Session, error) {
	return call[api.Session](ctx, c, http.MethodPost, sessionPath(id, "/pause"), nil)
}

// Resume resumes a paused session (a session that is not paused is left as it is).
func (c *Client) Resume(ctx context.Context, id string) (*api.Session, error) {
	return call[api.Session](ctx, c, http.MethodPost, sessionPath(id, "/resume"), nil)
}

// Fork makes req.Count new sessions (default 1) from the session, each with a copy of its
// variables and workspace in a sandbox of its own; the session is paused meanwhile, and
// runs on after. The same conditions as Pause apply.
func (c *Client) Fork(ctx context.Context, id string, req api.ForkRequest) (*api.ForkResult, error) {
	return call[api.ForkResult](ctx, c, http.MethodPost, sessionPath(id, "/fork"), req)
}

// Command runs a program in the session's sandbox.
func (c *Client) Command(ctx context.Context, id string, req api.CommandRequest) (*api.CommandResult, error) {
	return call[api.CommandResult](ctx, c, http.MethodPost, sessionPath(id, "/commands"), req)
}

// DeleteContext drops a named execution context of the session's kernel (see
// api.ExecuteRequest.Context): its variables and working directory.
func (c *Client) DeleteContext(ctx context.Context, id, name string) error {
	_, err := call[struct{}](ctx, c, http.MethodDelete, sessionPath(id, "/contexts/"+url.PathEscape(name)), nil)
	return err
}

// Health reports the server's liveness, backend and counts.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	return call[api.Health](ctx, c, http.MethodGet, "/healthz", nil)
}

func sessionPath(id, suffix string) string {
	return "/v1/sessions/" + url.PathEscape(id) + suffix
}

// newRequest builds a request to path (already escaped) with a JSON body when in is not nil.
func (c *Client) newRequest(ctx context.Context, method, path string, in any) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// send sends req and returns the response when its status is 2xx, or the *Error it carries.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req) // its errors name the method and URL
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	return resp, nil
}

// call sends a JSON request (no body when in is nil) and decodes the JSON answer, if any.
func call[T any](ctx context.Context, c *Client, method, path string, in any) (*T, error) {
	req, err := c.newRequest(ctx, method, path, in)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return decodeBody[T](resp, req)
}

// decodeBody decodes a JSON answer; a 204 gives T's zero value.
func decodeBody[T any](resp *http.Response, req *http.Request) (*T, error) {
	var out T
	if resp.StatusCode == http.StatusNoContent {
		return &out, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode the response of %s %s: %w", req.Method, req.URL.Path, err)
	}
	return &out, nil
}

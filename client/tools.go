package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/cellbox/cellbox/api"
)

// A session's tools are functions its code made tools (from cellbox import tool; @tool on
// a typed function with a docstring); the API key's library keeps those the caller saved
// (SaveTool: a session's code only proposes one, with @tool(save=True)), for its next
// sessions to load.

// SessionTools lists the session's tools, with their input schemas and sources.
func (c *Client) SessionTools(ctx context.Context, id string) ([]api.SessionTool, error) {
	l, err := call[api.SessionToolList](ctx, c, http.MethodGet, sessionPath(id, "/tools"), nil)
	if err != nil {
		return nil, err
	}
	return l.Tools, nil
}

// CallTool calls one of the session's tools with req.Arguments (a JSON object, checked
// against the tool's schema by the server: a mismatch is invalid_argument, with the
// validator's message), after any execution already running there. The result holds the
// return value (Value, or Text when JSON cannot hold it); a tool that raised is a Status,
// not an error. onOutput, if not nil, gets what the tool prints and shows as it happens, as
// in ExecuteStream.
func (c *Client) CallTool(ctx context.Context, id, name string, req api.ToolCallRequest, onOutput func(api.Output)) (*api.ToolCallResult, error) {
	path := sessionPath(id, "/tools/"+url.PathEscape(name)+"/call")
	if onOutput == nil {
		return call[api.ToolCallResult](ctx, c, http.MethodPost, path, req)
	}
	return stream(ctx, c, path, req, "output", onOutput, func(r *api.ToolCallResult) []api.Output { return r.Outputs })
}

// SaveTool saves one of the session's tools to the API key's library, as the session has it,
// and returns it as saved. Only a tool the session's code proposed (@tool(save=True), so
// its source stands alone) can be saved; with req.Source, only if its source is still that
// (the one you read with SessionTools): otherwise a failed_precondition error (409).
func (c *Client) SaveTool(ctx context.Context, id, name string, req api.SaveToolRequest) (*api.SavedTool, error) {
	return call[api.SavedTool](ctx, c, http.MethodPost, sessionPath(id, "/tools/"+url.PathEscape(name)+"/save"), req)
}

// LoadTools defines saved tools of the API key's library in the session (those named, or
// all of them when names is empty) and returns the session's tools after; each is then the
// session's own copy, which a kernel restart defines again.
func (c *Client) LoadTools(ctx context.Context, id string, names ...string) ([]api.SessionTool, error) {
	l, err := call[api.SessionToolList](ctx, c, http.MethodPost, sessionPath(id, "/tools/load"), api.LoadToolsRequest{Names: names})
	if err != nil {
		return nil, err
	}
	return l.Tools, nil
}

// SavedTools lists the API key's saved tools, in name order.
func (c *Client) SavedTools(ctx context.Context) ([]api.SavedTool, error) {
	l, err := call[api.SavedToolList](ctx, c, http.MethodGet, "/v1/saved-tools", nil)
	if err != nil {
		return nil, err
	}
	return l.Tools, nil
}

// SavedTool describes one of the API key's saved tools, its source included.
func (c *Client) SavedTool(ctx context.Context, name string) (*api.SavedTool, error) {
	return call[api.SavedTool](ctx, c, http.MethodGet, "/v1/saved-tools/"+url.PathEscape(name), nil)
}

// DeleteSavedTool removes a tool from the API key's library; sessions that loaded it keep
// it until their kernel restarts.
func (c *Client) DeleteSavedTool(ctx context.Context, name string) error {
	_, err := call[struct{}](ctx, c, http.MethodDelete, "/v1/saved-tools/"+url.PathEscape(name), nil)
	return err
}

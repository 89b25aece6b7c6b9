package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/tool"
)

// A session's tools over MCP. The tools a connection lists are the built-in ones (python,
// shell, the languages') and the tools of the connection's session, never one named like
// a built-in: the session its latest tool call ran in (its own, or
// the one that call named with session_id; see conn.session), none before its first call.
// A client that names a session at every call thus lists the tools of the last one it
// named. Each connection has its own SDK server, and the session tools on it are kept
// equal to the session's (syncTools) after every call of the connection and whenever the
// manager tells of a change (session.ToolsChanged); the SDK sends the connection
// notifications/tools/list_changed when they change. A call of one runs
// session.Manager.CallTool in the connection's session, which checks the arguments.

// syncTools makes the session tools on c's server those of c's session now. It is quick
// (the manager keeps the tools in memory) and runs under c.toolsMu, read and change
// together, so that an older read never replaces a newer one.
func (s *Server) syncTools(ctx context.Context, c *conn) {
	ctx = context.WithoutCancel(ctx)
	c.toolsMu.Lock()
	defer c.toolsMu.Unlock()
	want := map[string]api.SessionTool{}
	if id := c.session(); id != "" {
		tools, err := s.m.Tools(ctx, id)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Warn("list a session's tools for an MCP connection", "session_id", id, "err", err)
			return
		}
		for _, t := range tools {
			// The manager refuses a tool named like a built-in one; were one to slip
			// through, AddTool would replace the built-in (and RemoveTools remove it).
			if !tool.Builtin(t.Name) {
				want[t.Name] = t
			}
		}
	}
	var gone []string
	for name := range c.listed {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		c.srv.RemoveTools(gone...)
		for _, name := range gone {
			delete(c.listed, name)
		}
	}
	for name, t := range want {
		if old, ok := c.listed[name]; ok && old.Description == t.Description && reflect.DeepEqual(old.InputSchema, t.InputSchema) {
			continue
		}
		if err := addTool(c.srv, &mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return s.callSessionTool(ctx, c, req)
			}); err != nil {
			// The manager checked it; what the SDK refuses besides (a schema's x-mcp-header
			// that is no header name, say) is not offered over MCP.
			s.log.Warn("a session's tool is not offered over MCP", "tool", t.Name, "err", err)
			if _, ok := c.listed[name]; ok {
				c.srv.RemoveTools(name)
				delete(c.listed, name)
			}
			continue
		}
		c.listed[name] = t
	}
}

// addTool adds t to srv, or says why the SDK refused it (it panics).
func addTool(srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	srv.AddTool(t, h)
	return nil
}

// toolsChanged lists anew the tools of the connections working in session id.
func (s *Server) toolsChanged(id string) {
	s.mu.Lock()
	var conns []*conn
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if c.session() == id {
			s.syncTools(session.WithTenant(context.Background(), c.tenant), c)
		}
	}
}

// callSessionTool calls one of the tools of the connection's session. Like callTool,
// everything but a canceled request is a result: bad arguments (checked by the manager
// against the tool's schema), a tool the session no longer has and a failure of the
// function are results with isError set, for the model to read.
func (s *Server) callSessionTool(ctx context.Context, c *conn, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if c = s.attach(ctx, c, req.Session); c == nil {
		return s.serviceError(ctx, errClosed)
	}
	id := c.session()
	if id == "" { // its session ended since the tool was listed
		return errorResult(fmt.Sprintf("The tool %s is gone: the session that defined it ended. Call python to start a new session, and define the tool again.", req.Params.Name)), nil
	}
	p := startProgress(ctx, req)
	res, err := s.m.CallTool(ctx, id, req.Params.Name, api.ToolCallRequest{Arguments: req.Params.Arguments}, p.output)
	p.stop()
	s.syncTools(ctx, c) // the call ran code, which may have changed the tools
	if err != nil {
		if errors.Is(err, errdefs.ErrInvalidArgument) || errors.Is(err, errdefs.ErrNotFound) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return errorResult(err.Error()), nil
		}
		return s.serviceError(ctx, err)
	}
	out := renderToolCall(res, s.opts.Render)
	result := &mcp.CallToolResult{Meta: mcp.Meta{MetaSessionID: id}, IsError: out.IsError}
	for _, text := range out.texts {
		result.Content = append(result.Content, &mcp.TextContent{Text: text})
	}
	for _, img := range out.Images {
		data, err := base64.StdEncoding.DecodeString(img.Data)
		if err != nil { // tool.RenderExecute checked it
			continue
		}
		result.Content = append(result.Content, &mcp.ImageContent{MIMEType: img.MIME, Data: data})
	}
	return result, nil
}

// toolCallText is a session tool call's result for a model: its text blocks (the return
// value first, then what the call printed, showed and raised, as the python tool renders
// a cell's), and its images.
type toolCallText struct {
	*tool.Result
	texts []string
}

// renderToolCall renders a session tool call's result: the return value alone in the
// first text block (tool.ReturnValue), for a client that reads it, then the rest as the
// python tool renders a cell's.
func renderToolCall(res *api.ToolCallResult, limits tool.RenderLimits) *toolCallText {
	cell := &api.ExecuteResult{Status: res.Status, Outputs: res.Outputs, Files: res.Files, Truncated: res.Truncated,
		DurationMS: res.DurationMS, Message: res.Message}
	out := &toolCallText{Result: tool.RenderExecute(cell, limits)}
	if v := tool.ReturnValue(res, limits); v != "" || res.HasValue {
		out.texts = append(out.texts, v)
	}
	// What the call printed, when it printed or failed: a call that returned quietly has
	// its value alone.
	if len(res.Outputs) > 0 || res.Status != api.StatusOK || res.Message != "" || len(res.Files) > 0 || res.Truncated || len(out.texts) == 0 {
		out.texts = append(out.texts, out.Text)
	}
	return out
}

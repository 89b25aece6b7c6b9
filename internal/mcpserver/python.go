package mcpserver

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/tool"
)

// The python tool server: gpt-oss's built-in `python` tool, served by cellbox. vLLM (`vllm
// serve openai/gpt-oss-20b --tool-server HOST:PORT`) connects to http://HOST:PORT/sse over
// MCP's HTTP+SSE transport, takes the server whose name is "python" as gpt-oss's python
// tool (its instructions become the tool's description in the model's prompt), and calls
// its tool "python" with {"code": ...}, reading the first text content of the result. Each
// of vLLM's sessions sends its id in the x-session-id header; calls with the same id run in
// the same cellbox session, so variables carry from one call to the next (gpt-oss's own
// reference tool starts a new container each time).
//
// vLLM sends no API key: the server is meant for its own listener (cellbox serve
// --python-tool-addr) on loopback or a network only vLLM reaches, and its sessions belong
// to one tenant (PythonOptions.Tenant).

// PythonName is the name the server gives itself and its tool: what vLLM matches.
const PythonName = "python"

const pythonInstructions = "Use this tool to run Python code. Send the code as the whole message to python; " +
	"what it prints (stdout and stderr), the value of its last expression, and any error come back. " +
	"The session is stateful, like a Jupyter notebook: variables, imports and files in " + api.WorkspaceDir +
	" persist from one call to the next in this conversation. numpy, pandas and matplotlib are installed; " +
	"internet access is what the server's policy allows (by default none). A call that runs past its time " +
	"limit is interrupted and says so."

// maxPythonSessions bounds the x-session-id → session map: past it the least recently used
// session is ended.
const maxPythonSessions = 32

// PythonOptions configure the python tool server.
type PythonOptions struct {
	// Tenant owns the sessions (as if an API key of that tenant made them); "": the keyless
	// tenant.
	Tenant string
	// Limits bound what a result puts in the model's context.
	Limits tool.RenderLimits
	Logger *slog.Logger
}

// Python is the python tool server: an http.Handler for the SSE transport at any path (GET
// opens the event stream, POST ?sessionid= carries the client's messages).
type Python struct {
	m    Sessions
	opts PythonOptions
	log  *slog.Logger
	sse  *mcp.SSEHandler

	mu       sync.Mutex
	sessions map[string]*pySession // by x-session-id
	tick     uint64
}

type pySession struct {
	id    string // the cellbox session's
	used  uint64 // tick of the latest call
	calls int    // running now: a session with calls is not evicted
}

// NewPython returns the python tool server over m.
func NewPython(m Sessions, opts PythonOptions) *Python {
	p := &Python{m: m, opts: opts, log: opts.Logger, sessions: map[string]*pySession{}}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	// An MCP server for each event stream, bound to the conversation its opening request
	// named (x-session-id): the SSE transport hands a tool call no header of its own.
	p.sse = mcp.NewSSEHandler(func(r *http.Request) *mcp.Server { return p.server(r.Header.Get("X-Session-Id")) }, nil)
	return p
}

// pyArgs are the python tool's arguments.
type pyArgs struct {
	Code string `json:"code" jsonschema:"the Python code to run"`
}

// server is an MCP server whose python tool runs in conversation conv's session.
func (p *Python) server(conv string) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: PythonName, Title: "cellbox python", Version: Version},
		&mcp.ServerOptions{Instructions: pythonInstructions, Logger: sdkLogger(p.log),
			Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}})
	mcp.AddTool(srv, &mcp.Tool{Name: PythonName, Description: pythonInstructions},
		func(ctx context.Context, _ *mcp.CallToolRequest, a pyArgs) (*mcp.CallToolResult, any, error) {
			return p.call(ctx, conv, a.Code), nil, nil
		})
	return srv
}

// ServeHTTP serves the SSE transport.
func (p *Python) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.sse.ServeHTTP(w, r) }

// call runs code in the conversation's session, making one when it has none (or its
// session ended meanwhile).
func (p *Python) call(ctx context.Context, conv, code string) *mcp.CallToolResult {
	ctx = session.WithTenant(ctx, p.opts.Tenant)
	for attempt := 0; attempt < 2; attempt++ {
		id, fresh, err := p.sessionFor(ctx, conv)
		if err != nil {
			return errorResult("cellbox could not start a Python session: " + errdefs.Public(p.log, err, "in", "python tool"))
		}
		res, err := p.m.Execute(ctx, id, api.ExecuteRequest{Code: code}, nil)
		p.done(ctx, conv, id)
		if errors.Is(err, errdefs.ErrNotFound) && !fresh {
			p.forget(conv, id) // ended (idle too long): a new one, once
			continue
		}
		if err != nil {
			return errorResult("cellbox could not run the code: " + errdefs.Public(p.log, err, "in", "python tool"))
		}
		out := tool.RenderExecute(res, p.opts.Limits)
		text := out.Text
		if fresh && attempt > 0 {
			text = "(the earlier Python session had ended: this is a new one, and earlier variables are gone)\n" + text
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: out.IsError}
	}
	return errorResult("cellbox could not keep a Python session for this conversation")
}

// sessionFor is the cellbox session of conversation conv, made when there is none.
func (p *Python) sessionFor(ctx context.Context, conv string) (id string, fresh bool, err error) {
	p.mu.Lock()
	p.tick++
	if s, ok := p.sessions[conv]; ok && conv != "" {
		s.used = p.tick
		s.calls++
		p.mu.Unlock()
		return s.id, false, nil
	}
	p.mu.Unlock()
	s, err := p.m.Create(ctx, api.CreateSessionRequest{IdleTimeoutS: 600, Metadata: map[string]string{"python-tool": conv}})
	if err != nil {
		return "", false, err
	}
	if conv == "" {
		return s.ID, true, nil // no conversation: a session per call (ended by done), as gpt-oss's own tool
	}
	p.mu.Lock()
	var evict []string
	if old, ok := p.sessions[conv]; ok { // made meanwhile by a concurrent call
		evict = append(evict, s.ID)
		s.ID = old.id
		old.calls++
	} else {
		p.sessions[conv] = &pySession{id: s.ID, used: p.tick, calls: 1}
		// Past the cap, the least recently used conversations without a call running
		// end; those with calls stay until their calls return.
		for len(p.sessions) > maxPythonSessions {
			oldest, at := "", ^uint64(0)
			for k, v := range p.sessions {
				if v.calls == 0 && v.used < at {
					oldest, at = k, v.used
				}
			}
			if oldest == "" {
				break
			}
			evict = append(evict, p.sessions[oldest].id)
			delete(p.sessions, oldest)
		}
	}
	p.mu.Unlock()
	for _, e := range evict {
		p.m.Delete(ctx, e)
	}
	return s.ID, true, nil
}

// done ends a call in session id of conversation conv: a session made for a call without
// a conversation ends with it.
func (p *Python) done(ctx context.Context, conv, id string) {
	if conv == "" {
		p.m.Delete(context.WithoutCancel(ctx), id)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.sessions[conv]; ok && s.id == id && s.calls > 0 {
		s.calls--
	}
}

// forget drops conv's session id if it is still id.
func (p *Python) forget(conv, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.sessions[conv]; ok && s.id == id {
		delete(p.sessions, conv)
	}
}

package tool

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Runner runs code and commands in a session. The session manager satisfies it in the
// server; the Go SDK does through a small adapter in the CLI.
type Runner interface {
	Execute(ctx context.Context, sessionID string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error)
	Command(ctx context.Context, sessionID string, req api.CommandRequest) (*api.CommandResult, error)
}

// ToolRunner is a Runner that can also list and call a session's tools (from cellbox
// import tool). The session manager satisfies it, and so does the CLI's adapter of the Go
// SDK; a Runner that is not one offers python and shell only.
type ToolRunner interface {
	Runner
	Tools(ctx context.Context, sessionID string) ([]api.SessionTool, error)
	CallTool(ctx context.Context, sessionID, name string, req api.ToolCallRequest, onOutput func(api.Output)) (*api.ToolCallResult, error)
}

// Run carries out a decoded call in a session and renders its result for a model. onOutput
// (may be nil) sees a python call's outputs as they come, and a session tool's. The error is
// a service failure (the session is gone, the server is shutting down, ...) or, for a
// session tool, a refusal of the call (invalid_argument: the arguments do not match its
// schema; not_found: there is no such tool now), not a failure of the code.
func Run(ctx context.Context, r Runner, sessionID string, c Call, limits RenderLimits, onOutput func(api.Output)) (*Result, error) {
	if c.Name == Shell {
		res, err := r.Command(ctx, sessionID, ShellCommand(c.Code, 0))
		if err != nil {
			return nil, err
		}
		out := RenderCommand(res, limits)
		out.Command = res
		return out, nil
	}
	if _, lang := languageTools[c.Name]; lang || c.Name == Python {
		req := api.ExecuteRequest{Code: c.Code}
		if lang {
			req.Language = c.Name
		}
		res, err := r.Execute(ctx, sessionID, req, onOutput)
		if err != nil {
			return nil, err
		}
		out := RenderExecute(res, limits)
		out.Execute = res
		return out, nil
	}
	tr, ok := r.(ToolRunner)
	if !ok {
		return nil, fmt.Errorf("this client cannot call a session's tools, only python and shell: %w", errdefs.ErrFailedPrecondition)
	}
	res, err := tr.CallTool(ctx, sessionID, c.Name, api.ToolCallRequest{Arguments: json.RawMessage(c.Code)}, onOutput)
	if err != nil {
		return nil, err
	}
	out := RenderToolCall(res, limits)
	out.Tool = res
	return out, nil
}

package tool

import (
	"context"

	"github.com/cellbox/cellbox/api"
)

// Runner runs code and commands in a session. The session manager satisfies it in the
// server; the Go SDK does through a small adapter in the CLI.
type Runner interface {
	Execute(ctx context.Context, sessionID string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error)
	Command(ctx context.Context, sessionID string, req api.CommandRequest) (*api.CommandResult, error)
}

// Run carries out a decoded call in a session and renders its result for a model. onOutput
// (may be nil) sees a python call's outputs as they come. The error is a service failure
// (the session is gone, the server is shutting down, ...), not a failure of the code.
func Run(ctx context.Context, r Runner, sessionID string, c Call, limits RenderLimits, onOutput func(api.Output)) (*Result, error) {
	switch c.Name {
	case Shell:
		res, err := r.Command(ctx, sessionID, ShellCommand(c.Code, 0))
		if err != nil {
			return nil, err
		}
		out := RenderCommand(res, limits)
		out.Command = res
		return out, nil
	default:
		res, err := r.Execute(ctx, sessionID, api.ExecuteRequest{Code: c.Code}, onOutput)
		if err != nil {
			return nil, err
		}
		out := RenderExecute(res, limits)
		out.Execute = res
		return out, nil
	}
}

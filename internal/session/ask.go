package session

import (
	"context"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// Complete asks the session kernel's completer what may stand at a cursor (Jupyter's
// complete_request). Like an execution, it waits for the session's turn.
func (m *Manager) Complete(ctx context.Context, id string, req api.CompleteRequest) (*api.Completion, error) {
	if err := checkAsk(req.Code, req.CursorPos, req.Context); err != nil {
		return nil, err
	}
	return ask(ctx, m, id, func(ctx context.Context, g *guestproto.Client) (*api.Completion, error) { return g.Complete(ctx, req) })
}

// Inspect asks the session kernel's inspector about the name at a cursor (Jupyter's
// inspect_request). Like an execution, it waits for the session's turn.
func (m *Manager) Inspect(ctx context.Context, id string, req api.InspectRequest) (*api.Inspection, error) {
	if err := checkAsk(req.Code, req.CursorPos, req.Context); err != nil {
		return nil, err
	}
	return ask(ctx, m, id, func(ctx context.Context, g *guestproto.Client) (*api.Inspection, error) { return g.Inspect(ctx, req) })
}

// IsComplete says whether code is ready to run as it stands (Jupyter's
// is_complete_request). Like an execution, it waits for the session's turn.
func (m *Manager) IsComplete(ctx context.Context, id, code string) (*api.IsComplete, error) {
	if err := checkAsk(code, nil, ""); err != nil {
		return nil, err
	}
	return ask(ctx, m, id, func(ctx context.Context, g *guestproto.Client) (*api.IsComplete, error) {
		return g.IsComplete(ctx, code)
	})
}

func checkAsk(code string, pos *int, name string) error {
	if name != "" {
		if err := guestproto.CheckContext(name); err != nil {
			return err
		}
	}
	return guestproto.CheckAsk(code, pos)
}

// ask puts a question to session id's kernel in the session's turn.
func ask[T any](ctx context.Context, m *Manager, id string, f func(context.Context, *guestproto.Client) (T, error)) (T, error) {
	var zero T
	s, err := m.lookup(ctx, id)
	if err != nil {
		return zero, err
	}
	b, rctx, release, err := m.admitIn(ctx, s, kindAsk)
	if err != nil {
		return zero, err
	}
	defer release()
	return f(rctx, b.guest)
}

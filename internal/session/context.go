package session

import (
	"context"
	"fmt"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// checkExecute checks what an execution asks of the kernel besides its code: the context's
// name and the env.
func checkExecute(req *api.ExecuteRequest, sessionLanguage string) error {
	if req.Language == "" {
		req.Language = sessionLanguage
	}
	lang, err := CheckLanguage(req.Language)
	if err != nil {
		return err
	}
	req.Language = lang
	if req.Context != "" {
		if err := guestproto.CheckContext(req.Context); err != nil {
			return err
		}
	}
	if err := guestproto.CheckUserExpressions(req.UserExpressions); err != nil {
		return err
	}
	return checkEnv(req.Env)
}

// DeleteContext drops a named execution context of a session's kernel (see
// api.ExecuteRequest.Context): its variables and working directory. Like an execution, it
// waits for the session's turn. It fails with errdefs.ErrNotFound when the kernel has no
// such context (never used, deleted, or gone with a kernel restart).
func (m *Manager) DeleteContext(ctx context.Context, id, name string) error {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("name the context to delete; the default context cannot be deleted: %w", errdefs.ErrInvalidArgument)
	}
	if err := guestproto.CheckContext(name); err != nil {
		return err
	}
	b, rctx, release, err := m.admitIn(ctx, s, kindContext)
	if err != nil {
		return err
	}
	defer release()
	err = b.guest.DeleteContext(rctx, name)
	if err != nil && !b.alive() {
		// The sandbox is replaced: every context is gone with it.
		_, err = m.afterGuestFailure(ctx, s, b, err)
	}
	return err
}

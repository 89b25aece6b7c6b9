package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/workspace"
)

// Spawn runs a program in a session beside whatever runs there, as processes run in E2B's
// sandboxes: unlike Command it does not wait for the session's turn. Its stdout and stderr
// go to onOutput as they are read (nil: into the result, as with Command). It ends, its
// whole process tree killed, when ctx ends (the result says interrupted) or its timeout
// passes (req.TimeoutS as for Command). It counts against the tenant's runs and Shutdown
// ends it, but Interrupt and Restart, which act on the session's turn, leave it alone. At
// most 16 run at once in a session; a session where one runs is not idle.
//
// dir, when set, is the folder the program starts in: an absolute path in the sandbox that
// the program enters as the sandbox's user, so it may lie outside the workspace where the
// user may go (req.Cwd must then be empty). "" means req.Cwd, as for Command.
func (m *Manager) Spawn(ctx context.Context, id, dir string, req api.CommandRequest, onOutput func(api.Output)) (*api.CommandResult, error) {
	if err := checkDir(dir, req.Cwd); err != nil {
		return nil, err
	}
	s, err := m.commandSession(ctx, id, &req)
	if err != nil {
		return nil, err
	}
	b, rctx, release, err := m.admitIn(ctx, s, kindSpawn)
	if err != nil {
		return nil, err
	}
	defer release()
	res, err := b.guest.CommandRun(rctx, newID(), dir, req, onOutput)
	if err != nil {
		return m.spawnFailed(ctx, s, b, err)
	}
	m.metrics.observe("command", res.Status, time.Duration(res.DurationMS)*time.Millisecond)
	return res, nil
}

// spawnFailed handles a guest that failed under a spawned program, as Command does: the
// sandbox is replaced and the program reported crashed. Only the holder of the session's
// turn replaces a sandbox, so Spawn waits for it first (an execution beside it, failing
// too, may be replacing it already: then there is nothing left to do).
func (m *Manager) spawnFailed(ctx context.Context, s *Session, b *box, err error) (*api.CommandResult, error) {
	if b.alive() && !errors.Is(err, guestproto.ErrGuestGone) {
		return nil, err
	}
	// The turn alone: the spawn is admitted already (its run and the tenant's count).
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := s.turn.take(wctx, nil); err != nil {
		return nil, fmt.Errorf("the sandbox stopped while the program ran: waiting for the session's running execution to finish: %w", err)
	}
	defer s.turn.give()
	if m.adm.isClosed() {
		return nil, fmt.Errorf("the sandbox stopped while the program ran: %w", errShuttingDown)
	}
	s.mu.Lock()
	replaced := s.box != b
	s.busy = true // while its sandbox is replaced, as under an execution
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy = false
		s.mu.Unlock()
	}()
	if !replaced {
		if _, ferr := m.afterGuestFailure(ctx, s, b, err); ferr != nil {
			return nil, ferr
		}
	}
	return &api.CommandResult{Status: api.StatusCrashed, ExitCode: -1, Files: []api.FileChange{},
		Message: "the sandbox stopped unexpectedly and was restarted: files in /mnt/data are kept"}, nil
}

// checkDir checks Spawn's dir.
func checkDir(dir, cwd string) error {
	switch {
	case dir == "":
		return nil
	case cwd != "":
		return fmt.Errorf("give the program's folder once, as cwd or as an absolute folder: %w", errdefs.ErrInvalidArgument)
	case !strings.HasPrefix(dir, "/") || strings.ContainsRune(dir, 0) || len(dir) >= workspace.MaxPathLen:
		return fmt.Errorf("the program's folder must be an absolute path without NUL bytes, shorter than %d bytes: %w", workspace.MaxPathLen, errdefs.ErrInvalidArgument)
	}
	return nil
}

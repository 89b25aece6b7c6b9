package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// Recovery after a dead guest: the holder of the session's turn replaces the sandbox on
// the same workspace; when that fails the session ends (EndFailed).

// afterGuestFailure handles a guest that stopped answering during an execution: unless the
// session was ended meanwhile, a new sandbox replaces it on the same workspace, and the
// execution is reported as crashed.
func (m *Manager) afterGuestFailure(ctx context.Context, s *Session, b *box, err error) (*api.ExecuteResult, error) {
	if b.alive() && !errors.Is(err, guestproto.ErrGuestGone) {
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("session %s ended while the code ran: %w", s.id, errdefs.ErrNotFound)
	}
	m.log.Warn("sandbox died; starting a new one on the same workspace", "session_id", s.id, "err", err)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	b.stop(cctx)
	cancel()
	nb, serr := m.startBox(context.WithoutCancel(ctx), s.id, b.boxSpec, b.ws)
	if serr != nil {
		m.end(context.WithoutCancel(ctx), s.id, EndFailed)
		return nil, fmt.Errorf("the sandbox stopped and could not be restarted, so the session ended (its files are kept): %w", serr)
	}
	s.mu.Lock()
	if s.closed { // ended while we restarted
		s.mu.Unlock()
		m.discard(ctx, nb, true)
		return nil, fmt.Errorf("session %s ended while the code ran: %w", s.id, errdefs.ErrNotFound)
	}
	s.box = nb
	ca := s.ca
	s.mu.Unlock()
	if err := m.trust(context.WithoutCancel(ctx), nb, nb.guest, ca); err != nil {
		m.log.Warn("the new sandbox does not trust the session's certificate authority", "session_id", s.id, "err", err)
	}
	return &api.ExecuteResult{
		Status:          api.StatusCrashed,
		Outputs:         []api.Output{},
		Files:           []api.FileChange{},
		Message:         "the sandbox stopped unexpectedly and was restarted: variables are lost, files in /mnt/data are kept",
		KernelRestarted: true,
	}, nil
}

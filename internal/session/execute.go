package session

import (
	"context"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// Execute runs code in a session, after any execution already running there. Outputs go
// to onOutput as they happen (may be nil).
func (m *Manager) Execute(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	return m.ExecuteInteractive(ctx, id, req, ExecuteHooks{OnOutput: onOutput})
}

// ExecuteHooks are what the caller of ExecuteInteractive handles while the cell runs.
type ExecuteHooks struct {
	// OnOutput gets each output as it happens; nil: none.
	OnOutput func(api.Output)
	// OnInput answers the cell's input() and getpass(), one at a time, from a goroutine of
	// its own; ctx ends with the run. Its error is the cell's EOFError. nil: they fail at
	// once in the cell (StdinNotImplementedError), as in every execution but a Jupyter
	// client's that allows stdin.
	OnInput func(ctx context.Context, prompt string, password bool) (string, error)
	// Trace, when set, gets where the cell's time went in the sandbox (guestproto.Trace).
	Trace *guestproto.Trace
}

// ExecuteInteractive is Execute whose cell may ask its caller for input (hooks.OnInput).
func (m *Manager) ExecuteInteractive(ctx context.Context, id string, req api.ExecuteRequest, hooks ExecuteHooks) (*api.ExecuteResult, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if req.TimeoutS, err = m.timeout(req.TimeoutS); err != nil {
		return nil, err
	}
	if err := checkExecute(&req, s.language); err != nil {
		return nil, err
	}
	s.mu.Lock()
	count := s.execCount
	s.mu.Unlock()
	if res, err := fromTypeScript(ctx, &req, count, hooks.OnOutput); res != nil || err != nil {
		return res, err
	}
	b, rctx, release, err := m.admitIn(ctx, s, kindExecute)
	if err != nil {
		return nil, err
	}
	defer release()
	res, set, err := runKernel(rctx, b.guest, req, false, hooks)
	if err != nil {
		if res, err = m.afterGuestFailure(ctx, s, b, err); err != nil {
			return nil, err
		}
		b = m.current(s)
	}
	m.afterRun(ctx, s, b, res, set)
	res.Message = withNote(res.Message, m.sessionArtifacts(s, res.Files, req.Links))
	s.mu.Lock()
	s.execCount = res.ExecutionCount
	notice := s.notice
	if notice != "" {
		res.Outputs = append([]api.Output{{Type: api.OutputStream, Name: "stderr", Text: notice}}, res.Outputs...)
		s.notice = ""
	}
	s.mu.Unlock()
	m.metrics.observe("execute", res.Status, time.Duration(res.DurationMS)*time.Millisecond)
	return res, nil
}

// Interrupt stops what runs in the session, if anything: a cell is interrupted (its state
// kept), a command killed with everything it started. The run's caller gets its result.
func (m *Manager) Interrupt(ctx context.Context, id string) error {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return err
	}
	s.interrupt()
	return nil
}

// interrupt ends the run holding the session's turn, if any.
func (s *Session) interrupt() {
	s.mu.Lock()
	s.lastActive = time.Now()
	s.mu.Unlock()
	s.turn.interrupt()
}

// Restart interrupts whatever runs and gives the session a fresh kernel; files stay. The
// session's tools are dropped but for the saved ones, which are loaded again; the next
// execution is told which were dropped.
func (m *Manager) Restart(ctx context.Context, id string) error {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return err
	}
	// Admitted as a run of the tenant, it interrupts whatever holds the turn and takes it.
	b, rctx, release, err := m.admitIn(ctx, s, kindRestart)
	if err != nil {
		return err
	}
	defer release()
	err = b.guest.Restart(rctx)
	if err != nil && !b.alive() {
		if _, err = m.afterGuestFailure(ctx, s, b, err); err == nil {
			b = m.current(s)
		}
	}
	if err == nil {
		msg := m.newKernel(ctx, s, b)
		s.mu.Lock()
		s.execCount = 0
		if msg != "" {
			s.notice += "[cellbox: " + msg + "]\n"
		}
		s.mu.Unlock()
	}
	return err
}

// commandSession finds the session of a command (Command, Spawn), after checking the
// request and filling in its timeout.
func (m *Manager) commandSession(ctx context.Context, id string, req *api.CommandRequest) (*Session, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if err = checkCommand(req); err == nil {
		req.TimeoutS, err = m.timeout(req.TimeoutS)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Command runs a program in a session, after any execution already running there.
func (m *Manager) Command(ctx context.Context, id string, req api.CommandRequest) (*api.CommandResult, error) {
	s, err := m.commandSession(ctx, id, &req)
	if err != nil {
		return nil, err
	}
	b, rctx, release, err := m.admitIn(ctx, s, kindCommand)
	if err != nil {
		return nil, err
	}
	defer release()
	res, err := b.guest.Command(rctx, req)
	if err != nil {
		if _, ferr := m.afterGuestFailure(ctx, s, b, err); ferr != nil {
			return nil, ferr
		}
		return &api.CommandResult{Status: api.StatusCrashed, ExitCode: -1, Files: []api.FileChange{},
			Message: "the sandbox stopped unexpectedly and was restarted: files in /mnt/data are kept"}, nil
	}
	res.Message = withNote(res.Message, m.sessionArtifacts(s, res.Files, req.Links))
	m.metrics.observe("command", res.Status, time.Duration(res.DurationMS)*time.Millisecond)
	return res, nil
}

package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// askTimeout bounds a question: a completer or inspector that takes longer (user code's
// __getattr__ in a loop) is interrupted, and the kernel restarted if it ignores that.
const askTimeout = 10 * time.Second

// ask answers OpComplete, OpInspect and OpIsComplete through the runner (IPython's own
// completer, inspector and input checker), after any cell: the server sends them in the
// session's turn.
func (s *server) ask(ctx context.Context, req *guestproto.Request) guestproto.Message {
	r := newRun("", false, askTimeout, time.Second, nil)
	r.op = req.Op
	var pos *int
	switch req.Op {
	case guestproto.OpComplete:
		if req.Complete == nil {
			return errMsg(api.CodeInvalidArgument, "the complete request has no body")
		}
		r.code, r.context, pos = req.Complete.Code, req.Complete.Context, req.Complete.CursorPos
	case guestproto.OpInspect:
		if req.Inspect == nil {
			return errMsg(api.CodeInvalidArgument, "the inspect request has no body")
		}
		r.code, r.context, r.detail, pos = req.Inspect.Code, req.Inspect.Context, min(max(req.Inspect.DetailLevel, 0), 1), req.Inspect.CursorPos
	default:
		r.code = req.Code
	}
	if err := guestproto.CheckAsk(r.code, pos); err != nil {
		return errFrom(err)
	}
	r.pos = utf8.RuneCountInString(r.code) // absent: the end
	if pos != nil {
		r.pos = *pos
	}
	s.kmu.Lock()
	defer s.kmu.Unlock()
	cfg := s.config()
	if cfg == nil {
		return errMsg(api.CodeFailedPrecondition, "the sandbox is not configured yet")
	}
	if r.context != "" && !s.ctxs[r.context] {
		return errMsg(api.CodeNotFound, fmt.Sprintf("no execution context %q in this session's kernel", r.context))
	}
	k := s.currentKernel()
	if k == nil || k.isDead() {
		return errMsg(api.CodeFailedPrecondition, "the kernel is not running: run a cell to start it")
	}
	r.budget = newBudget(cfg.MaxOutputBytes, cfg.MaxRichBytes) // what user code prints meanwhile is dropped
	k.begin(r)
	stop := context.AfterFunc(ctx, func() { k.stopRun(r, stopInterrupt) })
	defer stop()
	<-r.done
	if r.died {
		if err := s.restartLocked(false); err != nil {
			s.log.Warn("restart the kernel", "error", err)
		}
		return errMsg(api.CodeUnavailable, "the kernel died while answering and was restarted; variables are lost, files in /mnt/data are kept")
	}
	var m guestproto.Message
	var err error
	switch req.Op {
	case guestproto.OpComplete:
		m.Completion = &api.Completion{Matches: []string{}, CursorStart: r.pos, CursorEnd: r.pos}
		if r.ok {
			err = json.Unmarshal(r.reply, m.Completion)
		}
	case guestproto.OpInspect:
		m.Inspection = &api.Inspection{}
		if r.ok {
			err = json.Unmarshal(r.reply, m.Inspection)
		}
		if m.Inspection.Found {
			o := api.Output{Type: api.OutputDisplayData, Data: m.Inspection.Data}
			newBudget(cfg.MaxOutputBytes, cfg.MaxRichBytes).rich(&o)
			m.Inspection.Data = o.Data
		}
	default:
		m.IsComplete = &api.IsComplete{Status: "unknown"}
		if r.ok {
			err = json.Unmarshal(r.reply, m.IsComplete)
		}
	}
	if err != nil {
		return errMsg(api.CodeUnavailable, "the kernel's answer could not be read")
	}
	return m
}

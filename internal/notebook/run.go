package notebook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/cellbox/cellbox/api"
)

// Sessions is what a run uses of the session manager (*session.Manager).
type Sessions interface {
	Create(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error)
	Get(ctx context.Context, id string) (*api.Session, error)
	Execute(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error)
	Delete(ctx context.Context, id string) error
}

// Runner runs notebooks in sessions.
type Runner struct {
	s   Sessions
	log *slog.Logger
}

// New returns a Runner over s; log (nil: none) hears of sessions it failed to end.
func New(s Sessions, log *slog.Logger) *Runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{s: s, log: log}
}

// Job is a notebook run that Prepare checked, ready to run.
type Job struct {
	r   *Runner
	nb  *Notebook
	req api.NotebookRequest
}

// Prepare checks req (see api.NotebookRequest): its notebook, its parameters (injected
// then), the session it names, which must be the caller's. Nothing runs yet, and no
// session is made: a refusal costs nothing.
func (r *Runner) Prepare(ctx context.Context, req api.NotebookRequest) (*Job, error) {
	if req.Notebook == nil {
		return nil, invalid("the request has none: send {\"notebook\": <the .ipynb file's JSON>}")
	}
	nb, err := Parse(req.Notebook)
	if err != nil {
		return nil, err
	}
	if err := nb.Inject(req.Parameters); err != nil {
		return nil, err
	}
	switch {
	case req.SessionID != "" && req.Session != nil:
		return nil, invalid("give session_id (run in that session) or session (a new one's settings), not both")
	case req.CellTimeoutS < 0:
		return nil, invalid("cell_timeout_s must not be negative (0: the server's default)")
	}
	if req.SessionID != "" {
		if _, err := r.s.Get(ctx, req.SessionID); err != nil {
			return nil, err
		}
	}
	return &Job{r: r, nb: nb, req: req}, nil
}

// Run runs the notebook and returns it executed: in the request's session, else in a new
// one, ended afterwards unless the request keeps it. The code cells run in order, each one
// execution of the session (its outputs with display updates), and onCell (nil: none) gets
// each as it finishes. A cell that fails is a status of the result; an error is a request
// that could not be served (no room for a session, a refused timeout, the session gone,
// ...). When ctx ends, the running cell is interrupted and the run stops.
func (j *Job) Run(ctx context.Context, onCell func(api.NotebookCell)) (*api.NotebookResult, error) {
	start := time.Now()
	r, req := j.r, j.req
	id := req.SessionID
	if id == "" {
		create := api.CreateSessionRequest{}
		if req.Session != nil {
			create = *req.Session
		}
		sess, err := r.s.Create(ctx, create)
		if err != nil {
			return nil, err
		}
		id = sess.ID
		if !req.KeepSession {
			defer r.end(ctx, id)
		}
	}
	res := &api.NotebookResult{Status: api.StatusOK, SessionID: id}
	if err := r.run(ctx, id, j.nb, req, res, onCell); err != nil {
		return nil, err
	}
	var err error
	if res.Notebook, err = json.Marshal(j.nb); err != nil {
		return nil, fmt.Errorf("encode the notebook: %w", err)
	}
	res.DurationMS = time.Since(start).Milliseconds()
	return res, nil
}

// MaxOutputBytes bounds the outputs a run keeps, all cells' together (as JSON): past it,
// cells still run, and their outputs are dropped for a note.
const MaxOutputBytes = 64 << 20

// run executes nb's cells in session id, recording the first failure in res.
func (r *Runner) run(ctx context.Context, id string, nb *Notebook, req api.NotebookRequest, res *api.NotebookResult, onCell func(api.NotebookCell)) error {
	var d displays
	left := MaxOutputBytes
	for i, c := range nb.cells {
		if !c.runs() {
			continue
		}
		if ctx.Err() != nil { // between cells: no cell to interrupt
			res.Status, res.Message, res.FailedCell = api.StatusInterrupted, "the request ended before this cell ran", &i
			return nil
		}
		d.clearNext = false
		lang := c.lang
		if lang == "" {
			lang = nb.lang
		}
		er, err := r.s.Execute(ctx, id, api.ExecuteRequest{Code: c.source, Language: lang, TimeoutS: req.CellTimeoutS, DisplayUpdates: true}, nil)
		if err != nil {
			return fmt.Errorf("cell %d: %w", i, err)
		}
		outs, cut := keep(er.Outputs, &left)
		d.add(c, outs)
		res.Truncated = res.Truncated || cut || er.Truncated
		if er.ExecutionCount > 0 {
			n := er.ExecutionCount
			c.count = &n
		}
		ename, evalue := errorOf(er.Outputs)
		if onCell != nil {
			onCell(api.NotebookCell{Index: i, Cells: len(nb.cells), Status: er.Status, ExecutionCount: er.ExecutionCount,
				Outputs: c.outputs, EName: ename, EValue: evalue, Message: er.Message, Files: er.Files, DurationMS: er.DurationMS})
		}
		if er.Status == api.StatusOK || (er.Status == api.StatusError && c.tagged(TagRaisesException)) {
			continue
		}
		if res.FailedCell == nil {
			res.Status, res.FailedCell, res.EName, res.EValue, res.Message = er.Status, &i, ename, evalue, er.Message
		}
		goOn := req.AllowErrors && (er.Status == api.StatusError || er.Status == api.StatusTimeout) && !er.KernelRestarted
		if !goOn {
			return nil
		}
	}
	return nil
}

// keep returns the first of outs that fit in what is *left of the run's output budget,
// and a note in place of the others (cut); it takes what they use from *left.
func keep(outs []api.Output, left *int) (kept []api.Output, cut bool) {
	for i, o := range outs {
		b, _ := json.Marshal(o)
		if len(b) > *left {
			*left = 0
			note := fmt.Sprintf("\n[cellbox: output dropped: this notebook's outputs reached the limit of %d MiB per run]\n", MaxOutputBytes>>20)
			return append(outs[:i:i], api.Output{Type: api.OutputStream, Name: "stderr", Text: note}), true
		}
		*left -= len(b)
	}
	return outs, false
}

// errorOf is the name and value of the last error among outs.
func errorOf(outs []api.Output) (ename, evalue string) {
	for _, o := range outs {
		if o.Type == api.OutputError {
			ename, evalue = o.EName, o.EValue
		}
	}
	return ename, evalue
}

// end deletes the session a run made, whether or not the run's caller is still there.
func (r *Runner) end(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := r.s.Delete(ctx, id); err != nil {
		r.log.Warn("end a notebook's session", "session_id", id, "err", err)
	}
}

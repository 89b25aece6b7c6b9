package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guest/pyrunner"
	"github.com/cellbox/cellbox/internal/guestproto"
)

func (s *server) configure(cfg *guestproto.Config) guestproto.Message {
	if cfg == nil || cfg.Python == "" {
		return errMsg(api.CodeInvalidArgument, "the configuration must name the Python interpreter")
	}
	c := withDefaults(*cfg)
	s.kmu.Lock()
	defer s.kmu.Unlock()
	s.mu.Lock()
	old, k := s.cfg, s.kernel
	s.cfg = &c
	s.mu.Unlock()
	if s.reconfigure(old, &c, k) {
		return guestproto.Message{OK: true}
	}
	s.dropLangKernels("", true) // they had the old configuration
	if err := s.restartLocked(true); err != nil {
		return errFrom(err)
	}
	return guestproto.Message{OK: true}
}

// reconfigure applies c to kernel k, configured with old, without a new kernel where it
// can: k has run no cell, and c differs from old only in its env (which k then takes) or
// in what the guest alone uses. A warm sandbox taken by a session with an env is set up so.
// The caller holds kmu.
func (s *server) reconfigure(old, c *guestproto.Config, k *kernel) bool {
	if old == nil || k == nil || k.isDead() || s.count.Load() != 0 || len(s.ctxs) != 0 || s.hasLangKernels() ||
		c.Python != old.Python || c.Preimport != old.Preimport {
		return false
	}
	if maps.Equal(c.Env, old.Env) {
		return true
	}
	r := newRun("", true, startTimeout, 0, nil)
	r.op, r.envList, r.startup = "env", s.kernelSpec(c).env, true
	if err := k.begin(r); err != nil {
		return false
	}
	<-r.done
	if !r.ok {
		s.log.Info("the kernel's new environment needs a new kernel", "reason", r.ename)
	}
	return r.ok
}

func (s *server) kernelSpec(cfg *guestproto.Config) kernelSpec {
	env := mergeEnv(os.Environ(), egressEnv(s.opts.Egress, s.bundlePath()), pyrunner.KernelEnv(s.tmp), cfg.Env)
	// A line carries an output, or the kernel's tools (up to MaxToolReport, and its framing).
	maxLine := min(max(cfg.MaxRichBytes+cfg.MaxOutputBytes, guestproto.MaxToolReport)+1<<20, guestproto.MaxMessageSize)
	return kernelSpec{user: s.user, python: cfg.Python, env: env, dir: s.opts.Workspace, maxLine: maxLine,
		template: s.opts.Template, preimport: cfg.Preimport, log: s.log}
}

// restartLocked replaces the kernel with a fresh one and runs the preimport code in it.
// A kernel forked from a template that ran the same pre-imports has them already: it only
// answers a ping, unless warm, where nobody waits for it (a new sandbox's first kernel):
// running the pre-imports once more, and showing a value, writes while nobody waits most
// of the memory its first cells would copy from the template. The caller holds kmu.
func (s *server) restartLocked(warm bool) error {
	s.mu.Lock()
	old, cfg, closing := s.kernel, s.cfg, s.closing
	s.kernel = nil
	s.mu.Unlock()
	if old == nil {
		return s.startLocked(cfg, closing, warm)
	}
	// The old kernel is stopped now and killed once the new one is up: its teardown is
	// then off the restart's path (beside the new kernel's start it would slow both).
	old.freeze()
	defer old.killLater()
	err := s.startLocked(cfg, closing, warm)
	if err != nil && !errors.Is(err, errClosing) {
		// A sandbox at its limits (pids, memory) may have no room for a second kernel, at
		// its fork or as it starts: the old one's room first, and once more.
		old.kill()
		err = s.startLocked(cfg, closing, warm)
	}
	return err
}

// kernelStartError classes a kernel's start failure: the sandbox at its limits, or else the
// kernel's configuration (interpreter, environment) at fault.
func kernelStartError(err error) error {
	if atLimit(err) {
		return fmt.Errorf("%s: %s: %w", err.Error(), atLimitAdvice, errdefs.ErrResourceExhausted)
	}
	return fmt.Errorf("%s: %w", err.Error(), errdefs.ErrInvalidArgument)
}

// startLocked starts a kernel and makes it the current one (restartLocked).
func (s *server) startLocked(cfg *guestproto.Config, closing, warm bool) error {
	if closing {
		return fmt.Errorf("%w: %w", errClosing, errdefs.ErrUnavailable)
	}
	k, err := startKernel(s.kernelSpec(cfg))
	if err != nil {
		return kernelStartError(err)
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		k.kill()
		return fmt.Errorf("%w: %w", errClosing, errdefs.ErrUnavailable)
	}
	s.kernel = k
	s.gen++
	s.mu.Unlock()
	s.count.Store(0)
	s.ctxs = map[string]bool{}
	// The runner reads its first command once IPython is up: the preimport (or an empty
	// cell) finishing means the kernel is ready.
	r := newRun(cfg.Preimport, true, max(startTimeout, seconds(cfg.DefaultTimeoutS)), 0, nil)
	r.startup = true
	if k.preimported && !warm {
		r.op = "ping"
	}
	k.begin(r)
	<-r.done
	fail := func(e error) error {
		k.kill()
		s.mu.Lock()
		if s.kernel == k {
			s.kernel = nil
		}
		s.mu.Unlock()
		return e
	}
	switch {
	case r.died:
		why := notStarted(r, seconds(max(startTimeout.Seconds(), cfg.DefaultTimeoutS)))
		return fail(fmt.Errorf("the Python kernel did not start: %s: %w", why, errdefs.ErrUnavailable))
	case !r.ok && r.errOut != nil && r.errOut.EName == "ModuleNotFoundError":
		// The preimport warms up what the image may have: a kernel on an image without
		// pandas starts without it, and user code's own import says what is missing.
		s.log.Warn("the preimport code imports a module this image lacks; the kernel starts without it", "error", r.errOut.EValue)
	case !r.ok:
		why := r.ename
		if r.errOut != nil {
			why = r.errOut.EName + ": " + r.errOut.EValue
		}
		return fail(fmt.Errorf("the preimport code failed: %s: %w", why, errdefs.ErrInvalidArgument))
	}
	if warm {
		// And a value shown, as most first cells show one: IPython's display machinery
		// writes ~190 pages of the template's (~3 ms on a VM here) the first time it runs.
		r := newRun("1", true, startTimeout, 0, nil)
		r.startup = true
		k.begin(r)
		<-r.done
		if r.died {
			return fail(fmt.Errorf("the Python kernel died after its start: %s: %w", exitText(r.ws), errdefs.ErrUnavailable))
		}
	}
	return nil
}

// notStarted says why a kernel's start (run r, with time limit limit) failed: its time ran
// out, or the last line it wrote to stderr (R's last is "Execution halted": the error is the
// line before), or its exit.
func notStarted(r *cellRun, limit time.Duration) string {
	why := lastLine(bytes.TrimSuffix(bytes.TrimSpace(r.errTail), []byte("Execution halted")))
	switch {
	case r.stop == stopTimeout:
		return fmt.Sprintf("it was not ready within %s", limit)
	case why != "":
		return why
	case r.died:
		return "it exited with " + exitText(r.ws)
	}
	return "its runner did not answer"
}

// lastLine is the last non-empty line of b, capped, for an error message.
func lastLine(b []byte) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	l := string(bytes.TrimSpace(lines[len(lines)-1]))
	if len(l) > 500 {
		l = l[:runeCut([]byte(l), 500)] + "..."
	}
	return l
}

func (s *server) currentKernel() *kernel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kernel
}

// interrupt stops run id (a cell or a command), now or, if it has not arrived yet, as soon
// as it does. Without an id it stops the running cell, if any.
func (s *server) interrupt(id string) {
	if id != "" {
		s.runs.interrupt(id)
		return
	}
	if cancel := s.cell.Load(); cancel != nil {
		(*cancel)()
	}
}

func (s *server) restart() guestproto.Message {
	if s.config() == nil {
		return errMsg(api.CodeFailedPrecondition, "the sandbox is not configured yet")
	}
	s.mu.Lock()
	k, gen := s.kernel, s.gen
	for _, lk := range s.langs {
		lk.k.stopRun(nil, stopRestart)
	}
	s.mu.Unlock()
	if k != nil {
		k.stopRun(nil, stopRestart) // a running cell ends now; its Execute restarts the kernel
	}
	s.kmu.Lock()
	defer s.kmu.Unlock()
	s.dropLangKernels("", true) // each starts again at its next cell
	s.mu.Lock()
	cur, g := s.kernel, s.gen
	s.mu.Unlock()
	if g != gen && cur != nil && !cur.isDead() {
		return guestproto.Message{OK: true} // restarted while we waited
	}
	if err := s.restartLocked(false); err != nil {
		return errFrom(err)
	}
	return guestproto.Message{OK: true}
}

// execute runs a cell. Its run ends (the cell is interrupted) when ctx does, which is when
// the caller goes away, or when an interrupt names runID, before or after it began. A quiet
// one (a tool's call) is not counted: the execution count stays. The kernel's tools, if the
// cell changed them, go before the result.
//
// With replies (Request.Stdin) the cell's input() asks the caller: an Input message on the
// stream, answered by the next value on replies. With Request.Trace the result goes with
// the cell's Trace, measured from callStart, when the guest took the call.
func (s *server) execute(ctx context.Context, w io.Writer, call *guestproto.Request, replies <-chan guestproto.InputReply, callStart time.Time) {
	runID, req, quiet := call.RunID, call.Execute, call.Quiet
	if req == nil {
		writeMsg(w, errMsg(api.CodeInvalidArgument, "the execute request has no body"))
		return
	}
	if req.Context != "" {
		if err := guestproto.CheckContext(req.Context); err != nil {
			writeMsg(w, errFrom(err))
			return
		}
	}
	if e := checkEnv(req.Env); e != nil {
		writeMsg(w, guestproto.Message{Error: e})
		return
	}
	if err := guestproto.CheckUserExpressions(req.UserExpressions); err != nil {
		writeMsg(w, errFrom(err))
		return
	}
	if !s.busy.CompareAndSwap(false, true) {
		writeMsg(w, errMsg(api.CodeFailedPrecondition, "another cell is still running in this session; wait for it or interrupt it"))
		return
	}
	ctx, end := s.runs.start(ctx, runID)
	defer end()
	cancel := context.CancelFunc(end)
	s.cell.Store(&cancel)
	release := sync.OnceFunc(func() {
		s.cell.Store(nil)
		s.busy.Store(false)
	})
	defer release()
	s.kmu.Lock()
	defer s.kmu.Unlock()
	cfg := s.config()
	// An answer given before the cell runs frees the session first: the caller may send
	// its next cell as soon as it reads it.
	if cfg == nil {
		release()
		writeMsg(w, errMsg(api.CodeFailedPrecondition, "the sandbox is not configured yet"))
		return
	}
	timeout := seconds(req.TimeoutS)
	if timeout <= 0 {
		timeout = seconds(cfg.DefaultTimeoutS)
	}
	lang, rt, err := kernelLanguage(req.Language)
	if err == nil && rt != nil && len(req.UserExpressions) > 0 {
		err = fmt.Errorf("user_expressions are Python expressions; this cell is %s: %w", rt.name, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		release()
		writeMsg(w, errFrom(err))
		return
	}
	var (
		k    *kernel
		lk   *langKernel // k's, for a language other than Python
		note string
	)
	if rt == nil {
		if k, note, err = s.pythonKernelLocked(); err != nil {
			release()
			writeMsg(w, errFrom(err))
			return
		}
	} else {
		if lk, note, err = s.langKernelLocked(cfg, langKey{lang, req.Context}, rt); err != nil {
			release()
			writeMsg(w, errFrom(err))
			return
		}
		k = lk.k
	}
	count := func() int {
		if lk != nil {
			return lk.count
		}
		return int(s.count.Load())
	}
	if ctx.Err() != nil {
		// Interrupted before it began: none of the code runs.
		release()
		writeMsg(w, guestproto.Message{Result: &api.ExecuteResult{Status: api.StatusInterrupted,
			ExecutionCount: count(), Outputs: []api.Output{}, Files: []api.FileChange{},
			Message: "the cell was interrupted before it started; none of it ran"}})
		return
	}
	if rt == nil && req.Context != "" && !s.ctxs[req.Context] {
		if err := s.contextsFull(); err != nil {
			release()
			writeMsg(w, errFrom(err))
			return
		}
		s.ctxs[req.Context] = true // the runner makes it when the cell arrives
	}
	if rt != nil {
		if bad := unrunnable(rt, req.Code); bad != nil {
			// The code cannot run: that is its result.
			release()
			writeMsg(w, guestproto.Message{Output: bad})
			writeMsg(w, guestproto.Message{Result: &api.ExecuteResult{Status: api.StatusError, ExecutionCount: count(),
				Outputs: []api.Output{}, Files: []api.FileChange{}}})
			return
		}
	}
	r := newRun(req.Code, false, timeout, seconds(cfg.InterruptGraceS), newBudget(cfg.MaxOutputBytes, cfg.MaxRichBytes))
	r.context, r.env, r.quiet = req.Context, req.Env, quiet
	r.displays, r.exprs, r.stdin = req.DisplayUpdates, req.UserExpressions, replies != nil && rt == nil
	r.trace = call.Trace
	t := time.Now()
	before := s.root.snapshot()
	files := time.Since(t)
	oom0 := s.oom.read()
	start := time.Now()
	k.begin(r)
	stopOnEnd := context.AfterFunc(ctx, func() { k.stopRun(r, stopInterrupt) })
	defer stopOnEnd()
	failed := false
	send := func() {
		outs, in := r.take()
		for _, o := range outs {
			if failed {
				return
			}
			if err := writeMsg(w, guestproto.Message{Output: &o}); err != nil {
				failed = true
				k.stopRun(r, stopInterrupt) // nobody is listening any more
			}
		}
		if in != nil && !failed {
			if err := writeMsg(w, guestproto.Message{Input: in}); err != nil {
				failed = true
				k.stopRun(r, stopInterrupt)
				return
			}
			// The answer goes to the runner, which waits for it, unless the run ended first.
			go func() {
				var line []byte
				select {
				case rep := <-replies:
					if rep.Error != "" {
						line, _ = json.Marshal(map[string]string{"op": "input", "error": rep.Error})
					} else {
						line, _ = json.Marshal(map[string]string{"op": "input", "value": rep.Value})
					}
				case <-r.done:
					return
				}
				k.write(append(line, '\n'))
			}()
		}
	}
	for waiting := true; waiting; {
		select {
		case <-r.notify:
		case <-r.done:
			waiting = false
		}
		send()
	}
	k.mu.Lock()
	stop, sigSent, killed := r.stop, r.sigSent, r.killed
	k.mu.Unlock()
	res := &api.ExecuteResult{Status: api.StatusOK, ExecutionCount: r.count, Truncated: r.budget.truncated(),
		DurationMS: r.finished.Sub(start).Milliseconds()}
	const lost = "variables are lost, files in /mnt/data are kept"
	switch {
	case r.died && killed:
		switch stop {
		case stopTimeout:
			res.Status = api.StatusTimeout
			res.Message = fmt.Sprintf("the cell ran past its time limit of %s and did not stop when interrupted, so the kernel was restarted; %s", timeout, lost)
		case stopInterrupt:
			res.Status = api.StatusInterrupted
			res.Message = "the cell did not stop when interrupted, so the kernel was restarted; " + lost
		default:
			res.Status = api.StatusInterrupted
			res.Message = "the kernel was restarted while this cell ran; " + lost
		}
	case r.died:
		if s.oom.known() && s.oom.read() > oom0 {
			res.Status = api.StatusOOM
			limit := ""
			if cfg.MemoryMB > 0 {
				limit = fmt.Sprintf(" (limit %d MiB)", cfg.MemoryMB)
			}
			res.Message = fmt.Sprintf("the kernel ran out of memory%s and was restarted; %s", limit, lost)
		} else {
			res.Status = api.StatusCrashed
			why := exitText(r.ws)
			if r.ws.Signaled() && r.ws.Signal() == unix.SIGKILL && !s.oom.known() {
				why += ", perhaps for using too much memory"
			}
			res.Message = fmt.Sprintf("the kernel died (%s) and was restarted; %s", why, lost)
		}
	case sigSent && stop == stopTimeout:
		res.Status = api.StatusTimeout
		res.Message = fmt.Sprintf("the cell ran past its time limit of %s and was interrupted; variables are kept", timeout)
	case sigSent && stop == stopInterrupt:
		res.Status = api.StatusInterrupted
		res.Message = "the cell was interrupted; variables are kept"
	case !r.ok:
		res.Status = api.StatusError
	}
	if note != "" {
		res.Message = note + " " + res.Message
	}
	res.KernelRestarted = r.died || note != ""
	if len(req.UserExpressions) > 0 && !r.died {
		res.UserExpressions = map[string]api.Output{}
		for k, o := range r.answers {
			if _, asked := req.UserExpressions[k]; asked && (o.Type == api.OutputDisplayData || o.Type == api.OutputError) && r.budget.rich(&o) {
				res.UserExpressions[k] = o
			}
		}
	}
	t = time.Now()
	res.Files = diff(before, s.root.snapshot())
	files += time.Since(t)
	if quiet && !r.died {
		res.ExecutionCount = count()
	}
	if lk != nil {
		lk.count = res.ExecutionCount
	} else {
		s.count.Store(int64(res.ExecutionCount))
	}
	release() // the next cell may queue up now; it waits for kmu
	// A report from a kernel that died after it is not what the next kernel has (none).
	if r.tools != nil && !failed && !r.died {
		writeMsg(w, guestproto.Message{Tools: r.tools})
	}
	var tr *guestproto.Trace
	if call.Trace {
		tr = &guestproto.Trace{Guest: time.Since(callStart), Files: files, Kernel: r.finished.Sub(start),
			Runner: r.runnerTime, RunCell: r.runCellTime}
	}
	writeMsg(w, guestproto.Message{Result: res, Trace: tr})
	switch {
	case r.died && lk != nil:
		s.dropLangKernel(langKey{lang, req.Context}, lk) // its next cell starts another
	case r.died:
		if err := s.restartLocked(false); err != nil {
			s.log.Warn("restart the kernel", "error", err)
		}
	}
}

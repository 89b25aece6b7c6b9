package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/e2b/envd/processpb"
	"github.com/cellbox/cellbox/internal/e2b/envd/processpb/processpbconnect"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/workspace"
)

// maxProcs caps the processes started through envd that run at once in one sandbox.
const maxProcs = 16

// process is a program started through envd's Start. It runs on when the client that
// started it goes away (as in E2B), until it exits, its timeout passes, or a signal
// (SendSignal) or the end of the sandbox kills it. Clients follow its output through
// Start and Connect.
type process struct {
	pid    uint32
	tag    *string
	config *processpb.ProcessConfig
	kill   context.CancelFunc

	mu    sync.Mutex
	subs  map[*follower]bool
	ended *processpb.ProcessEvent // the end event, once it happened
	done  chan struct{}
}

// follower is a client following a process's events.
type follower struct {
	ch      chan *processpb.ProcessEvent
	primary bool          // Start's own client: the program waits for it
	gone    chan struct{} // closed when the client stops following
	cut     chan struct{} // closed when a client that is not primary fell behind
	once    sync.Once
}

// subscribe returns a follower of the process's events from now on; primary makes the
// program wait for this one when it reads slower than the program writes (the other
// followers are cut off instead). The caller calls stop when done.
func (p *process) subscribe(primary bool) (f *follower, stop func()) {
	f = &follower{ch: make(chan *processpb.ProcessEvent, 256), primary: primary, gone: make(chan struct{}), cut: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended != nil {
		f.ch <- p.ended
		return f, func() {}
	}
	p.subs[f] = true
	return f, func() {
		f.once.Do(func() { close(f.gone) })
		p.mu.Lock()
		delete(p.subs, f)
		p.mu.Unlock()
	}
}

// publish hands an event to every follower. Only the program's output goroutine calls it,
// so events keep their order.
func (p *process) publish(ev *processpb.ProcessEvent, end bool) {
	p.mu.Lock()
	subs := make([]*follower, 0, len(p.subs))
	for f := range p.subs {
		subs = append(subs, f)
	}
	if end {
		p.ended = ev
		p.subs = map[*follower]bool{}
	}
	p.mu.Unlock()
	for _, f := range subs {
		if f.primary {
			select {
			case f.ch <- ev:
			case <-f.gone:
			}
			continue
		}
		select {
		case f.ch <- ev:
		default:
			p.mu.Lock()
			delete(p.subs, f)
			p.mu.Unlock()
			close(f.cut)
		}
	}
	if end {
		close(p.done)
	}
}

// processService is envd's process.Process over the session's commands.
type processService struct{ h *Handler }

var _ processpbconnect.ProcessHandler = processService{}

// user checks the user a call asks for (Authorization: Basic base64("name:")): cellbox
// runs everything as the sandbox's one user.
func user(hdr http.Header) error {
	a := hdr.Get("Authorization")
	if a == "" {
		return nil
	}
	scheme, cred, _ := strings.Cut(a, " ")
	b, err := base64.StdEncoding.DecodeString(cred)
	name, _, _ := strings.Cut(string(b), ":")
	if !strings.EqualFold(scheme, "Basic") || err != nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the Authorization header must be Basic base64(\"user:\")"))
	}
	if name != "" && name != "user" {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("cellbox runs commands as the sandbox's user \"user\" only, not %.50q (there is no root in a cellbox sandbox)", name))
	}
	return nil
}

func (s processService) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	if err := user(req.Header()); err != nil {
		return err
	}
	m := req.Msg
	if m.Pty != nil {
		return connect.NewError(connect.CodeUnimplemented, errors.New("cellbox has no terminals (PTY); run the command without one"))
	}
	if m.Process == nil || m.Process.Cmd == "" {
		return fmt.Errorf("process.cmd must name a program: %w", errdefs.ErrInvalidArgument)
	}
	// The program starts in its folder (home by default), entered by the guest as the
	// user: so that it sees the folder by the path it was given (/home/user/..., not the
	// workspace's other name), and folders beyond the workspace work too.
	cwd := home
	if m.Process.Cwd != nil && *m.Process.Cwd != "" {
		cwd = *m.Process.Cwd
		if !strings.HasPrefix(cwd, "/") {
			cwd = home + "/" + cwd
		}
	}
	if strings.ContainsRune(cwd, 0) || len(cwd) >= workspace.MaxPathLen {
		return fmt.Errorf("cwd is %d bytes or longer, or contains a NUL byte: %w", workspace.MaxPathLen, errdefs.ErrInvalidArgument)
	}
	creq := api.CommandRequest{Cmd: append([]string{m.Process.Cmd}, m.Process.Args...), Env: m.Process.Envs}
	// The program runs until Connect-Timeout-Ms (the SDK's timeoutMs) passes, else as long
	// as the server allows; not until the client goes away.
	timeout := s.h.opts.MaxExecTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	creq.TimeoutS = max(timeout.Seconds(), 0.001)

	id := sandboxID(ctx)
	st := s.h.state(id)
	// Not the request's end: the program outlives its client. The tenant and the sandbox
	// stay in the context's values.
	pctx, kill := context.WithCancel(context.WithoutCancel(ctx))
	p := &process{tag: m.Tag, config: m.Process, kill: kill, subs: map[*follower]bool{}, done: make(chan struct{})}
	st.mu.Lock()
	if len(st.procs) >= maxProcs {
		st.mu.Unlock()
		kill()
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("this sandbox runs its maximum of %d processes started through the SDK: wait for one or kill one", maxProcs))
	}
	p.pid = st.nextPID
	st.nextPID++
	st.procs[p.pid] = p
	st.mu.Unlock()
	f, stop := p.subscribe(true)
	defer stop()

	go func() {
		defer kill()
		res, err := s.h.m.Spawn(pctx, id, cwd, creq, func(o api.Output) {
			data := &processpb.ProcessEvent_DataEvent{}
			if o.Name == "stderr" {
				data.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: []byte(o.Text)}
			} else {
				data.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte(o.Text)}
			}
			p.publish(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: data}}, false)
		})
		st.mu.Lock()
		delete(st.procs, p.pid)
		st.mu.Unlock()
		p.publish(endEvent(res, err), true)
	}()
	return follow(ctx, p, f, func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.StartResponse{Event: ev})
	})
}

// follow sends the start event, then the process's events until its end.
func follow(ctx context.Context, p *process, f *follower, send func(*processpb.ProcessEvent) error) error {
	if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	for {
		select {
		case ev := <-f.ch:
			if err := send(ev); err != nil {
				return err
			}
			if _, end := ev.Event.(*processpb.ProcessEvent_End); end {
				return nil
			}
		case <-f.cut:
			return connect.NewError(connect.CodeResourceExhausted, errors.New("this client read the output slower than the program wrote it and was cut off; the program runs on (connect to it again)"))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// endEvent is E2B's end event for a command's result.
func endEvent(res *api.CommandResult, err error) *processpb.ProcessEvent {
	end := &processpb.ProcessEvent_EndEvent{}
	switch {
	case err != nil:
		msg := err.Error()
		end.ExitCode, end.Status, end.Error = -1, "error", &msg
	case res.Status == api.StatusOK || res.Status == api.StatusError && res.ExitCode >= 0:
		end.ExitCode, end.Exited = int32(res.ExitCode), true
		end.Status = fmt.Sprintf("exit status %d", res.ExitCode)
		if res.ExitCode != 0 {
			msg := end.Status
			if res.Message != "" {
				msg += ": " + res.Message
			}
			end.Error = &msg
		}
	default:
		msg := res.Message
		if msg == "" {
			msg = res.Status
		}
		end.ExitCode, end.Status, end.Error = int32(res.ExitCode), "signal: killed", &msg
		if res.ExitCode == 0 {
			end.ExitCode = -1
		}
	}
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}}
}

// find returns the process a selector names.
func (s processService) find(ctx context.Context, sel *processpb.ProcessSelector) (*process, error) {
	st := s.h.state(sandboxID(ctx))
	st.mu.Lock()
	defer st.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		if p, ok := st.procs[v.Pid]; ok {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", v.Pid))
	case *processpb.ProcessSelector_Tag:
		for _, p := range st.procs {
			if p.tag != nil && *p.tag == v.Tag {
				return p, nil
			}
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %.100q not found", v.Tag))
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("name the process by pid or tag"))
}

func (s processService) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	p, err := s.find(ctx, req.Msg.Process)
	if err != nil {
		return err
	}
	f, stop := p.subscribe(false)
	defer stop()
	return follow(ctx, p, f, func(ev *processpb.ProcessEvent) error {
		return stream.Send(&processpb.ConnectResponse{Event: ev})
	})
}

func (s processService) List(ctx context.Context, _ *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	st := s.h.state(sandboxID(ctx))
	st.mu.Lock()
	out := make([]*processpb.ProcessInfo, 0, len(st.procs))
	for _, p := range st.procs {
		cfg := &processpb.ProcessConfig{Cmd: p.config.Cmd, Args: p.config.Args, Envs: maps.Clone(p.config.Envs), Cwd: p.config.Cwd}
		out = append(out, &processpb.ProcessInfo{Config: cfg, Pid: p.pid, Tag: p.tag})
	}
	st.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return connect.NewResponse(&processpb.ListResponse{Processes: out}), nil
}

func (s processService) SendSignal(ctx context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	p, err := s.find(ctx, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	switch req.Msg.Signal {
	case processpb.Signal_SIGNAL_SIGKILL, processpb.Signal_SIGNAL_SIGTERM:
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("signal must be SIGKILL or SIGTERM"))
	}
	// Either signal kills the program and everything it started.
	p.kill()
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

func (s processService) SendInput(ctx context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	if _, err := s.find(ctx, req.Msg.Process); err != nil {
		return nil, err
	}
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("cellbox cannot send input to a running process: its stdin is closed"))
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/agent"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/tool"
)

func init() {
	register("chat", "talk to a model that writes and runs code on your files (OpenAI or Anthropic API)", chatMain)
}

// chatMain runs the agent loop in the terminal: -p answers one prompt (the answer on
// stdout, the work on stderr); without it, a conversation. The code runs in one session
// of an embedded server (or --server); plots and files it makes are saved under --out.
func chatMain(args []string) int {
	f := newFlags("chat", "cellbox chat [flags] [-p PROMPT]")
	var prompt, approve, system string
	var maxSteps int
	f.fs.StringVar(&prompt, "p", "", "answer this prompt, print the answer on stdout and exit")
	f.fs.StringVar(&approve, "approve", "", "ask: show the code and ask before it runs (default when stdin is a terminal) | auto: run it without asking")
	f.fs.IntVar(&maxSteps, "max-steps", agent.DefaultMaxSteps, "tool calls the model may make for one request")
	f.fs.StringVar(&system, "system", "", "replace the system prompt with this text, or with the contents of FILE when given as @FILE")
	var allow string
	var internet bool
	f.fs.StringVar(&allow, "allow", "", "DOMAIN,...: the session's code may reach these (domains, *.wildcards, IPs, CIDRs, each with an optional :port) and nothing else")
	f.fs.BoolVar(&internet, "internet", false, "the session's code may reach the public internet (private addresses stay refused)")
	f.own = append([]string{"p", "approve", "max-steps", "system", "allow", "internet", "provider", "model", "base-url"}, f.own...)
	if rc := f.parse(args); rc >= 0 {
		return rc
	}
	if f.fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cellbox chat: unexpected argument %q (give a prompt with -p)\n", f.fs.Arg(0))
		return exitUsage
	}
	interactive := prompt == ""
	switch approve {
	case "":
		approve = "auto"
		if isTerminal(os.Stdin) {
			approve = "ask"
		}
	case "ask", "auto":
	default:
		fmt.Fprintf(os.Stderr, "cellbox chat: --approve %q: choose ask or auto\n", approve)
		return exitUsage
	}
	if maxSteps < 1 || maxSteps > 100 {
		fmt.Fprintf(os.Stderr, "cellbox chat: --max-steps %d: give 1 to 100\n", maxSteps)
		return exitUsage
	}
	if rest, ok := strings.CutPrefix(system, "@"); ok {
		b, err := os.ReadFile(rest)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cellbox chat: --system: %v\n", err)
			return exitUsage
		}
		system = string(b)
	}
	switch {
	case allow != "" && len(config.SplitList(allow)) == 0:
		fmt.Fprintln(os.Stderr, "cellbox chat: --allow: name at least one destination (DOMAIN,...)")
		return exitUsage
	case allow != "" && internet:
		fmt.Fprintln(os.Stderr, "cellbox chat: give --allow DOMAIN,... or --internet, not both")
		return exitUsage
	case allow != "":
		f.network = &api.Network{Egress: api.EgressAllowlist, Allow: config.SplitList(allow)}
	case internet:
		f.network = &api.Network{Egress: api.EgressPublic}
	}
	provider, model, err := agent.NewProvider(agent.ProviderConfig{Name: f.cfg.Provider, Model: f.cfg.Model, BaseURL: f.cfg.BaseURL})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cellbox chat: %v\n", err)
		return exitUsage
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sig := watchSignals(cancel)
	defer sig.stop()
	s, end, err := f.start(ctx, sig)
	if err != nil {
		if msg, ok := networkRefusal(err); ok && f.network != nil {
			fmt.Fprintf(os.Stderr, "cellbox chat: the server refused the network access asked for: %s.\n", msg)
			return exitService
		}
		return failed(ctx, err)
	}
	defer end()
	note, err := describeFiles(f.files)
	if err != nil {
		return failed(ctx, err)
	}

	c := &chat{s: s, lines: readLines(os.Stdin), color: isTerminal(os.Stderr)}
	// The work (code, its output, saved files) goes to stderr with -p, so that stdout is the
	// answer alone; in a conversation everything is on stdout.
	c.work = os.Stderr
	if interactive {
		c.work = os.Stdout
	}
	s.stdout, s.stderr = c.work, c.work
	cfg := agent.Config{
		Provider:  provider,
		Model:     model,
		System:    system,
		MaxSteps:  maxSteps,
		Runner:    clientRunner{s.c},
		Sessions:  clientRunner{s.c},
		SessionID: s.id,
		Tools:     tool.Definitions(tool.Options{TimeoutS: f.cfg.ExecTimeout.Seconds(), MemoryMB: f.cfg.MemoryMB}),
		OnEvent:   func(e agent.Event) { c.event(ctx, e) },
		Stream:    interactive,
	}
	if approve == "ask" {
		cfg.Approve = c.ask
	}
	a, err := agent.New(cfg)
	if err != nil {
		return failed(ctx, err)
	}
	fmt.Fprintf(os.Stderr, "cellbox chat: %s model %s, session %s\n", provider.Name(), model, s.id)
	if !interactive {
		return c.once(ctx, a, joinNote(note, prompt))
	}
	return c.converse(ctx, a, note)
}

// chat shows one conversation in the terminal.
type chat struct {
	s     *session
	lines <-chan string // standard input: prompts and approval answers
	work  io.Writer     // where the code, its output and saved files are shown
	color bool
	text  *markdown // the model's streamed text, rendered
	gap   bool      // a blank line before the model's next text
}

func joinNote(note, input string) string {
	if note == "" {
		return input
	}
	return note + "\n\n" + input
}

// once answers one prompt: the answer on stdout (rendered on a terminal, as written
// otherwise), everything else on stderr.
func (c *chat) once(ctx context.Context, a *agent.Agent, input string) int {
	turn, err := c.send(ctx, a, input)
	if err != nil {
		return failed(ctx, err)
	}
	if turn.StopReason == agent.StopStopped {
		fmt.Fprintln(os.Stderr, "cellbox chat: stopped before the model answered")
		return exitError
	}
	if isTerminal(os.Stdout) {
		md := newMarkdown(os.Stdout, true)
		io.WriteString(md, termSafe(turn.Output, false))
		md.Flush()
	} else {
		fmt.Println(strings.TrimRight(turn.Output, "\n"))
	}
	return exitOK
}

// converse reads requests until end of input. Ctrl-C during a turn cancels the turn (the
// running code is interrupted); at the prompt it ends the conversation.
func (c *chat) converse(ctx context.Context, a *agent.Agent, note string) int {
	fmt.Fprintln(os.Stdout, "Ask about your data. Ctrl-C stops a running answer, /reset starts a new conversation, Ctrl-D ends.")
	for _, l := range strings.Split(note, "\n") {
		if strings.HasPrefix(l, "- ") { // a file's line; its preview is for the model
			fmt.Fprintln(os.Stdout, "uploaded "+strings.TrimPrefix(l, "- "))
		}
	}
	c.text = newMarkdown(os.Stdout, isTerminal(os.Stdout))
	for {
		fmt.Fprint(os.Stdout, "\n> ")
		var line string
		var ok bool
		select {
		case <-ctx.Done():
			return exitOK
		case line, ok = <-c.lines:
		}
		if !ok {
			fmt.Fprintln(os.Stdout)
			return exitOK
		}
		line = strings.TrimSpace(line)
		switch line {
		case "":
			continue
		case "exit", "quit", "/exit", "/quit":
			return exitOK
		case "/reset":
			a.Reset()
			fmt.Fprintln(os.Stdout, "(a new conversation; the session's variables and files are kept)")
			continue
		}
		if note != "" {
			line, note = joinNote(note, line), ""
		}
		turnCtx, cancel := context.WithCancel(ctx)
		restore := c.s.sig.handle(cancel)
		fmt.Fprintln(os.Stdout)
		_, err := c.send(turnCtx, a, line)
		restore()
		stopped := turnCtx.Err() != nil
		cancel()
		c.text.Flush()
		switch {
		case ctx.Err() != nil:
			return exitOK
		case stopped:
			fmt.Fprintln(os.Stdout, "(stopped)")
		case err != nil:
			fmt.Fprintf(os.Stderr, "cellbox chat: %v\n", err)
		}
	}
}

// send runs one turn and says on stderr how it ended when the model did not just answer.
func (c *chat) send(ctx context.Context, a *agent.Agent, input string) (*agent.Turn, error) {
	turn, err := a.Send(ctx, input)
	if err != nil {
		return nil, err
	}
	switch turn.StopReason {
	case agent.StopStepLimit:
		fmt.Fprintf(os.Stderr, "cellbox chat: the model used all %d tool calls of this request (--max-steps); its answer may be incomplete\n", len(turn.Steps))
	case agent.StopMaxTokens:
		fmt.Fprintln(os.Stderr, "cellbox chat: the answer was cut at the model's token limit")
	}
	return turn, nil
}

// event shows what the agent does as it happens.
func (c *chat) event(ctx context.Context, e agent.Event) {
	switch e.Kind {
	case agent.EventText:
		if c.gap {
			fmt.Fprintln(c.work)
			c.gap = false
		}
		io.WriteString(c.text, termSafe(e.Text, false))
	case agent.EventCall:
		if c.text != nil {
			c.text.Flush()
		}
		c.s.images = 0
		c.showCode(e.Call)
	case agent.EventOutput:
		c.s.show(safeOutput(*e.Output))
	case agent.EventStep:
		c.gap = true
		st := e.Step
		switch {
		case st.Declined:
			fmt.Fprintln(c.work, c.dim("(not run)"))
		case st.Error != "":
			fmt.Fprintln(c.work, c.dim("(not run: "+termSafe(st.Error, false)+")"))
		case st.Result != nil && st.Result.Execute != nil:
			c.s.count = st.Result.Execute.ExecutionCount
			c.saveFiles(ctx, st.Result.Execute.Files)
		case st.Result != nil && st.Result.Tool != nil:
			c.saveFiles(ctx, st.Result.Tool.Files)
		case st.Result != nil && st.Result.Command != nil:
			r := st.Result.Command
			io.WriteString(c.work, termSafe(r.Stdout, true))
			io.WriteString(c.work, termSafe(r.Stderr, true))
			if r.ExitCode != 0 {
				fmt.Fprintln(c.work, c.dim(fmt.Sprintf("(exit code %d)", r.ExitCode)))
			}
			c.saveFiles(ctx, r.Files)
		}
	}
}

func (c *chat) saveFiles(ctx context.Context, files []api.FileChange) {
	for _, f := range files {
		if f.Change != api.ChangeDeleted {
			c.s.download(ctx, f.Path)
		}
	}
}

func (c *chat) showCode(call *tool.Call) {
	label := termSafe(call.Name, false) // python, shell or a session tool, with its arguments
	fmt.Fprintf(c.work, "%s\n", c.dim("── "+label+" ─────────────────────────────"))
	fmt.Fprintln(c.work, termSafe(strings.TrimRight(call.Code, "\n"), false))
	fmt.Fprintf(c.work, "%s\n", c.dim("──────────────────────────────────────"))
}

func (c *chat) dim(s string) string {
	if !c.color {
		return s
	}
	return ansiDim + s + ansiReset
}

// ask is the approval prompt: Enter or y runs, n declines (the model is told), s stops.
func (c *chat) ask(ctx context.Context, call tool.Call) (agent.Decision, error) {
	for {
		fmt.Fprint(os.Stderr, "Run it? [Y]es, [n]o, [s]top: ")
		var line string
		var ok bool
		select {
		case <-ctx.Done():
			return agent.Stop, ctx.Err()
		case line, ok = <-c.lines:
		}
		if !ok {
			fmt.Fprintln(os.Stderr)
			return agent.Stop, nil
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "", "y", "yes":
			return agent.Run, nil
		case "n", "no":
			return agent.Decline, nil
		case "s", "stop", "q", "quit":
			return agent.Stop, nil
		}
	}
}

// describeFiles tells the model about the --file files, as uploaded to /mnt/data/<base>.
func describeFiles(paths []string) (string, error) {
	var descs []string
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return "", fmt.Errorf("--file: %w", err)
		}
		st, err := f.Stat()
		if err == nil {
			descs = append(descs, agent.DescribeFile(filepath.Base(p), st.Size(), f))
		}
		f.Close()
		if err != nil {
			return "", fmt.Errorf("--file: %w", err)
		}
	}
	return agent.FilesNote(descs), nil
}

// networkRefusal is the server's reason for refusing a session's network policy, without
// the error's code: the policy is wider than the server allows, or an entry is not one.
func networkRefusal(err error) (string, bool) {
	var e *client.Error
	if !errors.As(err, &e) {
		return "", false
	}
	msg, ok := strings.CutPrefix(e.Message, "network: ")
	if !ok {
		return "", false
	}
	kinds := map[string]error{api.CodePermissionDenied: errdefs.ErrPermissionDenied,
		api.CodeInvalidArgument: errdefs.ErrInvalidArgument, api.CodeFailedPrecondition: errdefs.ErrFailedPrecondition}
	kind, ok := kinds[e.Code]
	if !ok {
		return "", false
	}
	return strings.TrimSuffix(msg, ": "+kind.Error()), true
}

// clientRunner runs the agent's tool calls through the REST API, the session's own tools
// among them (a tool.ToolRunner), and reads the session.
type clientRunner struct{ c *client.Client }

var _ tool.ToolRunner = clientRunner{}

func (r clientRunner) Execute(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	if onOutput == nil {
		return r.c.Execute(ctx, id, req)
	}
	return r.c.ExecuteStream(ctx, id, req, onOutput)
}

func (r clientRunner) Get(ctx context.Context, id string) (*api.Session, error) {
	return r.c.GetSession(ctx, id)
}

func (r clientRunner) Command(ctx context.Context, id string, req api.CommandRequest) (*api.CommandResult, error) {
	return r.c.Command(ctx, id, req)
}

func (r clientRunner) Tools(ctx context.Context, id string) ([]api.SessionTool, error) {
	return r.c.SessionTools(ctx, id)
}

// CallTool calls a session's tool; the server's refusal (bad arguments, no such tool) keeps
// its code, so that the agent tells the model as it would in the server.
func (r clientRunner) CallTool(ctx context.Context, id, name string, req api.ToolCallRequest, onOutput func(api.Output)) (*api.ToolCallResult, error) {
	res, err := r.c.CallTool(ctx, id, name, req, onOutput)
	var e *client.Error
	if errors.As(err, &e) {
		return nil, errdefs.New(e.Code, e.Message)
	}
	return res, err
}

// safeOutput is an output of model-written code made safe to print (see termSafe).
func safeOutput(o api.Output) api.Output {
	o.Text = termSafe(o.Text, true)
	if len(o.Traceback) > 0 {
		tb := make([]string, len(o.Traceback))
		for i, l := range o.Traceback {
			tb[i] = termSafe(l, false)
		}
		o.Traceback = tb
	}
	o.EName, o.EValue = termSafe(o.EName, false), termSafe(o.EValue, false)
	if t, ok := o.Data["text/plain"].(string); ok {
		data := make(map[string]any, len(o.Data))
		for k, v := range o.Data {
			data[k] = v
		}
		data["text/plain"] = termSafe(t, false)
		o.Data = data
	}
	return o
}

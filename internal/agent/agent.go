// Package agent is the tool-calling loop: it sends a person's request to a model with the
// python and shell tools, and the session's own tools beside them (functions its code made
// tools with `from cellbox import tool`, listed again before every model call), runs the
// calls the model makes in a cellbox session (after asking, if told to), hands the results
// back, and repeats until the model answers or the step limit is reached. `cellbox chat`,
// POST /v1/agent and conversations all run it.
//
// Not for: talking a provider's wire protocol (package llm) or rendering results (tool).
package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/tool"
)

// DefaultMaxSteps is how many tool calls one turn may make.
const DefaultMaxSteps = 10

// Stop reasons of a Turn.
const (
	StopDone      = "done"       // the model answered
	StopStepLimit = "step_limit" // the step limit was reached; the model was asked to answer with what it had
	StopStopped   = "stopped"    // the person stopped the turn at an approval prompt
	StopMaxTokens = "max_tokens" // the model's answer was cut at its token limit
)

// Decision is a person's answer to an approval prompt.
type Decision int

// Decisions.
const (
	Run     Decision = iota // run the code
	Decline                 // don't run it; the model is told so and goes on
	Stop                    // don't run it and end the turn
)

// Config configures an Agent.
type Config struct {
	Provider  llm.Provider
	Model     string
	System    string // "" → DefaultSystem; the session's network note follows it (see Sessions)
	MaxSteps  int    // tool calls per turn; 0 → DefaultMaxSteps
	MaxTokens int    // per model call; 0 → the provider's default
	// MaxHistoryBytes bounds what the conversation sends the model: past it, the oldest
	// exchanges (a request and its answer) are dropped before the next request, the latest
	// one always kept. 0: no bound.
	MaxHistoryBytes int

	// Runner runs the calls. When it is a tool.ToolRunner, the session's tools are offered
	// after Tools at every model call, so that a tool the model defines in one step is
	// there to call in the next.
	Runner    tool.Runner
	SessionID string
	// Sessions, if set, is asked for the session at the start of each turn: the system
	// prompt then ends with what its code may reach (tool.NetworkNote), as its policy is
	// now. nil: the prompt says nothing of the network.
	Sessions Sessions
	Tools    []tool.Definition // nil → tool.Definitions(tool.Options{}); the session's tools follow them
	Limits   tool.RenderLimits

	// History is the conversation so far (one kept by History), to go on with.
	History []llm.Message

	// Approve, if set, is asked before each call runs.
	Approve func(ctx context.Context, c tool.Call) (Decision, error)
	// OnEvent, if set, sees the turn as it happens.
	OnEvent func(Event)
	// Stream streams the model's text to OnEvent as it is written.
	Stream bool
}

// Sessions is what the agent asks of the session service: the session, for its network
// policy.
type Sessions interface {
	Get(ctx context.Context, id string) (*api.Session, error)
}

// Event kinds.
const (
	EventText   = "text"   // Text: a piece of the model's text
	EventCall   = "call"   // Call: the model asked to run this (before approval)
	EventOutput = "output" // Output: an output of the running code, as it happens
	EventStep   = "step"   // Step: a call is done (run, declined or refused)
)

// Event is something that happened during a turn.
type Event struct {
	Kind   string
	Text   string
	Call   *tool.Call
	Output *api.Output
	Step   *Step
}

// Step is one tool call of a turn.
type Step struct {
	ID   string // the model's id of the call
	Tool string // python, shell or a session tool's name ("" when the model named no tool it was offered)
	// Code is the code (python), the command line (shell) or the arguments, a JSON object
	// (a session tool).
	Code string
	// Result is what the model was given (Result.Tool holds a session tool's return value);
	// nil only when not run and not declined.
	Result   *tool.Result
	Declined bool   // the person declined it
	Error    string // why it did not run: bad arguments, or cellbox failed
}

// Turn is the outcome of one request.
type Turn struct {
	Output     string           // the model's final answer
	Steps      []Step           // the tool calls, in order
	Files      []api.FileChange // files the code changed, the latest change of each
	StopReason string
	Usage      llm.Usage // summed over the turn's model calls
}

// Agent holds one conversation with a model about one session.
type Agent struct {
	cfg         Config
	system      string // the system prompt of the turn: cfg.System and the network note
	history     []llm.Message
	pendingText string // the text of the last message before addUser joined the request to it
}

// keptImageResults is how many of the latest tool-result messages keep their images in the
// history; older images are replaced by a note. Images are re-sent with every request, and
// the APIs cap them (Anthropic: 100 a request) as well as the context.
const keptImageResults = 3

// forgetOldImages drops the images of all but the latest keptImageResults messages that
// carry some.
func (a *Agent) forgetOldImages() {
	seen := 0
	for i := len(a.history) - 1; i >= 0; i-- {
		msg := &a.history[i]
		has := false
		for _, r := range msg.ToolResults {
			has = has || len(r.Images) > 0
		}
		if !has {
			continue
		}
		if seen++; seen <= keptImageResults {
			continue
		}
		results := make([]llm.ToolResult, len(msg.ToolResults))
		for j, r := range msg.ToolResults {
			if len(r.Images) > 0 {
				r.Text += fmt.Sprintf("\n[%d image(s) shown earlier, no longer kept in the conversation]", len(r.Images))
				r.Images = nil
			}
			results[j] = r
		}
		msg.ToolResults = results
	}
}

// trim drops the oldest exchanges while the history is over MaxHistoryBytes, and returns
// how many messages it dropped. An exchange starts with a message of the person's (text,
// no tool results) and ends before the next one; the last exchange always stays.
func (a *Agent) trim() int {
	if a.cfg.MaxHistoryBytes <= 0 {
		return 0
	}
	size := 0
	for _, m := range a.history {
		size += messageBytes(m)
	}
	dropped := 0
	for size > a.cfg.MaxHistoryBytes {
		next := -1 // the start of the second exchange
		for i := 1; i < len(a.history); i++ {
			if m := a.history[i]; m.Role == llm.RoleUser && len(m.ToolResults) == 0 {
				next = i
				break
			}
		}
		if next < 0 {
			break
		}
		for _, m := range a.history[:next] {
			size -= messageBytes(m)
		}
		a.history = a.history[next:]
		dropped += next
	}
	return dropped
}

// messageBytes is about what a message costs a request: its text, calls, results, images.
func messageBytes(m llm.Message) int {
	n := len(m.Text)
	for _, c := range m.ToolCalls {
		n += len(c.Name) + len(c.Input)
	}
	for _, r := range m.ToolResults {
		n += len(r.Text)
		for _, img := range r.Images {
			n += len(img.Data)
		}
	}
	return n
}

// SetModel makes the next requests go to provider p's model; the history stays. Not while
// Send runs.
func (a *Agent) SetModel(p llm.Provider, model string) {
	a.cfg.Provider, a.cfg.Model = p, model
}

// Reset forgets the conversation; the session (its variables and files) stays.
func (a *Agent) Reset() { a.history = nil }

// New returns an agent with an empty conversation.
func New(cfg Config) (*Agent, error) {
	if cfg.Provider == nil || cfg.Runner == nil || cfg.SessionID == "" {
		return nil, errors.New("agent: a provider, a runner and a session are needed")
	}
	if cfg.System == "" {
		cfg.System = DefaultSystem
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = DefaultMaxSteps
	}
	if cfg.Tools == nil {
		cfg.Tools = tool.Definitions(tool.Options{})
	}
	return &Agent{cfg: cfg, system: cfg.System, history: slices.Clone(cfg.History)}, nil
}

// describeNetwork ends the system prompt with the session's network note, as its policy is
// now. When the session cannot be read, the prompt stays as it was: the turn's tool calls
// tell what went wrong.
func (a *Agent) describeNetwork(ctx context.Context) {
	if a.cfg.Sessions == nil {
		return
	}
	s, err := a.cfg.Sessions.Get(ctx, a.cfg.SessionID)
	if err != nil {
		return
	}
	a.system = a.cfg.System + "\n\n" + tool.NetworkNote(s.Network)
}

// History returns the conversation so far, to keep and go on with later (Config.History).
// Not while Send runs.
func (a *Agent) History() []llm.Message { return slices.Clone(a.history) }

func (a *Agent) emit(e Event) {
	if a.cfg.OnEvent != nil {
		a.cfg.OnEvent(e)
	}
}

// Send adds the person's message to the conversation and runs the loop until the model
// answers. The error is a failure of the model API or of cellbox, or ctx's; the
// conversation stays usable after it.
func (a *Agent) Send(ctx context.Context, input string) (*Turn, error) {
	a.describeNetwork(ctx)
	before := len(a.history)
	a.addUser(input)
	a.forgetOldImages()
	before -= a.trim()
	turn := &Turn{}
	files := map[string]int{} // path → index in turn.Files
	var onText func(string)
	if a.cfg.Stream {
		onText = func(d string) { a.emit(Event{Kind: EventText, Text: d}) }
	}
	for {
		final := len(turn.Steps) >= a.cfg.MaxSteps
		tools, sessionTools := a.tools(ctx)
		req := llm.Request{Model: a.cfg.Model, System: a.system, Messages: a.history, Tools: tools, MaxTokens: a.cfg.MaxTokens, NoToolCalls: final}
		resp, err := a.cfg.Provider.Complete(ctx, req, onText)
		if err != nil {
			if len(turn.Steps) == 0 {
				// Nothing happened: forget the request, so that the next one is not
				// answered together with it.
				a.history = a.history[:before]
				if before > 0 && a.history[before-1].Role == llm.RoleUser {
					a.history[before-1].Text = a.pendingText
				}
			}
			return turn, err
		}
		turn.Usage.InputTokens += resp.Usage.InputTokens
		turn.Usage.OutputTokens += resp.Usage.OutputTokens
		msg := resp.Message
		msg.Role = llm.RoleAssistant
		if final {
			msg.ToolCalls = nil // not answered, so not kept: every call in the history has its result
		}
		a.history = append(a.history, msg)
		if len(msg.ToolCalls) == 0 {
			turn.Output = msg.Text
			switch {
			case final:
				turn.StopReason = StopStepLimit
			case resp.StopReason == llm.StopMaxTokens:
				turn.StopReason = StopMaxTokens
			default:
				turn.StopReason = StopDone
			}
			return turn, nil
		}
		results := make([]llm.ToolResult, 0, len(msg.ToolCalls))
		stopped := false
		for i, call := range msg.ToolCalls {
			var res llm.ToolResult
			switch {
			case stopped:
				res = llm.ToolResult{Text: "Not run: the user stopped this turn."}
			case len(turn.Steps) >= a.cfg.MaxSteps:
				res = llm.ToolResult{Text: fmt.Sprintf("Not run: the limit of %d tool calls for this request was reached.", a.cfg.MaxSteps), IsError: true}
			default:
				step, r, stop, err := a.step(ctx, call, tools, sessionTools)
				if err != nil {
					// The call is part of the turn, though it did not finish.
					step.Error = "not run, or stopped while running: the turn was canceled"
					turn.Steps = append(turn.Steps, step)
					a.emit(Event{Kind: EventStep, Step: &turn.Steps[len(turn.Steps)-1]})
					a.abandon(msg.ToolCalls[i:], results)
					return turn, err
				}
				turn.Steps = append(turn.Steps, step)
				a.emit(Event{Kind: EventStep, Step: &turn.Steps[len(turn.Steps)-1]})
				addFiles(turn, files, step.Result)
				res, stopped = r, stop
			}
			res.CallID, res.Name = call.ID, call.Name
			results = append(results, res)
		}
		user := llm.Message{Role: llm.RoleUser, ToolResults: results}
		if !stopped && len(turn.Steps) >= a.cfg.MaxSteps {
			user.Text = fmt.Sprintf("You have used all %d tool calls allowed for this request. Do not call tools again: "+
				"answer now with what you have found, and say what is left undone.", a.cfg.MaxSteps)
		}
		a.history = append(a.history, user)
		if stopped {
			turn.StopReason = StopStopped
			return turn, nil
		}
	}
}

// abandon answers the calls a failed turn leaves without results, so that the conversation
// stays one the model APIs take (every call answered) and can go on.
func (a *Agent) abandon(calls []llm.ToolCall, results []llm.ToolResult) {
	for _, c := range calls {
		results = append(results, llm.ToolResult{CallID: c.ID, Name: c.Name, IsError: true,
			Text: "Not run, or stopped while running: the turn was canceled."})
	}
	a.history = append(a.history, llm.Message{Role: llm.RoleUser, ToolResults: results})
}

// addUser appends the person's message, joining it to a last message of tool results (a
// turn that was stopped), so that the conversation keeps alternating.
func (a *Agent) addUser(input string) {
	if n := len(a.history); n > 0 && a.history[n-1].Role == llm.RoleUser {
		last := &a.history[n-1]
		a.pendingText = last.Text
		last.Text = strings.TrimSpace(last.Text + "\n\n" + input)
		return
	}
	a.history = append(a.history, llm.Message{Role: llm.RoleUser, Text: input})
}

// tools are the tools of the next model call: the configured ones, then the session's
// (when the runner can list them), and those of the session alone. When the session's
// cannot be listed, the configured ones are offered: a call then tells what went wrong.
func (a *Agent) tools(ctx context.Context) (all, session []tool.Definition) {
	tr, ok := a.cfg.Runner.(tool.ToolRunner)
	if !ok {
		return a.cfg.Tools, nil
	}
	list, err := tr.Tools(ctx, a.cfg.SessionID)
	if err != nil || len(list) == 0 {
		return a.cfg.Tools, nil
	}
	all = slices.Clone(a.cfg.Tools)
	for _, d := range tool.SessionDefinitions(list) { // none named like a built-in tool
		// A Tools of the caller's own might still have the name.
		if !slices.ContainsFunc(all, func(b tool.Definition) bool { return b.Name == d.Name }) {
			all = append(all, d)
			session = append(session, d)
		}
	}
	return all, session
}

// step carries out one call of the tools offered (the session's among them): decode, ask,
// run. stop is the person's Stop. The error ends the turn (ctx is done); a failure the
// model can act on is a result instead.
func (a *Agent) step(ctx context.Context, call llm.ToolCall, offered, sessionTools []tool.Definition) (Step, llm.ToolResult, bool, error) {
	c, err := tool.Decode(call.Name, call.Input, offered...)
	if err != nil {
		step := Step{ID: call.ID, Tool: knownTool(call.Name, sessionTools), Code: string(call.Input), Error: err.Error()}
		return step, llm.ToolResult{Text: err.Error(), IsError: true}, false, nil
	}
	c.ID = call.ID
	step := Step{ID: call.ID, Tool: c.Name, Code: c.Code}
	a.emit(Event{Kind: EventCall, Call: &c})
	if a.cfg.Approve != nil {
		d, err := a.cfg.Approve(ctx, c)
		if err != nil {
			return step, llm.ToolResult{}, false, err
		}
		switch d {
		case Decline:
			step.Declined = true
			return step, llm.ToolResult{Text: "The user declined to run this code. Do not run it again as it is: " +
				"ask what they want instead, or take another approach."}, false, nil
		case Stop:
			step.Declined = true
			return step, llm.ToolResult{Text: "The user declined to run this code and stopped this turn."}, true, nil
		}
	}
	var onOutput func(api.Output)
	if a.cfg.OnEvent != nil {
		onOutput = func(o api.Output) { a.emit(Event{Kind: EventOutput, Output: &o}) }
	}
	res, err := tool.Run(ctx, a.cfg.Runner, a.cfg.SessionID, c, a.cfg.Limits, onOutput)
	if err != nil {
		if ctx.Err() != nil {
			return step, llm.ToolResult{}, false, ctx.Err()
		}
		step.Error = err.Error()
		if c.IsSessionTool() && refused(err) {
			// Arguments that do not match the schema (the validator says how), or a tool
			// that is gone (a kernel restart): the model's to fix.
			return step, llm.ToolResult{Text: "The call was refused: " + err.Error(), IsError: true}, false, nil
		}
		return step, llm.ToolResult{Text: "cellbox could not run this: " + err.Error(), IsError: true}, false, nil
	}
	step.Result = res
	return step, llm.ToolResult{Text: res.Text, Images: res.Images, IsError: res.IsError}, false, nil
}

// refused: the session refused a call of one of its tools before running it.
func refused(err error) bool {
	code := errdefs.Code(err)
	return code == api.CodeInvalidArgument || code == api.CodeNotFound
}

func knownTool(name string, sessionTools []tool.Definition) string {
	if !(tool.Call{Name: name}).IsSessionTool() || slices.ContainsFunc(sessionTools, func(d tool.Definition) bool { return d.Name == name }) {
		return name
	}
	return ""
}

// addFiles records the files a step changed; a later change of a path replaces an earlier.
func addFiles(turn *Turn, seen map[string]int, r *tool.Result) {
	if r == nil {
		return
	}
	var changes []api.FileChange
	switch {
	case r.Execute != nil:
		changes = r.Execute.Files
	case r.Command != nil:
		changes = r.Command.Files
	case r.Tool != nil:
		changes = r.Tool.Files
	}
	for _, f := range changes {
		if i, ok := seen[f.Path]; ok {
			if turn.Files[i].Change == api.ChangeCreated && f.Change == api.ChangeModified {
				f.Change = api.ChangeCreated
			}
			turn.Files[i] = f
			continue
		}
		seen[f.Path] = len(turn.Files)
		turn.Files = append(turn.Files, f)
	}
}

// Package conversation keeps multi-turn conversations with a model on the server: each is
// an agent loop (package agent) about one session, its history kept between messages and
// bounded, with approvals decided and answers stopped by other requests while an answer
// streams. The REST API's /v1/conversations (and so the web page) is built on it.
//
// A conversation lives as long as its session: the session manager tells the store when a
// session ends (session.Manager.Subscribe), and its conversations are dropped then. With a
// Dir, each is also kept in a file there (after each answer), so that
// conversations, like sessions, outlive a restart of the server.
//
// Not for: the loop itself (package agent), HTTP (package httpapi), sessions (package
// session, reached only through the Sessions interface).
package conversation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/agent"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/tool"
	"github.com/cellbox/cellbox/internal/workspace"
)

// Sessions is what conversations need of the session manager.
type Sessions interface {
	tool.Runner
	Create(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error)
	Get(ctx context.Context, id string) (*api.Session, error)
	GetFile(ctx context.Context, id, path string) (*api.FileInfo, io.ReadCloser, error)
	// Subscribe tells f of sessions created and ended (session.Manager.Subscribe).
	Subscribe(f func(session.Event)) (stop func())
}

// Defaults of Options.
const (
	DefaultMaxPerTenant    = 32
	DefaultMaxTurns        = 100
	DefaultMaxKeptBytes    = 8 << 20
	DefaultMaxHistoryBytes = 2 << 20
	maxFiles               = 32 // files one message may bring
	maxSteps               = 50 // bound of max_steps
	titleChars             = 80
)

// Options configures a Store. Zero values take the defaults.
type Options struct {
	Sessions Sessions
	// NewProvider returns the provider named name ("" for the server's default) and its
	// default model; nil: every message fails as unavailable.
	NewProvider func(name string) (llm.Provider, string, error)
	Tools       tool.Options // what the tool descriptions state
	// MaxPerTenant bounds the conversations of one tenant (API key).
	MaxPerTenant int
	// MaxTurns and MaxKeptBytes bound the turns kept for showing (GET): past either, the
	// oldest are dropped.
	MaxTurns     int
	MaxKeptBytes int
	// MaxHistoryBytes bounds what the model is sent of the history (agent.Config).
	MaxHistoryBytes int
	// Dir keeps each conversation in a file, read again by New; "": memory only.
	Dir string
	// IDPrefix follows "conv_" in every new conversation id: in a cluster, the node's tag
	// (config.Config.SessionIDPrefix), so that any node can tell a conversation's node.
	IDPrefix string
	Logger   *slog.Logger
	Now      func() time.Time
}

// Store holds the conversations of every tenant.
type Store struct {
	opts     Options
	mu       sync.Mutex
	convs    map[string]*conv
	starting map[string]int // tenant → conversations being made
}

// conv is one conversation; its fields are guarded by mu (the Store's), except agent,
// which only the one running answer uses.
type conv struct {
	mu     *sync.Mutex
	tenant string
	info   api.Conversation // without Turns
	system string
	agent  *agent.Agent  // nil for one read from a file, until its next message
	kept   []llm.Message // the agent's history after the last answer (or as read from the file)
	saving sync.Mutex    // orders the writes of its file; taken before mu
	gone   bool          // forgotten: its file is not written again
	turns  []api.ConversationTurn
	sizes  []int // the JSON size of each ended turn (0 for the running one)

	stop    context.CancelCauseFunc // ends the running answer; nil when idle
	waiting *approval               // the call that waits for a decision
	emit    func(event string, v any)
}

type approval struct {
	id      string
	decide  chan agent.Decision // buffered: the one decision
	decided bool
}

// errStopped is the cause of an answer ended by Stop.
var errStopped = errors.New("stopped by the person")

// New returns a store with the conversations kept in opts.Dir, if any.
func New(opts Options) (*Store, error) {
	if opts.MaxPerTenant <= 0 {
		opts.MaxPerTenant = DefaultMaxPerTenant
	}
	if opts.MaxTurns <= 0 {
		opts.MaxTurns = DefaultMaxTurns
	}
	if opts.MaxKeptBytes <= 0 {
		opts.MaxKeptBytes = DefaultMaxKeptBytes
	}
	if opts.MaxHistoryBytes <= 0 {
		opts.MaxHistoryBytes = DefaultMaxHistoryBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{opts: opts, convs: map[string]*conv{}, starting: map[string]int{}}
	// Before the files are read: a session that ends meanwhile is dropped either way.
	stop := opts.Sessions.Subscribe(s.sessionEvent)
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
			stop()
			return nil, fmt.Errorf("conversations: %w", err)
		}
		if err := s.load(); err != nil {
			stop()
			return nil, err
		}
	}
	return s, nil
}

// Create starts a conversation, in a new session unless the request names one.
func (s *Store) Create(ctx context.Context, req api.ConversationRequest) (*api.Conversation, error) {
	if req.Approve == "" {
		req.Approve = api.ApproveAuto
	}
	if err := checkApprove(req.Approve); err != nil {
		return nil, err
	}
	if req.MaxSteps < 0 || req.MaxSteps > maxSteps {
		return nil, fmt.Errorf("max_steps %d: give 1 to %d (0 or none: %d): %w", req.MaxSteps, maxSteps, agent.DefaultMaxSteps, errdefs.ErrInvalidArgument)
	}
	if req.MaxSteps == 0 {
		req.MaxSteps = agent.DefaultMaxSteps
	}
	p, model, err := s.provider(req.Provider, req.Model)
	if err != nil {
		return nil, err
	}
	tenant := session.Tenant(ctx)
	// A place is taken before the session is made, so that requests at once cannot pass
	// the cap together; it is given back unless the conversation is made.
	s.mu.Lock()
	n := s.starting[tenant]
	for _, c := range s.convs {
		if c.tenant == tenant {
			n++
		}
	}
	if n >= s.opts.MaxPerTenant {
		s.mu.Unlock()
		return nil, fmt.Errorf("there are already %d conversations, the most this server keeps per API key: delete one (DELETE /v1/conversations/{id}) or end its session: %w", n, errdefs.ErrResourceExhausted)
	}
	s.starting[tenant]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.starting[tenant]--; s.starting[tenant] <= 0 {
			delete(s.starting, tenant)
		}
		s.mu.Unlock()
	}()
	if req.SessionID == "" {
		sess, err := s.opts.Sessions.Create(ctx, api.CreateSessionRequest{})
		if err != nil {
			return nil, err
		}
		req.SessionID = sess.ID
	} else if _, err := s.opts.Sessions.Get(ctx, req.SessionID); err != nil {
		return nil, err
	}
	now := s.opts.Now()
	c := &conv{
		mu:     &s.mu,
		tenant: tenant,
		system: req.System,
		info: api.Conversation{ID: newID(s.opts.IDPrefix), SessionID: req.SessionID, Provider: p.Name(), Model: model,
			Approve: req.Approve, MaxSteps: req.MaxSteps, State: api.ConversationIdle, CreatedAt: now, UpdatedAt: now},
	}
	if c.agent, err = s.newAgent(c, p, model); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.convs[c.info.ID] = c
	info := c.info
	s.mu.Unlock()
	// The session may have ended since it was found or made, its end told before the
	// conversation was in the store to be dropped: asked again now that it is, the session
	// is either gone or its end will find the conversation.
	if _, err := s.opts.Sessions.Get(ctx, req.SessionID); errdefs.Code(err) == api.CodeNotFound {
		s.forget(c)
		return nil, fmt.Errorf("session %s ended while the conversation was made: %w", req.SessionID, errdefs.ErrNotFound)
	}
	s.save(c)
	return &info, nil
}

// newAgent makes the loop of c, going on from its kept history.
func (s *Store) newAgent(c *conv, p llm.Provider, model string) (*agent.Agent, error) {
	return agent.New(agent.Config{Provider: p, Model: model, System: c.system, MaxSteps: c.info.MaxSteps,
		MaxHistoryBytes: s.opts.MaxHistoryBytes, Runner: s.opts.Sessions, Sessions: s.opts.Sessions, SessionID: c.info.SessionID,
		Tools: tool.Definitions(s.opts.Tools), Approve: c.approve, OnEvent: c.event, Stream: true, History: c.kept})
}

// provider picks the provider named name and the model: model, else the provider's default.
func (s *Store) provider(name, model string) (llm.Provider, string, error) {
	if s.opts.NewProvider == nil {
		return nil, "", fmt.Errorf("this server has no model provider configured: %w", errdefs.ErrUnavailable)
	}
	p, def, err := s.opts.NewProvider(name)
	if err != nil {
		return nil, "", err
	}
	if model == "" {
		model = def
	}
	return p, model, nil
}

func checkApprove(mode string) error {
	if mode != api.ApproveAuto && mode != api.ApproveAsk {
		return fmt.Errorf("approve %q: choose %s (every call runs) or %s (each call waits for a decision): %w", mode, api.ApproveAuto, api.ApproveAsk, errdefs.ErrInvalidArgument)
	}
	return nil
}

// lookup finds the caller's conversation id; another tenant's is not found either. The
// session's end drops a conversation (sessionEvent); lookup also asks for the session, as it
// is about to be used, for the moment between a session's end and the store hearing of it.
func (s *Store) lookup(ctx context.Context, id string) (*conv, error) {
	s.mu.Lock()
	c, ok := s.convs[id]
	s.mu.Unlock()
	if !ok || c.tenant != session.Tenant(ctx) {
		return nil, fmt.Errorf("conversation %q not found: %w", id, errdefs.ErrNotFound)
	}
	if _, err := s.opts.Sessions.Get(ctx, c.info.SessionID); errdefs.Code(err) == api.CodeNotFound {
		s.forget(c)
		return nil, fmt.Errorf("conversation %q ended with its session %s: %w", id, c.info.SessionID, errdefs.ErrNotFound)
	}
	return c, nil
}

// forget drops a conversation, ending its answer if one runs, and its file: no save after
// it writes one again.
func (s *Store) forget(c *conv) {
	c.saving.Lock()
	defer c.saving.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.stop != nil {
		c.stop(errStopped)
	}
	c.gone = true
	delete(s.convs, c.info.ID)
	if s.opts.Dir != "" {
		if err := os.Remove(s.file(c.info.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.opts.Logger.Warn("remove a conversation's file", "conversation_id", c.info.ID, "err", err)
		}
	}
}

// sessionEvent drops the conversations of a session that ended, files and all. A session
// that outlives the server process (detached at its exit) keeps them.
func (s *Store) sessionEvent(ev session.Event) {
	if ev.Kind != session.SessionEnded || ev.Detached {
		return
	}
	s.mu.Lock()
	var gone []*conv
	for _, c := range s.convs {
		if c.info.SessionID == ev.SessionID && c.tenant == ev.Tenant {
			gone = append(gone, c)
		}
	}
	s.mu.Unlock()
	for _, c := range gone {
		s.forget(c)
	}
}

// Get describes a conversation with its kept turns.
func (s *Store) Get(ctx context.Context, id string) (*api.Conversation, error) {
	c, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	info := c.info
	info.Turns = slices.Clone(c.turns)
	if info.Turns == nil {
		info.Turns = []api.ConversationTurn{}
	}
	return &info, nil
}

// List describes the caller's conversations (on sessionID only, if not ""), the latest
// used first, without their turns.
func (s *Store) List(ctx context.Context, sessionID string) []api.Conversation {
	tenant := session.Tenant(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []api.Conversation{}
	for _, c := range s.convs {
		if c.tenant == tenant && (sessionID == "" || c.info.SessionID == sessionID) {
			out = append(out, c.info)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].UpdatedAt.Equal(out[j].UpdatedAt) {
			return out[i].UpdatedAt.After(out[j].UpdatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Update changes the approval mode, provider or model, from the next message on.
func (s *Store) Update(ctx context.Context, id string, req api.UpdateConversationRequest) (*api.Conversation, error) {
	c, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if req.Approve != "" {
		if err := checkApprove(req.Approve); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	name, model := c.info.Provider, c.info.Model
	s.mu.Unlock()
	if req.Provider != "" && req.Provider != name {
		name, model = req.Provider, "" // another provider: its default model unless one is named
	}
	if req.Model != "" {
		model = req.Model
	}
	p, model, err := s.provider(name, model)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if c.stop != nil && (p.Name() != c.info.Provider || model != c.info.Model) {
		s.mu.Unlock()
		return nil, fmt.Errorf("conversation %s is answering: change the model when the answer is done, or stop it: %w", id, errdefs.ErrFailedPrecondition)
	}
	if req.Approve != "" {
		c.info.Approve = req.Approve
	}
	c.info.Provider, c.info.Model = p.Name(), model
	c.info.UpdatedAt = s.opts.Now()
	info := c.info
	s.mu.Unlock()
	s.save(c)
	return &info, nil
}

// Delete forgets a conversation, stopping its answer; its session stays.
func (s *Store) Delete(ctx context.Context, id string) error {
	s.mu.Lock()
	c, ok := s.convs[id]
	s.mu.Unlock()
	if !ok || c.tenant != session.Tenant(ctx) {
		return fmt.Errorf("conversation %q not found: %w", id, errdefs.ErrNotFound)
	}
	s.forget(c)
	return nil
}

// Stop ends the conversation's answer, if one runs: a running cell is interrupted, and the
// answer's stream ends with stop reason "stopped".
func (s *Store) Stop(ctx context.Context, id string) error {
	c, err := s.lookup(ctx, id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.stop != nil {
		c.stop(errStopped)
	}
	return nil
}

// Decide answers the approval a call waits for.
func (s *Store) Decide(ctx context.Context, id string, req api.ApprovalRequest) error {
	var d agent.Decision
	switch req.Decision {
	case api.DecisionRun:
		d = agent.Run
	case api.DecisionSkip:
		d = agent.Decline
	case api.DecisionStop:
		d = agent.Stop
	default:
		return fmt.Errorf("decision %q: choose %s, %s or %s: %w", req.Decision, api.DecisionRun, api.DecisionSkip, api.DecisionStop, errdefs.ErrInvalidArgument)
	}
	c, err := s.lookup(ctx, id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.waiting == nil || c.waiting.id != req.CallID || c.waiting.decided {
		return fmt.Errorf("call %q of conversation %s does not wait for a decision (decided already, or not asked): %w", req.CallID, id, errdefs.ErrFailedPrecondition)
	}
	c.waiting.decided = true
	c.waiting.decide <- d
	c.info.State, c.info.Waiting = api.ConversationAnswering, nil
	return nil
}

// Send answers a message. Everything that refuses it (bad input, an answer already
// running, a file that is not there, no provider) is checked first; then open, if not nil,
// is called once and returns where the answer's events go: "text" ({text}), "call" ({id,
// tool, code, approval}), "output" (api.Output) and "step" (api.AgentStep). The answer lives
// as long as ctx, or until Stop. The turn is returned (and kept) also when it failed: its
// Error says why, and the error is returned.
func (s *Store) Send(ctx context.Context, id string, req api.MessageRequest, open func() func(event string, v any)) (*api.ConversationTurn, error) {
	if strings.TrimSpace(req.Input) == "" {
		return nil, fmt.Errorf("input is empty: say what the model should do: %w", errdefs.ErrInvalidArgument)
	}
	if len(req.Files) > maxFiles {
		return nil, fmt.Errorf("a message may bring at most %d files, not %d: %w", maxFiles, len(req.Files), errdefs.ErrInvalidArgument)
	}
	c, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	s.mu.Lock()
	if c.stop != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("conversation %s is already answering a message: wait for its result, or stop it (POST /v1/conversations/%s/stop): %w", id, id, errdefs.ErrFailedPrecondition)
	}
	c.stop = stop
	c.info.State = api.ConversationAnswering
	name, model := c.info.Provider, c.info.Model
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		c.stop, c.emit, c.waiting, c.info.Waiting = nil, nil, nil, nil
		c.info.State = api.ConversationIdle
		s.mu.Unlock()
	}()
	p, model, err := s.provider(name, model)
	if err != nil {
		return nil, err
	}
	input, files, err := s.withFiles(ctx, c.info.SessionID, req)
	if err != nil {
		return nil, err
	}
	if c.agent == nil {
		if c.agent, err = s.newAgent(c, p, model); err != nil {
			return nil, err
		}
	}
	c.agent.SetModel(p, model)
	var emit func(string, any)
	if open != nil {
		emit = open()
	}
	s.mu.Lock()
	now := s.opts.Now()
	c.emit = emit
	c.turns = append(c.turns, api.ConversationTurn{Input: req.Input, Files: files, Steps: []api.AgentStep{}, ChangedFiles: []api.FileChange{}, StartedAt: now})
	c.sizes = append(c.sizes, 0)
	c.info.TurnCount++
	c.info.UpdatedAt = now
	if c.info.Title == "" {
		c.info.Title = title(req.Input)
	}
	s.mu.Unlock()

	turn, err := c.agent.Send(ctx, input)
	stopped := errors.Is(context.Cause(ctx), errStopped)
	s.mu.Lock()
	c.kept = c.agent.History()
	t := c.turns[len(c.turns)-1] // a copy: it is slimmed and measured outside the lock
	s.mu.Unlock()
	ended := s.opts.Now()
	t.EndedAt = &ended
	if turn != nil {
		t.Output = turn.Output
		t.StopReason = turn.StopReason
		if turn.Files != nil {
			t.ChangedFiles = turn.Files
		}
	}
	switch {
	case stopped:
		t.StopReason, err = api.AgentStopped, nil
	case err != nil:
		if ctx.Err() == nil && errdefs.Code(err) == api.CodeInternal {
			// The model API failed: the server cannot do its job right now.
			err = fmt.Errorf("%s: %w", err.Error(), errdefs.ErrUnavailable)
		}
		t.StopReason, t.Error = api.AgentError, err.Error()
		if ctx.Err() != nil {
			t.Error = "the request ended before the answer"
		}
	}
	t, size := slim(t, s.opts.MaxKeptBytes/4)
	s.mu.Lock()
	c.turns[len(c.turns)-1] = t
	c.sizes[len(c.sizes)-1] = size
	s.bound(c)
	s.mu.Unlock()
	s.save(c)
	return &t, err
}

// withFiles checks the message's files and puts their descriptions before its input.
func (s *Store) withFiles(ctx context.Context, sessionID string, req api.MessageRequest) (string, []string, error) {
	var descs, files []string
	for _, f := range req.Files {
		rel, err := workspace.Clean(f)
		if err != nil || rel == "." {
			return "", nil, fmt.Errorf("file %q: give a path in the workspace, relative to %s: %w", f, api.WorkspaceDir, errdefs.ErrInvalidArgument)
		}
		info, body, err := s.opts.Sessions.GetFile(ctx, sessionID, rel)
		if err != nil {
			if errdefs.Code(err) == api.CodeNotFound {
				return "", nil, fmt.Errorf("file %q is not in the session's workspace: upload it first (PUT /v1/sessions/%s/files/%s): %w", f, sessionID, rel, errdefs.ErrInvalidArgument)
			}
			return "", nil, err
		}
		descs = append(descs, agent.DescribeFile(rel, info.Size, body))
		body.Close()
		files = append(files, rel)
	}
	input := req.Input
	if note := agent.FilesNote(descs); note != "" {
		input = note + "\n\n" + input
	}
	return input, files, nil
}

// bound drops the oldest kept turns past MaxTurns or MaxKeptBytes; the latest stays. s.mu
// is held.
func (s *Store) bound(c *conv) {
	total := 0
	for _, n := range c.sizes {
		total += n
	}
	for len(c.turns) > 1 && (len(c.turns) > s.opts.MaxTurns || total > s.opts.MaxKeptBytes) {
		total -= c.sizes[0]
		c.turns, c.sizes = c.turns[1:], c.sizes[1:]
	}
}

// approve is the agent's approval: a call that was announced waiting (see event) waits for
// Decide, or for the answer's end; any other runs.
func (c *conv) approve(ctx context.Context, call tool.Call) (agent.Decision, error) {
	c.mu.Lock()
	a := c.waiting
	c.mu.Unlock()
	if a == nil || a.id != call.ID {
		return agent.Run, nil
	}
	defer func() {
		c.mu.Lock()
		if c.waiting == a {
			c.waiting, c.info.Waiting = nil, nil
		}
		c.mu.Unlock()
	}()
	select {
	case d := <-a.decide:
		return d, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// event passes the agent's events on, and keeps the running turn's steps.
func (c *conv) event(e agent.Event) {
	c.mu.Lock()
	emit := c.emit
	ask := c.info.Approve == api.ApproveAsk
	if e.Kind == agent.EventCall && ask {
		// Waiting before anyone hears of the call, so that a decision sent as soon as the
		// event arrives finds it.
		c.waiting = &approval{id: e.Call.ID, decide: make(chan agent.Decision, 1)}
		c.info.State = api.ConversationWaiting
		c.info.Waiting = &api.WaitingCall{ID: e.Call.ID, Tool: e.Call.Name, Code: e.Call.Code}
	}
	if e.Kind == agent.EventStep && len(c.turns) > 0 {
		t := &c.turns[len(c.turns)-1]
		t.Steps = append(t.Steps, Step(*e.Step))
	}
	c.mu.Unlock()
	if emit == nil {
		return
	}
	switch e.Kind {
	case agent.EventText:
		emit("text", map[string]string{"text": e.Text})
	case agent.EventCall:
		ev := map[string]string{"id": e.Call.ID, "tool": e.Call.Name, "code": e.Call.Code}
		if ask {
			ev["approval"] = "pending"
		}
		emit("call", ev)
	case agent.EventOutput:
		emit("output", e.Output)
	case agent.EventStep:
		emit("step", Step(*e.Step))
	}
}

// Step is a step of the loop in the API's shape.
func Step(st agent.Step) api.AgentStep {
	out := api.AgentStep{ID: st.ID, Tool: st.Tool, Code: st.Code, Error: st.Error, Declined: st.Declined}
	if st.Result != nil {
		out.Result, out.CommandResult, out.ToolResult = st.Result.Execute, st.Result.Command, st.Result.Tool
	}
	return out
}

func title(input string) string {
	t := strings.Join(strings.Fields(input), " ")
	if utf8.RuneCountInString(t) <= titleChars {
		return t
	}
	r := []rune(t)
	return string(r[:titleChars-1]) + "…"
}

func jsonSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

func newID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return "conv_" + prefix + hex.EncodeToString(b)
}

// slim returns t within budget bytes of JSON (when it can), and its size: the rich outputs
// of its calls (images, HTML) become notes, oldest call first, then their text is cut. The
// model saw them whole; only what is kept for showing later is slimmed. t is not changed:
// its steps are copied where they change.
func slim(t api.ConversationTurn, budget int) (api.ConversationTurn, int) {
	size := jsonSize(t)
	if size <= budget {
		return t, size
	}
	t.Steps = slices.Clone(t.Steps)
	for _, cut := range []func(*api.AgentStep){slimRich, slimText} {
		for i := range t.Steps {
			cut(&t.Steps[i])
			if size = jsonSize(t); size <= budget {
				return t, size
			}
		}
	}
	return t, size
}

const keptTextBytes = 2000 // of each output, when a turn is slimmed

// slimRich replaces the non-text data of a step's outputs with a note.
func slimRich(st *api.AgentStep) {
	if st.Result != nil {
		r := *st.Result
		r.Outputs = slimOutputs(r.Outputs, richNote)
		st.Result = &r
	}
	if st.ToolResult != nil {
		r := *st.ToolResult
		r.Outputs = slimOutputs(r.Outputs, richNote)
		st.ToolResult = &r
	}
}

// slimText cuts the text of a step's outputs, and a session tool's repr.
func slimText(st *api.AgentStep) {
	if st.Result != nil {
		r := *st.Result
		r.Outputs = slimOutputs(r.Outputs, clipOutput)
		st.Result = &r
	}
	if st.CommandResult != nil {
		r := *st.CommandResult
		r.Stdout, r.Stderr = clipText(r.Stdout), clipText(r.Stderr)
		st.CommandResult = &r
	}
	if st.ToolResult != nil {
		r := *st.ToolResult
		r.Outputs = slimOutputs(r.Outputs, clipOutput)
		r.Text = clipText(r.Text)
		if b, err := json.Marshal(r.Value); r.HasValue && err == nil && len(b) > keptTextBytes {
			// Kept as text, cut, as a value JSON cannot hold is.
			r.HasValue, r.Value, r.Text, r.ValueType = false, nil, clipText(string(b)), "JSON"
		}
		st.ToolResult = &r
	}
}

// slimOutputs is a copy of outs, each changed by f.
func slimOutputs(outs []api.Output, f func(api.Output) api.Output) []api.Output {
	outs = slices.Clone(outs)
	for i, o := range outs {
		outs[i] = f(o)
	}
	return outs
}

// richNote keeps an output's text/plain, noting the rest of its data as not kept.
func richNote(o api.Output) api.Output {
	if len(o.Data) == 0 {
		return o
	}
	data := map[string]any{}
	dropped := []string{}
	for mime, v := range o.Data {
		if mime == "text/plain" {
			data[mime] = v
		} else {
			dropped = append(dropped, mime)
		}
	}
	if len(dropped) > 0 {
		sort.Strings(dropped)
		text, _ := data["text/plain"].(string)
		data["text/plain"] = strings.TrimSpace(text + "\n[not kept: " + strings.Join(dropped, ", ") + "; the conversation was too large]")
	}
	o.Data = data
	return o
}

// clipOutput cuts an output's text.
func clipOutput(o api.Output) api.Output {
	o.Text = clipText(o.Text)
	o.Traceback = nil
	if o.Type == api.OutputError {
		o.Traceback = []string{clipText(o.EName + ": " + o.EValue)}
	}
	if v, ok := o.Data["text/plain"].(string); ok {
		o.Data = map[string]any{"text/plain": clipText(v)}
	}
	return o
}

func clipText(s string) string {
	if len(s) <= keptTextBytes {
		return s
	}
	return tool.Prefix(s, keptTextBytes) + "\n[... cut: the conversation was too large]"
}

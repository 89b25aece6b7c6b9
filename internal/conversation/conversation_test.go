package conversation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/session"
)

// The store's bookkeeping, without a kernel: fake sessions and a model that echoes. The
// whole path (real sessions, a stand-in model API over HTTP, approvals, stop) is tested in
// internal/httpapi.

type fakeSessions struct {
	mu    sync.Mutex
	owner map[string]string // session id → tenant
	subs  []func(session.Event)
	// answered, when set, runs after Create or Get answered (outside the lock): what
	// happens between the manager's answer and the caller's next step.
	answered func(id string)
	// subscribed, when set, runs in a goroutine of its own once Subscribe returns, as the
	// manager's deliveries do.
	subscribed func(fn func(session.Event))
}

func (f *fakeSessions) Subscribe(fn func(session.Event)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, fn)
	if f.subscribed != nil {
		go f.subscribed(fn)
	}
	return func() {}
}

// end ends session id and tells the subscribers, as the manager does (here before end
// returns).
func (f *fakeSessions) end(id string, why session.EndReason) {
	f.mu.Lock()
	tenant := f.owner[id]
	delete(f.owner, id)
	subs := f.subs
	f.mu.Unlock()
	for _, fn := range subs {
		fn(session.Event{Kind: session.SessionEnded, SessionID: id, Tenant: tenant, Reason: why})
	}
}

func (f *fakeSessions) Execute(context.Context, string, api.ExecuteRequest, func(api.Output)) (*api.ExecuteResult, error) {
	return &api.ExecuteResult{Status: api.StatusOK}, nil
}

func (f *fakeSessions) Command(context.Context, string, api.CommandRequest) (*api.CommandResult, error) {
	return &api.CommandResult{Status: api.StatusOK}, nil
}

func (f *fakeSessions) Create(ctx context.Context, _ api.CreateSessionRequest) (*api.Session, error) {
	f.mu.Lock()
	id := fmt.Sprintf("s%d", len(f.owner))
	f.owner[id] = session.Tenant(ctx)
	answered := f.answered
	f.mu.Unlock()
	if answered != nil {
		answered(id)
	}
	return &api.Session{ID: id}, nil
}

func (f *fakeSessions) Get(ctx context.Context, id string) (*api.Session, error) {
	f.mu.Lock()
	t, ok := f.owner[id]
	answered := f.answered
	f.mu.Unlock()
	if !ok || t != session.Tenant(ctx) {
		return nil, fmt.Errorf("session %s: %w", id, errdefs.ErrNotFound)
	}
	if answered != nil {
		answered(id)
	}
	return &api.Session{ID: id}, nil
}

func (f *fakeSessions) GetFile(ctx context.Context, id, path string) (*api.FileInfo, io.ReadCloser, error) {
	return nil, nil, fmt.Errorf("file %s: %w", path, errdefs.ErrNotFound)
}

// echo answers with the last message and how many it was sent.
type echo struct{}

func (echo) Name() string { return api.ProviderOpenAI }

func (echo) Complete(_ context.Context, req llm.Request, _ func(string)) (*llm.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Text: fmt.Sprintf("you said %s (%d)", last.Text, len(req.Messages))}, StopReason: llm.StopEnd}, nil
}

func newStore(t *testing.T, mod func(*Options)) (*Store, *fakeSessions) {
	t.Helper()
	f := &fakeSessions{owner: map[string]string{}}
	o := Options{Sessions: f, NewProvider: func(string) (llm.Provider, string, error) { return echo{}, "echo-1", nil }}
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, f
}

func TestKeptTurnsBounded(t *testing.T) {
	s, _ := newStore(t, func(o *Options) { o.MaxTurns = 2 })
	ctx := context.Background()
	c, err := s.Create(ctx, api.ConversationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		turn, err := s.Send(ctx, c.ID, api.MessageRequest{Input: fmt.Sprint("message ", i)}, nil)
		if err != nil || turn.Output != fmt.Sprintf("you said message %d (%d)", i, 2*i+1) {
			t.Fatalf("send %d: %+v %v", i, turn, err)
		}
	}
	got, err := s.Get(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.TurnCount != 3 || len(got.Turns) != 2 || got.Turns[0].Input != "message 1" || got.Title != "message 0" {
		t.Errorf("conversation %+v", got)
	}
	// Bytes bound too: a turn bigger than the bound keeps only itself.
	s.opts.MaxKeptBytes = 10
	s.Send(ctx, c.ID, api.MessageRequest{Input: strings.Repeat("long ", 20)}, nil)
	got, _ = s.Get(ctx, c.ID)
	if len(got.Turns) != 1 || !strings.HasPrefix(got.Turns[0].Input, "long") {
		t.Errorf("with a tiny byte bound: %d turns", len(got.Turns))
	}
}

func TestTenantCapAndEndedSessions(t *testing.T) {
	s, f := newStore(t, func(o *Options) { o.MaxPerTenant = 1 })
	alice, bob := session.WithTenant(context.Background(), "alice"), session.WithTenant(context.Background(), "bob")
	c, err := s.Create(alice, api.ConversationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(alice, api.ConversationRequest{}); errdefs.Code(err) != api.CodeResourceExhausted {
		t.Errorf("alice's second conversation: %v", err)
	}
	if _, err := s.Create(bob, api.ConversationRequest{}); err != nil {
		t.Errorf("bob's first conversation: %v", err)
	}
	// Alice's session ends: her conversation goes with it, and frees her place.
	f.end(c.SessionID, session.EndIdle)
	if list := s.List(alice, ""); len(list) != 0 {
		t.Errorf("alice's list after her session ended: %+v", list)
	}
	if _, err := s.Create(alice, api.ConversationRequest{}); err != nil {
		t.Errorf("alice after her session ended: %v", err)
	}
}

func TestTitle(t *testing.T) {
	for in, want := range map[string]string{
		"  what is\nthis  ":      "what is this",
		strings.Repeat("é", 100): strings.Repeat("é", titleChars-1) + "…",
	} {
		if got := title(in); got != want {
			t.Errorf("title(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestKeptInFiles: a store on the same folder (the next server) has the conversations,
// their turns and what the model was told, and goes on with them; one whose session ended
// meanwhile is dropped with its file; an unreadable file is left alone.
func TestKeptInFiles(t *testing.T) {
	dir := t.TempDir()
	s, f := newStore(t, func(o *Options) { o.Dir = dir })
	alice := session.WithTenant(context.Background(), "alice")
	c, _ := s.Create(alice, api.ConversationRequest{Approve: api.ApproveAsk, System: "be brief"})
	gone, _ := s.Create(alice, api.ConversationRequest{})
	if _, err := s.Send(alice, c.ID, api.MessageRequest{Input: "one"}, nil); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	delete(f.owner, gone.SessionID)
	f.mu.Unlock()
	os.WriteFile(filepath.Join(dir, "conv_broken.json"), []byte("{"), 0o600)

	s2, err := New(Options{Sessions: f, Dir: dir, NewProvider: func(string) (llm.Provider, string, error) { return echo{}, "echo-1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Get(alice, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Approve != api.ApproveAsk || len(got.Turns) != 1 || got.Turns[0].Output != "you said one (1)" || got.Title != "one" {
		t.Errorf("after a restart: %+v", got)
	}
	turn, err := s2.Send(alice, c.ID, api.MessageRequest{Input: "two"}, nil)
	if err != nil || turn.Output != "you said two (3)" {
		t.Errorf("going on after a restart: %+v %v (want the model sent the 3 messages)", turn, err)
	}
	if _, err := s2.Get(alice, gone.ID); errdefs.Code(err) != api.CodeNotFound {
		t.Errorf("a conversation whose session ended: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, gone.ID+".json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("its file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "conv_broken.json")); err != nil {
		t.Errorf("the unreadable file: %v", err)
	}
	if err := s2.Delete(alice, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, c.ID+".json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a deleted conversation's file: %v", err)
	}
}

// blocking runs every python call until its context ends, saying when it started.
type blocking struct {
	fakeSessions
	started chan string
}

func (b *blocking) Execute(ctx context.Context, _ string, req api.ExecuteRequest, _ func(api.Output)) (*api.ExecuteResult, error) {
	b.started <- req.Code
	<-ctx.Done()
	return nil, ctx.Err()
}

// caller calls python for each message of the person's, then answers.
type caller struct{}

func (caller) Name() string { return api.ProviderOpenAI }

func (caller) Complete(_ context.Context, req llm.Request, _ func(string)) (*llm.Response, error) {
	if last := req.Messages[len(req.Messages)-1]; last.Text != "" { // the person's message (maybe after results of a stopped turn)
		return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call-1", Name: "python", Input: []byte(`{"code": "wait()"}`)}}}, StopReason: llm.StopToolUse}, nil
	}
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Text: "done"}, StopReason: llm.StopEnd}, nil
}

func newBlocking(t *testing.T, mod func(*Options)) (*Store, *blocking) {
	t.Helper()
	b := &blocking{fakeSessions: fakeSessions{owner: map[string]string{}}, started: make(chan string, 1)}
	o := Options{Sessions: b, NewProvider: func(string) (llm.Provider, string, error) { return caller{}, "caller-1", nil }}
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

// TestStopAndDeleteDuringAnAnswer: Stop ends a running call as "stopped"; a second message
// meanwhile is refused; Delete during an answer ends it, and no file comes back.
func TestStopAndDeleteDuringAnAnswer(t *testing.T) {
	dir := t.TempDir()
	s, b := newBlocking(t, func(o *Options) { o.Dir = dir })
	ctx := context.Background()
	c, err := s.Create(ctx, api.ConversationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		turn *api.ConversationTurn
		err  error
	}
	send := func() chan result {
		done := make(chan result, 1)
		go func() {
			turn, err := s.Send(ctx, c.ID, api.MessageRequest{Input: "go"}, nil)
			done <- result{turn, err}
		}()
		return done
	}
	done := send()
	<-b.started
	if _, err := s.Send(ctx, c.ID, api.MessageRequest{Input: "again"}, func() func(string, any) {
		t.Error("a refused message opened its stream")
		return nil
	}); errdefs.Code(err) != api.CodeFailedPrecondition {
		t.Errorf("a second message during an answer: %v", err)
	}
	if err := s.Stop(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.turn.StopReason != api.AgentStopped || len(r.turn.Steps) != 1 {
		t.Fatalf("stopped turn %+v, %v", r.turn, r.err)
	}

	done = send()
	<-b.started
	if err := s.Delete(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	<-done
	if _, err := os.Stat(filepath.Join(dir, c.ID+".json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the deleted conversation's file: %v", err)
	}
	if _, err := s.Get(ctx, c.ID); errdefs.Code(err) != api.CodeNotFound {
		t.Errorf("the deleted conversation: %v", err)
	}
}

// TestDecide: in ask mode the call waits, with the call in the conversation for a client
// that did not see the event; one decision, for that call only.
func TestDecide(t *testing.T) {
	s, b := newBlocking(t, nil)
	ctx := context.Background()
	c, _ := s.Create(ctx, api.ConversationRequest{Approve: api.ApproveAsk})
	events := make(chan string, 10)
	done := make(chan *api.ConversationTurn, 1)
	go func() {
		turn, _ := s.Send(ctx, c.ID, api.MessageRequest{Input: "go"}, func() func(string, any) {
			return func(event string, v any) { events <- event }
		})
		done <- turn
	}()
	for ev := range events {
		if ev == "call" {
			break
		}
	}
	got, _ := s.Get(ctx, c.ID)
	if got.State != api.ConversationWaiting || got.Waiting == nil || got.Waiting.ID != "call-1" || got.Waiting.Code != "wait()" {
		t.Fatalf("while waiting: %+v", got)
	}
	for _, bad := range []api.ApprovalRequest{{CallID: "call-2", Decision: api.DecisionRun}, {CallID: "call-1", Decision: "later"}} {
		if err := s.Decide(ctx, c.ID, bad); err == nil {
			t.Errorf("decision %+v taken", bad)
		}
	}
	if err := s.Decide(ctx, c.ID, api.ApprovalRequest{CallID: "call-1", Decision: api.DecisionRun}); err != nil {
		t.Fatal(err)
	}
	if err := s.Decide(ctx, c.ID, api.ApprovalRequest{CallID: "call-1", Decision: api.DecisionSkip}); errdefs.Code(err) != api.CodeFailedPrecondition {
		t.Errorf("a second decision: %v", err)
	}
	if code := <-b.started; code != "wait()" {
		t.Errorf("ran %q", code)
	}
	got, _ = s.Get(ctx, c.ID)
	if got.State != api.ConversationAnswering || got.Waiting != nil {
		t.Errorf("after the decision: %+v", got)
	}
	s.Stop(ctx, c.ID)
	if turn := <-done; turn.StopReason != api.AgentStopped {
		t.Errorf("turn %+v", turn)
	}
}

// TestAttackCapAtOnce: requests at once cannot pass the per-key cap together.
func TestAttackCapAtOnce(t *testing.T) {
	s, _ := newStore(t, func(o *Options) { o.MaxPerTenant = 2 })
	ctx := session.WithTenant(context.Background(), "mallory")
	var wg sync.WaitGroup
	var mu sync.Mutex
	made := 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Create(ctx, api.ConversationRequest{}); err == nil {
				mu.Lock()
				made++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if made != 2 {
		t.Errorf("%d conversations made at once, cap 2", made)
	}
}

// TestSlim: a turn over its budget keeps its text outputs and notes what it dropped; the
// turn it was made from is not changed.
func TestSlim(t *testing.T) {
	big := strings.Repeat("A", 50_000)
	res := &api.ExecuteResult{Status: api.StatusOK, Outputs: []api.Output{
		{Type: api.OutputStream, Name: "stdout", Text: "hello\n"},
		{Type: api.OutputDisplayData, Data: map[string]any{"image/png": big, "text/plain": "<Figure>"}},
	}}
	turn := api.ConversationTurn{Input: "x", Steps: []api.AgentStep{{ID: "1", Tool: "python", Code: "plot()", Result: res}}}
	got, size := slim(turn, 10_000)
	if size > 10_000 || size != jsonSize(got) {
		t.Errorf("size %d", size)
	}
	outs := got.Steps[0].Result.Outputs
	if outs[0].Text != "hello\n" || outs[1].Data["image/png"] != nil || !strings.Contains(outs[1].Data["text/plain"].(string), "not kept: image/png") {
		t.Errorf("slimmed outputs %+v", outs)
	}
	if res.Outputs[1].Data["image/png"] != big {
		t.Error("the original turn was changed")
	}
}

// TestSlimToolResult: a session tool's step is slimmed as a python step is: its plots
// noted, then its text, repr and a big value cut.
func TestSlimToolResult(t *testing.T) {
	big := strings.Repeat("A", 50_000)
	res := &api.ToolCallResult{Status: api.StatusOK, HasValue: true, Value: []any{big},
		Outputs: []api.Output{
			{Type: api.OutputStream, Name: "stdout", Text: big},
			{Type: api.OutputDisplayData, Data: map[string]any{"image/png": big, "text/plain": "<Figure>"}},
		}}
	turn := api.ConversationTurn{Input: "x", Steps: []api.AgentStep{{ID: "1", Tool: "area", Code: `{"w":1}`, ToolResult: res}}}
	got, size := slim(turn, 10_000)
	if size > 10_000 {
		t.Errorf("size %d", size)
	}
	r := got.Steps[0].ToolResult
	if r.HasValue || r.ValueType != "JSON" || !strings.HasPrefix(r.Text, `["AAA`) || !strings.Contains(r.Text, "cut: the conversation was too large") {
		t.Errorf("slimmed value: %v %q %.40q", r.HasValue, r.ValueType, r.Text)
	}
	if r.Outputs[1].Data["image/png"] != nil || len(r.Outputs[0].Text) > 2100 {
		t.Errorf("slimmed outputs %+v", r.Outputs[1])
	}
	if !res.HasValue || res.Outputs[0].Text != big {
		t.Error("the original turn was changed")
	}
}

// TestSessionEndDropsConversation: when the manager tells the store that a session ended,
// its conversations go at once, files and all, with no call needed to notice; a session
// that outlives the server (detached at its exit) keeps them.
func TestSessionEndDropsConversation(t *testing.T) {
	dir := t.TempDir()
	s, f := newStore(t, func(o *Options) { o.Dir = dir })
	alice := session.WithTenant(context.Background(), "alice")
	c, err := s.Create(alice, api.ConversationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := s.Create(alice, api.ConversationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	subs := f.subs
	f.mu.Unlock()
	for _, fn := range subs {
		fn(session.Event{Kind: session.SessionEnded, SessionID: kept.SessionID, Tenant: "alice", Reason: session.EndServerExit, Detached: true})
	}
	f.end(c.SessionID, session.EndDeleted)
	s.mu.Lock()
	_, gone := s.convs[c.ID]
	_, stays := s.convs[kept.ID]
	s.mu.Unlock()
	if gone || !stays {
		t.Errorf("after the events: ended session's conversation kept %v, detached one's kept %v", gone, stays)
	}
	if _, err := os.Stat(filepath.Join(dir, c.ID+".json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dropped conversation's file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, kept.ID+".json")); err != nil {
		t.Errorf("the kept conversation's file: %v", err)
	}
}

// TestSessionEndsWhileCreating: a session that ends while a conversation is being made on
// it (after the manager said it lives, before the conversation is in the store, so the end
// finds nothing to drop) leaves no conversation behind: none in the list, none holding a
// place under the cap, no file. The request says the session ended.
func TestSessionEndsWhileCreating(t *testing.T) {
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprint("named session ", named), func(t *testing.T) {
			dir := t.TempDir()
			s, f := newStore(t, func(o *Options) { o.Dir = dir; o.MaxPerTenant = 1 })
			alice := session.WithTenant(context.Background(), "alice")
			req := api.ConversationRequest{}
			if named {
				sess, err := f.Create(alice, api.CreateSessionRequest{})
				if err != nil {
					t.Fatal(err)
				}
				req.SessionID = sess.ID
			}
			var once sync.Once
			f.mu.Lock()
			f.answered = func(id string) { once.Do(func() { f.end(id, session.EndDeleted) }) }
			f.mu.Unlock()
			c, err := s.Create(alice, req)
			if errdefs.Code(err) != api.CodeNotFound {
				t.Errorf("a conversation on a session that ended meanwhile: %+v, %v; want not found", c, err)
			}
			if list := s.List(alice, ""); len(list) != 0 {
				t.Errorf("the list keeps %+v", list)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("files left: %v", entries)
			}
			f.mu.Lock()
			f.answered = nil
			f.mu.Unlock()
			if _, err := s.Create(alice, api.ConversationRequest{}); err != nil {
				t.Errorf("the next conversation, under a cap of 1: %v", err)
			}
		})
	}
}

// TestSessionEndsWhileLoading: the manager tells of an ending from its own goroutine, also
// while a new store reads its files (it subscribes first, so as to miss none).
func TestSessionEndsWhileLoading(t *testing.T) {
	dir := t.TempDir()
	s, f := newStore(t, func(o *Options) { o.Dir = dir })
	alice := session.WithTenant(context.Background(), "alice")
	for range 3 {
		if _, err := s.Create(alice, api.ConversationRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	delivered := make(chan struct{})
	f.subscribed = func(fn func(session.Event)) {
		defer close(delivered)
		fn(session.Event{Kind: session.SessionEnded, SessionID: "elsewhere", Tenant: "alice", Reason: session.EndIdle})
	}
	again, err := New(Options{Dir: dir, Sessions: f})
	if err != nil {
		t.Fatal(err)
	}
	<-delivered
	if list := again.List(alice, ""); len(list) != 3 {
		t.Errorf("the next store has %d conversations, want 3", len(list))
	}
}

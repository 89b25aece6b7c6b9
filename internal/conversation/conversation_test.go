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
}

func (f *fakeSessions) Execute(context.Context, string, api.ExecuteRequest, func(api.Output)) (*api.ExecuteResult, error) {
	return &api.ExecuteResult{Status: api.StatusOK}, nil
}

func (f *fakeSessions) Command(context.Context, string, api.CommandRequest) (*api.CommandResult, error) {
	return &api.CommandResult{Status: api.StatusOK}, nil
}

func (f *fakeSessions) Create(ctx context.Context, _ api.CreateSessionRequest) (*api.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := fmt.Sprintf("s%d", len(f.owner))
	f.owner[id] = session.Tenant(ctx)
	return &api.Session{ID: id}, nil
}

func (f *fakeSessions) Get(ctx context.Context, id string) (*api.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.owner[id]; !ok || t != session.Tenant(ctx) {
		return nil, fmt.Errorf("session %s: %w", id, errdefs.ErrNotFound)
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
	f.mu.Lock()
	delete(f.owner, c.SessionID)
	f.mu.Unlock()
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

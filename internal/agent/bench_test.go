package agent

import (
	"context"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
)

// BenchmarkTurn is one turn of the loop with one tool call (x = 1) and a model that answers
// at once: what the loop adds to the execution itself (BenchmarkExecute) is its overhead.
//
//	go test -run '^$' -bench . -benchtime 300x ./internal/agent/
func BenchmarkTurn(b *testing.B) {
	m := sessiontest.New(b, nil)
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		if last := req.Messages[len(req.Messages)-1]; len(last.ToolResults) > 0 {
			return answer("done"), nil
		}
		return callPython("c", "x = 1"), nil
	}}
	s, err := m.Create(context.Background(), api.CreateSessionRequest{})
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(Config{Provider: p, Runner: m, SessionID: s.ID})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		a.history = nil
		if _, err := a.Send(context.Background(), "go"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecute(b *testing.B) {
	m := sessiontest.New(b, nil)
	s, err := m.Create(context.Background(), api.CreateSessionRequest{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := m.Execute(context.Background(), s.ID, api.ExecuteRequest{Code: "x = 1"}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

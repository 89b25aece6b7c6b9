package anthropic_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/anthropic"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
)

func TestConformance(t *testing.T) {
	llmtest.Suite{
		NewServer: llmtest.NewAnthropic,
		New: func(baseURL, key string) (llm.Provider, error) {
			return anthropic.New(anthropic.Options{APIKey: key, BaseURL: baseURL, MaxRetries: 1})
		},
		KeyEnv: "ANTHROPIC_API_KEY",
	}.Run(t)
}

func hi(model string, maxTokens int) llm.Request {
	return llm.Request{Model: model, MaxTokens: maxTokens, Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}
}

func TestOverloaded(t *testing.T) {
	s := llmtest.NewAnthropic(t, func(llmtest.Request) llmtest.Reply { return llmtest.Fail(529, "Overloaded") })
	p, err := anthropic.New(anthropic.Options{APIKey: s.Key, BaseURL: s.URL, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Complete(context.Background(), hi("claude-test", 0), nil)
	if err == nil || !strings.Contains(err.Error(), "529: Overloaded") || len(s.Requests()) != 1 {
		t.Errorf("error = %v after %d requests, want 529 Overloaded after 1", err, len(s.Requests()))
	}
}

func TestStreamErrorEvent(t *testing.T) {
	// The API can fail after the stream began, with an error event.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n")
		fmt.Fprint(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
	}))
	defer ts.Close()
	p, err := anthropic.New(anthropic.Options{BaseURL: ts.URL, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Complete(context.Background(), hi("m", 0), func(string) {})
	if err == nil || !strings.Contains(err.Error(), "Overloaded") || !strings.Contains(err.Error(), "during the answer") {
		t.Errorf("error = %v, want the server's message", err)
	}
}

func TestMaxTokens(t *testing.T) {
	s := llmtest.NewAnthropic(t, func(llmtest.Request) llmtest.Reply { return llmtest.Text("ok") })
	p, err := anthropic.New(anthropic.Options{APIKey: s.Key, BaseURL: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	// No limit takes the default; a limit too high for a request without streaming streams.
	for _, max := range []int{0, 64000} {
		if _, err := p.Complete(context.Background(), hi("claude-test", max), nil); err != nil {
			t.Fatal(err)
		}
	}
	r := s.Requests()
	if r[0].MaxTokens != anthropic.DefaultMaxTokens || r[0].Stream {
		t.Errorf("without a limit: max_tokens %d, stream %v; want %d without streaming", r[0].MaxTokens, r[0].Stream, anthropic.DefaultMaxTokens)
	}
	if r[1].MaxTokens != 64000 || !r[1].Stream {
		t.Errorf("with 64000: max_tokens %d, stream %v; want 64000 streamed", r[1].MaxTokens, r[1].Stream)
	}
}

func TestNew(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("ANTHROPIC_BASE_URL", "")
	if _, err := anthropic.New(anthropic.Options{}); err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("New without a key for api.anthropic.com: %v, want an error naming ANTHROPIC_API_KEY", err)
	}
	if _, err := anthropic.New(anthropic.Options{BaseURL: "api.anthropic.com", APIKey: "k"}); err == nil {
		t.Error("New took a base URL without a scheme")
	}

	// A proxy may take requests without a key.
	s := llmtest.NewAnthropic(t, llmtest.Replies(llmtest.Text("ok")))
	s.Key = ""
	p, err := anthropic.New(anthropic.Options{BaseURL: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Complete(context.Background(), hi("claude-test", 0), nil); err != nil {
		t.Fatal(err)
	}
	if h := s.Requests()[0].Header.Get("X-Api-Key"); h != "" {
		t.Errorf("x-api-key = %q, want none", h)
	}

	// The environment fills in what Options leave out.
	s2 := llmtest.NewAnthropic(t, llmtest.Replies(llmtest.Text("ok")))
	t.Setenv("ANTHROPIC_API_KEY", s2.Key)
	t.Setenv("ANTHROPIC_BASE_URL", s2.URL)
	p, err = anthropic.New(anthropic.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Complete(context.Background(), hi("claude-test", 0), nil); err != nil {
		t.Errorf("with the key and base URL from the environment: %v", err)
	}
	if p.Name() != "anthropic" {
		t.Errorf("name = %q", p.Name())
	}
}

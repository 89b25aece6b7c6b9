package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/llm/openai"
	"github.com/cellbox/cellbox/internal/tool"
)

func TestConformance(t *testing.T) {
	llmtest.Suite{
		NewServer: llmtest.NewOpenAI,
		New: func(baseURL, key string) (llm.Provider, error) {
			return openai.New(openai.Options{APIKey: key, BaseURL: baseURL, MaxRetries: 1})
		},
		KeyEnv: "OPENAI_API_KEY",
	}.Run(t)
}

func hi(model string) llm.Request {
	return llm.Request{Model: model, Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}
}

func TestBrokenArguments(t *testing.T) {
	for _, stream := range []bool{false, true} {
		s := llmtest.NewOpenAI(t, llmtest.Replies(llmtest.CallTool(tool.Python, `{"code": "print(1`)))
		p, err := openai.New(openai.Options{APIKey: s.Key, BaseURL: s.URL})
		if err != nil {
			t.Fatal(err)
		}
		var onText func(string)
		if stream {
			onText = func(string) {}
		}
		resp, err := p.Complete(context.Background(), hi("gpt-test"), onText)
		if err != nil {
			t.Fatal(err)
		}
		// The call still comes back, as JSON, and the tool tells the model what is wrong.
		c := resp.Message.ToolCalls[0]
		if !json.Valid(c.Input) {
			t.Fatalf("stream=%v: input %s is not JSON", stream, c.Input)
		}
		if _, err := tool.Decode(c.Name, c.Input); err == nil || !strings.Contains(err.Error(), "JSON object") {
			t.Errorf("stream=%v: decode error = %v, want one that asks for a JSON object", stream, err)
		}
	}
}

func TestOtherErrorShapes(t *testing.T) {
	// Servers other than OpenAI's answer errors in other shapes.
	for _, body := range []string{
		`{"object":"error","message":"model llama9 not loaded","type":"NotFoundError","code":404}`,
		`{"error":"model llama9 not loaded"}`,
		`model llama9 not loaded`,
	} {
		t.Run(body, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprint(w, body)
			}))
			defer ts.Close()
			p, err := openai.New(openai.Options{BaseURL: ts.URL + "/v1"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Complete(context.Background(), hi("llama9"), nil)
			if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "model llama9 not loaded") {
				t.Errorf("error = %v, want the 404 and the server's message", err)
			}
		})
	}
}

func TestNew(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	if _, err := openai.New(openai.Options{}); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("New without a key for api.openai.com: %v, want an error naming OPENAI_API_KEY", err)
	}
	if _, err := openai.New(openai.Options{BaseURL: "localhost:11434"}); err == nil {
		t.Error("New took a base URL without a scheme")
	}

	// A local server takes requests without a key.
	s := llmtest.NewOpenAI(t, llmtest.Replies(llmtest.Text("ok")))
	s.Key = ""
	p, err := openai.New(openai.Options{BaseURL: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Complete(context.Background(), hi("llama3"), nil); err != nil {
		t.Fatal(err)
	}
	if h := s.Requests()[0].Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization = %q, want none", h)
	}

	// The environment fills in what Options leave out.
	s2 := llmtest.NewOpenAI(t, llmtest.Replies(llmtest.Text("ok")))
	t.Setenv("OPENAI_API_KEY", s2.Key)
	t.Setenv("OPENAI_BASE_URL", s2.URL)
	p, err = openai.New(openai.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Complete(context.Background(), hi("gpt-test"), nil); err != nil {
		t.Errorf("with the key and base URL from the environment: %v", err)
	}
	if p.Name() != "openai" {
		t.Errorf("name = %q", p.Name())
	}
}

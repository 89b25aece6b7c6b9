package llmtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/tool"
)

// Suite is the conformance suite that every llm.Provider passes against its stand-in
// server, with and without streaming: text, tool calls, tool results with images, stop
// reasons, errors and cancellation.
type Suite struct {
	NewServer func(t testing.TB, script Script) *Server // NewOpenAI, NewResponses or NewAnthropic
	// New returns a provider for a base URL and an API key that retries a failed request
	// once at most.
	New    func(baseURL, key string) (llm.Provider, error)
	KeyEnv string // the variable that a refused key's error names
}

// Run runs the suite.
func (s Suite) Run(t *testing.T) {
	t.Run("Text", s.text)
	t.Run("ToolCall", s.toolCall)
	t.Run("ToolResults", s.toolResults)
	t.Run("StopAndToolChoice", s.stopAndToolChoice)
	t.Run("Errors", s.errors)
	t.Run("CannotReach", s.cannotReach)
	t.Run("Cancel", s.cancel)
}

func (s Suite) provider(t *testing.T, srv *Server) llm.Provider {
	t.Helper()
	p, err := s.New(srv.URL, srv.Key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// modes runs f without streaming and with, giving it the onText to pass and the deltas seen.
func modes(t *testing.T, f func(t *testing.T, onText func(string), deltas *[]string)) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			var deltas []string
			var onText func(string)
			if stream {
				onText = func(d string) { deltas = append(deltas, d) }
			}
			f(t, onText, &deltas)
		})
	}
}

func hi(model string) llm.Request {
	return llm.Request{Model: model, Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}
}

func (s Suite) text(t *testing.T) {
	modes(t, func(t *testing.T, onText func(string), deltas *[]string) {
		const answer = "The mean is 4.5 — computed over all 10 rows of data.csv."
		srv := s.NewServer(t, Replies(Text(answer)))
		resp, err := s.provider(t, srv).Complete(context.Background(), llm.Request{
			Model: "model-1", System: "Be brief.", MaxTokens: 100,
			Messages: []llm.Message{{Role: llm.RoleUser, Text: "What is the mean?"}},
		}, onText)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Message.Role != llm.RoleAssistant || resp.Message.Text != answer || resp.StopReason != llm.StopEnd || len(resp.Message.ToolCalls) != 0 {
			t.Errorf("response = %+v", resp)
		}
		if resp.Usage.InputTokens == 0 || resp.Usage.OutputTokens == 0 {
			t.Errorf("usage = %+v, want both counted", resp.Usage)
		}
		stream := onText != nil
		if stream && (len(*deltas) < 2 || strings.Join(*deltas, "") != answer) {
			t.Errorf("deltas = %q, want several that make up the answer", *deltas)
		}
		r := srv.Requests()[0]
		if r.Model != "model-1" || r.System != "Be brief." || r.MaxTokens != 100 || r.Stream != stream || len(r.Tools) != 0 || r.ToolChoice != "" {
			t.Errorf("request = %+v", r)
		}
		if len(r.Messages) != 1 || r.Messages[0].Role != llm.RoleUser || r.Messages[0].Text != "What is the mean?" {
			t.Errorf("messages = %+v", r.Messages)
		}
	})
}

func (s Suite) toolCall(t *testing.T) {
	modes(t, func(t *testing.T, onText func(string), _ *[]string) {
		args := `{"code": "import pandas as pd\nprint(\"héllo, wörld\", [1, 2, 3])"}`
		srv := s.NewServer(t, Replies(Reply{Text: "Let me look.", ToolCalls: []llm.ToolCall{
			{Name: tool.Python, Input: json.RawMessage(args)},
			{Name: tool.Shell, Input: json.RawMessage(`{"command": "ls -la"}`)},
		}}))
		req := hi("model-1")
		req.Tools = tool.Definitions(tool.Options{})
		resp, err := s.provider(t, srv).Complete(context.Background(), req, onText)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StopReason != llm.StopToolUse || resp.Message.Text != "Let me look." || len(resp.Message.ToolCalls) != 2 {
			t.Fatalf("response = %+v", resp)
		}
		a, b := resp.Message.ToolCalls[0], resp.Message.ToolCalls[1]
		if a.ID == "" || a.ID == b.ID || a.Name != tool.Python || !sameJSON(a.Input, args) || b.Name != tool.Shell || !sameJSON(b.Input, `{"command":"ls -la"}`) {
			t.Errorf("calls = %s %s %s, %s %s %s", a.ID, a.Name, a.Input, b.ID, b.Name, b.Input)
		}
		if call, err := tool.Decode(a.Name, a.Input); err != nil || !strings.Contains(call.Code, "wörld") {
			t.Errorf("decode = %+v, %v", call, err)
		}
		r := srv.Requests()[0]
		if len(r.Tools) != 2 || r.Tools[0].Name != tool.Python || r.Tools[0].Description == "" || !reflect.DeepEqual(r.Tools[0].InputSchema["required"], []any{"code"}) {
			t.Errorf("tools = %+v", r.Tools)
		}
	})
}

func sameJSON(a json.RawMessage, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

// testPNG is a small real PNG.
func testPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 3, 2))
	img.Set(1, 1, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func (s Suite) toolResults(t *testing.T) {
	modes(t, func(t *testing.T, onText func(string), _ *[]string) {
		pic := testPNG(t)
		srv := s.NewServer(t, Replies(Text("The plot shows a red dot.")))
		resp, err := s.provider(t, srv).Complete(context.Background(), llm.Request{
			Model: "model-1",
			Tools: tool.Definitions(tool.Options{}),
			Messages: []llm.Message{
				{Role: llm.RoleUser, Text: "Plot it."},
				{Role: llm.RoleAssistant, Text: "Plotting.", ToolCalls: []llm.ToolCall{
					{ID: "call_a", Name: tool.Python, Input: json.RawMessage(`{"code":"plt.show()"}`)},
					{ID: "call_b", Name: tool.Shell, Input: json.RawMessage(`{"command":"false"}`)},
				}},
				{Role: llm.RoleUser, Text: "Also, be brief.", ToolResults: []llm.ToolResult{
					{CallID: "call_a", Name: tool.Python, Text: "[image 1: image/png, attached]",
						Images: []tool.Image{{MIME: "image/png", Data: base64.StdEncoding.EncodeToString(pic)}}},
					{CallID: "call_b", Name: tool.Shell, Text: "exit code 1", IsError: true},
				}},
			},
		}, onText)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Message.Text != "The plot shows a red dot." {
			t.Errorf("text = %q", resp.Message.Text)
		}
		msgs := srv.Requests()[0].Messages
		if len(msgs) != 3 {
			t.Fatalf("messages = %+v", msgs)
		}
		if a := msgs[1]; a.Role != llm.RoleAssistant || a.Text != "Plotting." || len(a.ToolCalls) != 2 ||
			a.ToolCalls[0].ID != "call_a" || !sameJSON(a.ToolCalls[0].Input, `{"code":"plt.show()"}`) {
			t.Errorf("assistant = %+v", a)
		}
		u := msgs[2]
		if u.Role != llm.RoleUser || u.Text != "Also, be brief." || len(u.ToolResults) != 2 {
			t.Fatalf("results message = %+v", u)
		}
		a, b := u.ToolResults[0], u.ToolResults[1]
		if a.CallID != "call_a" || a.Name != tool.Python || a.Text != "[image 1: image/png, attached]" || a.IsError || len(a.Images) != 1 {
			t.Fatalf("result a = %+v", a)
		}
		if got, _ := base64.StdEncoding.DecodeString(a.Images[0].Data); a.Images[0].MIME != "image/png" || !bytes.Equal(got, pic) {
			t.Errorf("image = %s of %d bytes, want the PNG's %d", a.Images[0].MIME, len(got), len(pic))
		}
		// Anthropic flags a failed call; OpenAI's tool messages have no flag, so the text says it.
		failed := b.IsError && b.Text == "exit code 1" || !b.IsError && b.Text == "Error: exit code 1"
		if b.CallID != "call_b" || !failed || len(b.Images) != 0 {
			t.Errorf("result b = %+v, want it marked as failed", b)
		}
	})
}

func (s Suite) stopAndToolChoice(t *testing.T) {
	modes(t, func(t *testing.T, onText func(string), _ *[]string) {
		srv := s.NewServer(t, Replies(Reply{Text: "cut", StopReason: llm.StopMaxTokens}))
		req := hi("model-1")
		req.Tools, req.NoToolCalls = tool.Definitions(tool.Options{}), true
		resp, err := s.provider(t, srv).Complete(context.Background(), req, onText)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StopReason != llm.StopMaxTokens {
			t.Errorf("stop = %q, want max_tokens", resp.StopReason)
		}
		if r := srv.Requests()[0]; r.ToolChoice != "none" || len(r.Tools) != 2 {
			t.Errorf("tool_choice = %q with %d tools, want none with the 2 tools", r.ToolChoice, len(r.Tools))
		}
	})
}

func (s Suite) errors(t *testing.T) {
	tests := []struct {
		name     string
		reply    Reply
		key      string // "" takes the server's
		code     string
		say      []string
		attempts int // one retry at most
	}{
		{"wrong key", Text("unused"), "sk-wrong-key-1234", api.CodeUnavailable, []string{"401", s.KeyEnv}, 1},
		{"bad request", Fail(400, "prompt is too long: 250000 tokens > 200000 maximum"), "", api.CodeInvalidArgument, []string{"400", "prompt is too long"}, 1},
		{"server error", Fail(500, "The server had an error processing your request."), "", api.CodeUnavailable, []string{"500", "The server had an error"}, 2},
		{"rate limit", Fail(429, "Rate limit reached for model-1."), "", api.CodeResourceExhausted, []string{"429", "Rate limit reached"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modes(t, func(t *testing.T, onText func(string), _ *[]string) {
				srv := s.NewServer(t, func(Request) Reply { return tt.reply })
				key := tt.key
				if key == "" {
					key = srv.Key
				}
				p, err := s.New(srv.URL, key)
				if err != nil {
					t.Fatal(err)
				}
				_, err = p.Complete(context.Background(), hi("model-1"), onText)
				if err == nil {
					t.Fatal("no error")
				}
				t.Log(err)
				for _, want := range tt.say {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				if strings.Contains(err.Error(), key) {
					t.Errorf("error %q shows the API key", err)
				}
				if got := errdefs.Code(err); got != tt.code {
					t.Errorf("code = %s, want %s", got, tt.code)
				}
				if n := len(srv.Requests()); n != tt.attempts {
					t.Errorf("%d requests, want %d", n, tt.attempts)
				}
			})
		})
	}
}

func (s Suite) cannotReach(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	base := ts.URL
	ts.Close()
	p, err := s.New(base, "sk-some-key")
	if err != nil {
		t.Fatal(err)
	}
	modes(t, func(t *testing.T, onText func(string), _ *[]string) {
		_, err := p.Complete(context.Background(), hi("model-1"), onText)
		if err == nil || !strings.Contains(err.Error(), "cannot reach "+base) || errdefs.Code(err) != api.CodeUnavailable {
			t.Errorf("error = %v, want cannot reach %s (unavailable)", err, base)
		}
	})
}

func (s Suite) cancel(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		modes(t, func(t *testing.T, onText func(string), _ *[]string) {
			arrived, release := make(chan struct{}), make(chan struct{})
			defer close(release)
			srv := s.NewServer(t, func(Request) Reply {
				close(arrived)
				<-release
				return Text("too late")
			})
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-arrived; cancel() }()
			_, err := s.provider(t, srv).Complete(ctx, hi("model-1"), onText)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error = %v, want context.Canceled", err)
			}
		})
	})
	t.Run("streaming", func(t *testing.T) {
		srv := s.NewServer(t, Replies(Text(strings.Repeat("many words ", 50))))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err := s.provider(t, srv).Complete(ctx, hi("model-1"), func(string) { cancel() })
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error = %v, want context.Canceled", err)
		}
	})
}

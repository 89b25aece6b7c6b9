package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/llm/openai"
	"github.com/cellbox/cellbox/internal/tool"
)

func newResponses(baseURL, key string) (llm.Provider, error) {
	return openai.NewResponses(openai.Options{APIKey: key, BaseURL: baseURL, MaxRetries: 1})
}

func TestResponsesConformance(t *testing.T) {
	llmtest.Suite{NewServer: llmtest.NewResponses, New: newResponses, KeyEnv: "OPENAI_API_KEY"}.Run(t)
}

// onText is nil without streaming, else a function that ignores the text.
func onText(stream bool) func(string) {
	if stream {
		return func(string) {}
	}
	return nil
}

func TestResponsesWire(t *testing.T) {
	// What the suite cannot see in the decoded request: the items' own shape.
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			s := llmtest.NewResponses(t, llmtest.Replies(llmtest.Text("ok")))
			p, err := openai.NewResponses(openai.Options{APIKey: s.Key, BaseURL: s.URL})
			if err != nil {
				t.Fatal(err)
			}
			req := llm.Request{Model: "gpt-test", Tools: tool.Definitions(tool.Options{}), MaxTokens: 64, Messages: []llm.Message{
				{Role: llm.RoleUser, Text: "Plot it."},
				{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_a", Name: tool.Python, Input: json.RawMessage(`{"code":"1"}`)}}},
				{Role: llm.RoleUser, ToolResults: []llm.ToolResult{{CallID: "call_a", Name: tool.Python, Text: "1",
					Images: []tool.Image{{MIME: "image/png", Data: "iVBORw0KGgo="}}}}},
			}}
			if _, err := p.Complete(context.Background(), req, onText(stream)); err != nil {
				t.Fatal(err)
			}
			var body struct {
				Store           *bool `json:"store"`
				MaxOutputTokens int   `json:"max_output_tokens"`
				Input           []map[string]any
				Tools           []map[string]any
			}
			if err := json.Unmarshal(s.Requests()[0].Body, &body); err != nil {
				t.Fatal(err)
			}
			if body.Store == nil || *body.Store || body.MaxOutputTokens != 64 {
				t.Errorf("store = %v, max_output_tokens = %d; want false and 64", body.Store, body.MaxOutputTokens)
			}
			if len(body.Tools) != 2 || body.Tools[0]["type"] != "function" || body.Tools[0]["strict"] != false {
				t.Errorf("tools = %v, want function tools with strict false", body.Tools)
			}
			var types []string
			for _, it := range body.Input {
				typ, _ := it["type"].(string)
				if typ == "" {
					typ = "message"
				}
				types = append(types, typ)
			}
			// The image travels inside the output, as input_text and input_image parts.
			if got := strings.Join(types, " "); got != "message function_call function_call_output" {
				t.Errorf("input items = %s", got)
			}
			out, _ := body.Input[2]["output"].([]any)
			if len(out) != 2 || out[0].(map[string]any)["type"] != "input_text" || out[1].(map[string]any)["type"] != "input_image" {
				t.Errorf("output = %v, want input_text then input_image", body.Input[2]["output"])
			}
		})
	}
}

// sseServer answers every request with these events, as the Responses API writes them.
func sseServer(t *testing.T, events ...string) *httptest.Server {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, e := range events {
			var v map[string]any
			if err := json.Unmarshal([]byte(e), &v); err != nil {
				t.Errorf("event %s: %v", e, err)
			}
			v["sequence_number"] = i
			data, _ := json.Marshal(v)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", v["type"], data)
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

const (
	created = `{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}}`
	delta   = `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel"}`
)

func TestResponsesStreamFailures(t *testing.T) {
	tests := []struct {
		name   string
		events []string
		code   string
		say    string
	}{
		{"failed", []string{created, delta, `{"type":"response.failed","response":{"id":"resp_1","object":"response","status":"failed","output":[],"error":{"code":"server_error","message":"The model had an error."}}}`},
			api.CodeUnavailable, "the model failed to answer: The model had an error (server_error)"},
		{"rate limited", []string{created, `{"type":"response.failed","response":{"id":"resp_1","object":"response","status":"failed","output":[],"error":{"code":"rate_limit_exceeded","message":"Slow down."}}}`},
			api.CodeResourceExhausted, "Slow down"},
		{"error event", []string{created, delta, `{"type":"error","code":"invalid_prompt","message":"Your prompt was flagged.","param":null}`},
			api.CodeInvalidArgument, "Your prompt was flagged (invalid_prompt)"},
		{"cut short", []string{created, delta}, api.CodeUnavailable, "the stream ended before the answer was complete"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := sseServer(t, tt.events...)
			p, err := openai.NewResponses(openai.Options{APIKey: "sk-x", BaseURL: ts.URL + "/v1", MaxRetries: -1})
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			_, err = p.Complete(context.Background(), hi("gpt-test"), func(d string) { text.WriteString(d) })
			if err == nil || errdefs.Code(err) != tt.code || !strings.Contains(err.Error(), tt.say) || !strings.HasPrefix(err.Error(), "openai-responses: ") {
				t.Errorf("error = %v (%s), want %s saying %q", err, errdefs.Code(err), tt.code, tt.say)
			}
		})
	}
}

func TestResponsesReasoningDropped(t *testing.T) {
	// A reasoning model's answer has reasoning items before its call. They are not kept, so
	// the next request sends the call and its output only; with store false a reasoning
	// item without its encrypted content would be refused.
	output := `[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":null},
		{"type":"function_call","id":"fc_1","call_id":"call_1","name":"python","arguments":"{\"code\":\"2**10\"}","status":"completed"}]`
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			resp := `{"id":"resp_1","object":"response","status":"completed","output":` + output + `,"usage":{"input_tokens":5,"output_tokens":7,"total_tokens":12}}`
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !stream {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, resp)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":0,\"response\":%s}\n\n", strings.ReplaceAll(resp, "\n", ""))
			}))
			defer ts.Close()
			p, err := openai.NewResponses(openai.Options{APIKey: "sk-x", BaseURL: ts.URL + "/v1"})
			if err != nil {
				t.Fatal(err)
			}
			req := hi("o-test")
			req.Tools = tool.Definitions(tool.Options{})
			got, err := p.Complete(context.Background(), req, onText(stream))
			if err != nil {
				t.Fatal(err)
			}
			if got.StopReason != llm.StopToolUse || got.Message.Text != "" || len(got.Message.ToolCalls) != 1 ||
				got.Message.ToolCalls[0].ID != "call_1" || got.Usage != (llm.Usage{InputTokens: 5, OutputTokens: 7}) {
				t.Fatalf("response = %+v", got)
			}

			// The history goes on to the stand-in, which refuses what the real API refuses.
			s := llmtest.NewResponses(t, llmtest.Replies(llmtest.Text("1024")))
			p2, err := openai.NewResponses(openai.Options{APIKey: s.Key, BaseURL: s.URL})
			if err != nil {
				t.Fatal(err)
			}
			req.Messages = append(req.Messages, got.Message, llm.Message{Role: llm.RoleUser,
				ToolResults: []llm.ToolResult{{CallID: "call_1", Name: tool.Python, Text: "1024"}}})
			final, err := p2.Complete(context.Background(), req, onText(stream))
			if err != nil {
				t.Fatal(err)
			}
			if final.Message.Text != "1024" || strings.Contains(string(s.Requests()[0].Body), "reasoning") {
				t.Errorf("answer %q; request %s", final.Message.Text, s.Requests()[0].Body)
			}
		})
	}
}

func TestResponsesNew(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	if _, err := openai.NewResponses(openai.Options{}); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") || !strings.HasPrefix(err.Error(), "openai-responses: ") {
		t.Errorf("NewResponses without a key for api.openai.com: %v, want an error naming OPENAI_API_KEY", err)
	}
	// A server that does not speak the Responses API answers 404, here without a word.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	defer ts.Close()
	p, err := openai.NewResponses(openai.Options{BaseURL: ts.URL + "/v1", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "openai-responses" {
		t.Errorf("name = %q", p.Name())
	}
	_, err = p.Complete(context.Background(), hi("llama3"), nil)
	if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "Responses API") {
		t.Errorf("error = %v, want the 404 and a word on the Responses API", err)
	}
	if _, err := p.Complete(context.Background(), hi(""), nil); errdefs.Code(err) != api.CodeInvalidArgument {
		t.Errorf("no model: %v", err)
	}
}

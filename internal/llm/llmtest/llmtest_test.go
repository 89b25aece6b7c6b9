package llmtest_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
)

// The providers' tests run the servers' happy paths; these check that the servers refuse
// what the real APIs refuse, in their error shapes.

func post(t *testing.T, s *llmtest.Server, path, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

const png1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

func TestOpenAIRefuses(t *testing.T) {
	call := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"python","arguments":"{}"}}]}`
	tests := []struct{ name, body, want string }{
		{"no model", `{"messages":[{"role":"user","content":"hi"}]}`, "model"},
		{"no messages", `{"model":"m","messages":[]}`, "too short"},
		{"unanswered call", `{"model":"m","messages":[{"role":"user","content":"hi"},` + call + `,{"role":"user","content":"next"}]}`, "c1"},
		{"unanswered last call", `{"model":"m","messages":[{"role":"user","content":"hi"},` + call + `]}`, "c1"},
		{"stray tool message", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c9","content":"x"}]}`, "role 'tool'"},
		{"arguments not a string", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"python","arguments":{}}}]}]}`, "parse"},
		{"image without note", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png1x1 + `"}}]}]}`, "images only after tool messages"},
		{"bad image", `{"model":"m","messages":[{"role":"user","content":"hi"},` + call + `,{"role":"tool","tool_call_id":"c1","content":"x"},{"role":"user","content":[{"type":"text","text":"Images from tool call c1 (python):"},{"type":"image_url","image_url":{"url":"data:image/png;base64,%%%"}}]}]}`, "base64"},
		{"stream options without stream", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, "stream_options"},
		{"tool choice without tools", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"none"}`, "tool_choice"},
		{"schema not an object", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"string"}}}]}`, "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := llmtest.NewOpenAI(t, llmtest.Replies(llmtest.Text("unused")))
			status, body := post(t, s, "/chat/completions", tt.body, map[string]string{"Authorization": "Bearer " + s.Key})
			var e struct {
				Error struct{ Message, Type string }
			}
			if status != 400 || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error.Message, tt.want) || e.Error.Type == "" {
				t.Errorf("got %d %s, want 400 with an error message about %q", status, body, tt.want)
			}
			if r := s.Requests(); len(r) != 1 || r[0].Refused == "" {
				t.Errorf("requests = %+v, want one refused", r)
			}
		})
	}
}

func TestAnthropicRefuses(t *testing.T) {
	use := `{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"python","input":{}}]}`
	tests := []struct{ name, body, want string }{
		{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		{"system role", `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"hi"}]}`, "top-level `system`"},
		{"empty text block", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, "non-empty"},
		{"empty message", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[]},{"role":"assistant","content":"a"}]}`, "non-empty content"},
		{"result without use", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9","content":"x"}]}]}`, "t9"},
		{"use without result", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},` + use + `,{"role":"user","content":"next"}]}`, "t1"},
		{"text before result", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},` + use + `,{"role":"user","content":[{"type":"text","text":"a"},{"type":"tool_result","tool_use_id":"t1"}]}]}`, "before any other content"},
		{"bad media type", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},` + use + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{"type":"base64","media_type":"image/svg+xml","data":"` + png1x1 + `"}}]}]}]}`, "media type"},
		{"schema not an object", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"string"}}]}`, "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := llmtest.NewAnthropic(t, llmtest.Replies(llmtest.Text("unused")))
			status, body := post(t, s, "/v1/messages", tt.body, map[string]string{"X-Api-Key": s.Key, "Anthropic-Version": "2023-06-01"})
			var e struct {
				Type  string
				Error struct{ Message, Type string }
			}
			if status != 400 || json.Unmarshal([]byte(body), &e) != nil || e.Type != "error" || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tt.want) {
				t.Errorf("got %d %s, want 400 invalid_request_error about %q", status, body, tt.want)
			}
		})
	}
	t.Run("no version header", func(t *testing.T) {
		s := llmtest.NewAnthropic(t, llmtest.Replies(llmtest.Text("unused")))
		status, body := post(t, s, "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, map[string]string{"X-Api-Key": s.Key})
		if status != 400 || !strings.Contains(body, "anthropic-version") {
			t.Errorf("got %d %s", status, body)
		}
	})
}

func TestKeyAndRoute(t *testing.T) {
	s := llmtest.NewAnthropic(t, llmtest.Replies(llmtest.Text("unused")))
	if status, body := post(t, s, "/v1/messages", `{}`, map[string]string{"X-Api-Key": "wrong", "Anthropic-Version": "2023-06-01"}); status != 401 || !strings.Contains(body, "authentication_error") {
		t.Errorf("wrong key: %d %s", status, body)
	}
	if status, _ := post(t, s, "/v1/complete", `{}`, nil); status != 404 {
		t.Errorf("unknown route: %d", status)
	}
}

func TestRepliesAndStream(t *testing.T) {
	s := llmtest.NewOpenAI(t, llmtest.Replies(llmtest.CallTool("python", `{"code":"1+1"}`)))
	auth := map[string]string{"Authorization": "Bearer " + s.Key}
	status, body := post(t, s, "/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, auth)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	// A stream of data lines ending in [DONE], the arguments in pieces.
	var args strings.Builder
	var last string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		last = data
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct{ Function struct{ Arguments string } } `json:"tool_calls"`
				}
			}
		}
		if data != "[DONE]" && json.Unmarshal([]byte(data), &c) == nil && len(c.Choices) > 0 {
			for _, tc := range c.Choices[0].Delta.ToolCalls {
				args.WriteString(tc.Function.Arguments)
			}
		}
	}
	if last != "[DONE]" || args.String() != `{"code":"1+1"}` {
		t.Errorf("stream ended with %q, arguments %q", last, args.String())
	}
	// The script has one reply; the second request hears so.
	if status, body := post(t, s, "/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, auth); status != 400 || !strings.Contains(body, "no reply for request 2") {
		t.Errorf("past the script: %d %s", status, body)
	}
}

func TestResponsesRefuses(t *testing.T) {
	call := `{"type":"function_call","call_id":"c1","name":"python","arguments":"{}"}`
	tests := []struct{ name, body, want string }{
		{"no model", `{"input":"hi"}`, "'model'"},
		{"no input", `{"model":"m"}`, "'input'"},
		{"unanswered call", `{"model":"m","input":[{"role":"user","content":"hi"},` + call + `,{"role":"user","content":"next"}]}`, "No tool output found for function call c1"},
		{"unanswered last call", `{"model":"m","input":[{"role":"user","content":"hi"},` + call + `]}`, "c1"},
		{"stray output", `{"model":"m","input":[{"role":"user","content":"hi"},{"type":"function_call_output","call_id":"c9","output":"x"}]}`, "c9"},
		{"call without name", `{"model":"m","input":[{"type":"function_call","call_id":"c1","arguments":"{}"}]}`, "call_id, name and arguments"},
		{"arguments not a string", `{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"f","arguments":{}}]}`, "arguments"},
		{"reasoning not stored", `{"model":"m","store":false,"input":[{"type":"reasoning","id":"rs_1","summary":[]}]}`, "not persisted"},
		{"previous response", `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, "resp_1"},
		{"store not a boolean", `{"model":"m","input":"hi","store":"no"}`, "parse"},
		{"stream not a boolean", `{"model":"m","input":"hi","stream":1}`, "parse"},
		{"tool choice without tools", `{"model":"m","input":"hi","tool_choice":"none"}`, "tool_choice"},
		{"bad tool name", `{"model":"m","input":"hi","tools":[{"type":"function","name":"a b","strict":false,"parameters":{"type":"object"}}]}`, "tools[0].name"},
		{"schema not an object", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","strict":false,"parameters":{"type":"string"}}]}`, "object"},
		{"input_text in assistant", `{"model":"m","input":[{"role":"assistant","content":[{"type":"input_text","text":"a"}]}]}`, "output_text"},
		{"bad image", `{"model":"m","input":[{"role":"user","content":"hi"},` + call + `,{"type":"function_call_output","call_id":"c1","output":[{"type":"input_image","image_url":"data:image/png;base64,%%%"}]}]}`, "base64"},
		{"bad role", `{"model":"m","input":[{"role":"tool","content":"x"}]}`, "'tool'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := llmtest.NewResponses(t, llmtest.Replies(llmtest.Text("unused")))
			status, body := post(t, s, "/responses", tt.body, map[string]string{"Authorization": "Bearer " + s.Key})
			var e struct {
				Error struct{ Message, Type string }
			}
			if status != 400 || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error.Message, tt.want) || e.Error.Type != "invalid_request_error" {
				t.Errorf("got %d %s, want 400 with an error message about %q", status, body, tt.want)
			}
			if r := s.Requests(); len(r) != 1 || r[0].Refused == "" {
				t.Errorf("requests = %+v, want one refused", r)
			}
		})
	}
}

func TestResponsesDecodes(t *testing.T) {
	s := llmtest.NewResponses(t, llmtest.Replies(llmtest.Text("a"), llmtest.Text("b")))
	auth := map[string]string{"Authorization": "Bearer " + s.Key}
	body := `{"model":"m","instructions":"Be brief.","max_output_tokens":50,"tool_choice":"auto",
		"tools":[{"type":"function","name":"python","strict":false,"parameters":{"type":"object"}}],
		"input":[{"role":"developer","content":"Use python."},{"role":"user","content":[{"type":"input_text","text":"Plot."}]},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Plotting."}]},
		{"type":"function_call","call_id":"c1","name":"python","arguments":"{\"code\":\"1\"}"},
		{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"done"},{"type":"input_image","image_url":"data:image/png;base64,` + png1x1 + `"}]},
		{"role":"user","content":"Thanks."}]}`
	if status, b := post(t, s, "/responses", body, auth); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	r := s.Requests()[0]
	if r.System != "Be brief.\n\nUse python." || r.MaxTokens != 50 || r.ToolChoice != "auto" || len(r.Tools) != 1 || len(r.Messages) != 3 {
		t.Fatalf("request = %+v", r)
	}
	a, u := r.Messages[1], r.Messages[2]
	if a.Text != "Plotting." || len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != "c1" {
		t.Errorf("assistant = %+v", a)
	}
	if u.Text != "Thanks." || len(u.ToolResults) != 1 || u.ToolResults[0].Name != "python" || u.ToolResults[0].Text != "done" || len(u.ToolResults[0].Images) != 1 {
		t.Errorf("results = %+v", u)
	}
	// A string input is one user message.
	if status, b := post(t, s, "/responses", `{"model":"m","input":"hi"}`, auth); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	if m := s.Requests()[1].Messages; len(m) != 1 || m[0].Text != "hi" {
		t.Errorf("messages = %+v", m)
	}
}

func TestResponsesStream(t *testing.T) {
	s := llmtest.NewResponses(t, llmtest.Replies(llmtest.Reply{Text: "Let me run it.", ToolCalls: []llm.ToolCall{{Name: "python", Input: json.RawMessage(`{"code":"1+1"}`)}}}))
	status, body := post(t, s, "/responses", `{"model":"m","stream":true,"input":"hi","tools":[{"type":"function","name":"python","strict":false,"parameters":{"type":"object"}}]}`,
		map[string]string{"Authorization": "Bearer " + s.Key})
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	// Each event is named by an event: line that repeats its type, numbered from 0.
	var types []string
	var text, args strings.Builder
	name := ""
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			name = n
			continue
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e struct {
			Type           string
			SequenceNumber *int `json:"sequence_number"`
			Delta          string
			Response       struct{ Status string }
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil || e.Type != name || e.SequenceNumber == nil || *e.SequenceNumber != len(types) {
			t.Fatalf("event %q: %s (%v)", name, data, err)
		}
		types = append(types, e.Type)
		switch e.Type {
		case "response.output_text.delta":
			text.WriteString(e.Delta)
		case "response.function_call_arguments.delta":
			args.WriteString(e.Delta)
		case "response.completed":
			if e.Response.Status != "completed" {
				t.Errorf("completed with status %q", e.Response.Status)
			}
		}
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta"}
	if len(types) < len(want) || strings.Join(types[:len(want)], " ") != strings.Join(want, " ") || types[len(types)-1] != "response.completed" {
		t.Errorf("events = %v", types)
	}
	if text.String() != "Let me run it." || args.String() != `{"code":"1+1"}` {
		t.Errorf("text %q, arguments %q", text.String(), args.String())
	}
}

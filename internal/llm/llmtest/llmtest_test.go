package llmtest_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

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

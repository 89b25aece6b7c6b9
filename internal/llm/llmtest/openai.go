package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/tool"
)

// openaiAPI is the Chat Completions side of a server.
type openaiAPI struct{}

// imageNote starts the text part that the openai provider puts before a tool result's
// images in the user message after the tool messages (tool messages take text only):
// "Images from tool call <id> (<tool>):". The server gives those images to that result.
const imageNote = "Images from tool call "

type oaRequest struct {
	Model               string          `json:"model"`
	Messages            []oaMessage     `json:"messages"`
	Tools               []oaTool        `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
	MaxTokens           int             `json:"max_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type oaMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []oaToolCall    `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type oaToolCall struct {
	Index    *int   `json:"index,omitempty"` // in stream deltas only
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

type oaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	} `json:"function"`
}

func (openaiAPI) path() string { return "/v1/chat/completions" }

func (openaiAPI) key(h http.Header) string {
	return strings.TrimPrefix(h.Get("Authorization"), "Bearer ")
}

func (openaiAPI) header(h http.Header) string {
	if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		return "llmtest: the request's Content-Type is not application/json"
	}
	return ""
}

func (openaiAPI) decode(body []byte) (Request, error) {
	var in oaRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return Request{}, fmt.Errorf("We could not parse the JSON body of your request: %v", err)
	}
	out := Request{Model: in.Model, Stream: in.Stream, MaxTokens: in.MaxCompletionTokens}
	if out.MaxTokens == 0 {
		out.MaxTokens = in.MaxTokens
	}
	switch {
	case in.Model == "":
		return out, fmt.Errorf("you must provide a model parameter")
	case len(in.Messages) == 0:
		return out, fmt.Errorf("[] is too short - 'messages'")
	case in.StreamOptions != nil && !in.Stream:
		return out, fmt.Errorf("The 'stream_options' parameter is only allowed when 'stream' is enabled.")
	case len(in.ToolChoice) > 0 && len(in.Tools) == 0:
		return out, fmt.Errorf("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.")
	}
	if len(in.ToolChoice) > 0 {
		var s string
		if json.Unmarshal(in.ToolChoice, &s) == nil {
			out.ToolChoice = s
		} else {
			out.ToolChoice = string(in.ToolChoice)
		}
	}
	for i, t := range in.Tools {
		if t.Type != "function" || !validName(t.Function.Name) {
			return out, fmt.Errorf("tools[%d]: a function tool needs type \"function\" and a name of letters, digits, _ and -", i)
		}
		if p := t.Function.Parameters; p != nil && p["type"] != "object" {
			return out, fmt.Errorf("Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"'", t.Function.Name)
		}
		out.Tools = append(out.Tools, tool.Definition{Name: t.Function.Name, Description: t.Function.Description, InputSchema: t.Function.Parameters})
	}

	var system []string
	pending := map[string]string{} // tool call id → tool name, until a tool message answers it
	var pendingOrder []string
	prev := ""    // the previous message's role
	results := -1 // the index in out.Messages of the message holding the current tool results
	unanswered := func() error {
		var ids []string
		for _, id := range pendingOrder {
			if _, ok := pending[id]; ok {
				ids = append(ids, id)
			}
		}
		return fmt.Errorf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(ids, ", "))
	}
	for i, m := range in.Messages {
		if m.Role != "tool" && len(pending) > 0 {
			return out, unanswered()
		}
		var parts []oaPart
		text, isParts, err := textOrParts(m.Content, &parts)
		if err != nil {
			return out, fmt.Errorf("messages[%d].content: %v", i, err)
		}
		switch m.Role {
		case "system", "developer":
			for _, p := range parts {
				if p.Type != "text" {
					return out, fmt.Errorf("messages[%d]: a %s message takes text parts only", i, m.Role)
				}
				text += p.Text
			}
			system = append(system, text)
		case "assistant":
			for _, p := range parts {
				text += p.Text
			}
			msg := llm.Message{Role: llm.RoleAssistant, Text: text}
			pendingOrder = nil
			for j, c := range m.ToolCalls {
				if c.ID == "" || c.Type != "function" || c.Function.Name == "" {
					return out, fmt.Errorf("messages[%d].tool_calls[%d]: id, type \"function\" and function.name are required", i, j)
				}
				pending[c.ID] = c.Function.Name
				pendingOrder = append(pendingOrder, c.ID)
				msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: c.ID, Name: c.Function.Name, Input: json.RawMessage(c.Function.Arguments)})
			}
			if len(m.ToolCalls) == 0 && (m.Content == nil || string(m.Content) == "null") {
				return out, fmt.Errorf("messages[%d]: an assistant message needs content or tool_calls", i)
			}
			out.Messages = append(out.Messages, msg)
		case "tool":
			name, ok := pending[m.ToolCallID]
			if !ok {
				return out, fmt.Errorf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
			}
			delete(pending, m.ToolCallID)
			for _, p := range parts {
				if p.Type != "text" {
					return out, fmt.Errorf("messages[%d]: a tool message takes text parts only", i)
				}
				text += p.Text
			}
			if prev != "tool" {
				out.Messages = append(out.Messages, llm.Message{Role: llm.RoleUser})
				results = len(out.Messages) - 1
			}
			r := &out.Messages[results]
			r.ToolResults = append(r.ToolResults, llm.ToolResult{CallID: m.ToolCallID, Name: name, Text: text})
		case "user":
			afterTools := prev == "tool"
			var texts []string
			var target *llm.ToolResult
			for _, p := range parts {
				switch p.Type {
				case "text":
					if afterTools && strings.HasPrefix(p.Text, imageNote) {
						target = findResult(out.Messages[results].ToolResults, p.Text)
						if target == nil {
							return out, fmt.Errorf("messages[%d]: %q names no tool call answered just before", i, p.Text)
						}
						continue
					}
					texts = append(texts, p.Text)
				case "image_url":
					if target == nil {
						return out, fmt.Errorf("messages[%d]: llmtest expects images only after tool messages, each after a text part %q", i, imageNote+"<id> (<tool>):")
					}
					img, err := dataURL(p.ImageURL.URL)
					if err != nil {
						return out, fmt.Errorf("messages[%d]: %v", i, err)
					}
					target.Images = append(target.Images, img)
				default:
					return out, fmt.Errorf("messages[%d]: unknown content part type %q", i, p.Type)
				}
			}
			if !isParts {
				texts = []string{text}
			}
			if afterTools {
				out.Messages[results].Text = joinText(texts)
			} else {
				out.Messages = append(out.Messages, llm.Message{Role: llm.RoleUser, Text: joinText(texts)})
			}
		default:
			return out, fmt.Errorf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role)
		}
		prev = m.Role
	}
	if len(pending) > 0 {
		return out, unanswered()
	}
	out.System = joinText(system)
	return out, nil
}

// findResult returns the result whose call an image note names.
func findResult(results []llm.ToolResult, note string) *llm.ToolResult {
	id, _, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(note, imageNote), ":"), " ")
	for i := range results {
		if results[i].CallID == id {
			return &results[i]
		}
	}
	return nil
}

// dataURL decodes data:<mime>;base64,<data>.
func dataURL(u string) (tool.Image, error) {
	rest, ok := strings.CutPrefix(u, "data:")
	mime, data, ok2 := strings.Cut(rest, ";base64,")
	if !ok || !ok2 {
		return tool.Image{}, fmt.Errorf("llmtest takes images as data:<type>;base64,<data> URLs only")
	}
	return decodeImage(mime, data)
}

func (openaiAPI) writeError(w http.ResponseWriter, status int, msg string) {
	typ, code := "invalid_request_error", any(nil)
	switch {
	case status == http.StatusUnauthorized:
		code = "invalid_api_key"
	case status == http.StatusNotFound:
		code = "model_not_found"
	case status == http.StatusTooManyRequests:
		typ, code = "requests", "rate_limit_exceeded"
	case status >= 500:
		typ = "server_error"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

func (openaiAPI) writeReply(w http.ResponseWriter, req Request, rep Reply, n int) {
	finish := map[string]string{llm.StopEnd: "stop", llm.StopToolUse: "tool_calls", llm.StopMaxTokens: "length"}[rep.StopReason]
	calls := make([]oaToolCall, len(rep.ToolCalls))
	for i, c := range rep.ToolCalls {
		calls[i].ID = c.ID
		if c.ID == "" {
			calls[i].ID = fmt.Sprintf("call_llmtest_%d_%d", n, i)
		}
		calls[i].Type = "function"
		calls[i].Function.Name = c.Name
		calls[i].Function.Arguments = string(c.Input)
	}
	usage := map[string]int{
		"prompt_tokens":     rep.Usage.InputTokens,
		"completion_tokens": rep.Usage.OutputTokens,
		"total_tokens":      rep.Usage.InputTokens + rep.Usage.OutputTokens,
	}
	id := fmt.Sprintf("chatcmpl-llmtest-%d", n)
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": nil}
		if rep.Text != "" || len(calls) == 0 {
			msg["content"] = rep.Text
		}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": 1700000000, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
			"usage":   usage,
		})
		return
	}
	var wantUsage struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(req.Body, &wantUsage)
	s := newSSE(w)
	chunk := func(delta map[string]any, finish any) {
		c := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": 1700000000, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
		if wantUsage.StreamOptions.IncludeUsage {
			c["usage"] = nil
		}
		s.event("", c)
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, p := range pieces(rep.Text, 8) {
		chunk(map[string]any{"content": p}, nil)
	}
	for i, c := range calls {
		first := c
		first.Index = &i
		first.Function.Arguments = ""
		chunk(map[string]any{"tool_calls": []oaToolCall{first}}, nil)
		for _, p := range pieces(c.Function.Arguments, 5) {
			var d oaToolCall
			d.Index = &i
			d.Function.Arguments = p
			chunk(map[string]any{"tool_calls": []oaToolCall{d}}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if wantUsage.StreamOptions.IncludeUsage {
		s.event("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": 1700000000, "model": req.Model,
			"choices": []any{}, "usage": usage,
		})
	}
	s.event("", "[DONE]")
}

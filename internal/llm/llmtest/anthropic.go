package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/tool"
)

// anthropicAPI is the Messages side of a server.
type anthropicAPI struct{}

type anRequest struct {
	Model      string          `json:"model"`
	MaxTokens  *int            `json:"max_tokens"`
	Messages   []anMessage     `json:"messages"`
	System     json.RawMessage `json:"system"`
	Tools      []anTool        `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
	Stream     bool            `json:"stream"`
}

type anMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source,omitempty"`
}

type anTool struct {
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
}

func (anthropicAPI) path() string { return "/v1/messages" }

func (anthropicAPI) key(h http.Header) string { return h.Get("X-Api-Key") }

func (anthropicAPI) header(h http.Header) string {
	if h.Get("Anthropic-Version") == "" {
		return "anthropic-version: header is required"
	}
	if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		return "llmtest: the request's Content-Type is not application/json"
	}
	return ""
}

func (anthropicAPI) decode(body []byte) (Request, error) {
	var in anRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return Request{}, fmt.Errorf("invalid JSON body: %v", err)
	}
	out := Request{Model: in.Model, Stream: in.Stream}
	switch {
	case in.Model == "":
		return out, fmt.Errorf("model: Field required")
	case in.MaxTokens == nil:
		return out, fmt.Errorf("max_tokens: Field required")
	case *in.MaxTokens < 1:
		return out, fmt.Errorf("max_tokens: Input should be greater than or equal to 1")
	case len(in.Messages) == 0:
		return out, fmt.Errorf("messages: at least one message is required")
	}
	out.MaxTokens = *in.MaxTokens
	var sysBlocks []anBlock
	sys, isBlocks, err := textOrParts(in.System, &sysBlocks)
	if err != nil {
		return out, fmt.Errorf("system: %v", err)
	}
	if isBlocks {
		var texts []string
		for _, b := range sysBlocks {
			if b.Type != "text" {
				return out, fmt.Errorf("system: only text blocks are allowed")
			}
			texts = append(texts, b.Text)
		}
		sys = joinText(texts)
	}
	out.System = sys
	for i, t := range in.Tools {
		if t.Type != "" && t.Type != "custom" {
			return out, fmt.Errorf("tools.%d: llmtest knows client tools only, not %q", i, t.Type)
		}
		if !validName(t.Name) {
			return out, fmt.Errorf("tools.%d.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", i)
		}
		if t.InputSchema == nil || t.InputSchema["type"] != "object" {
			return out, fmt.Errorf("tools.%d.input_schema.type: Input should be 'object'", i)
		}
		out.Tools = append(out.Tools, tool.Definition{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	if len(in.ToolChoice) > 0 {
		var tc struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(in.ToolChoice, &tc) != nil || tc.Type == "" {
			return out, fmt.Errorf("tool_choice: Input should be an object with a type")
		}
		out.ToolChoice = tc.Type
	}

	uses := map[string]string{} // the previous assistant message's tool_use ids → names
	for i, m := range in.Messages {
		var blocks []anBlock
		text, isBlocks, err := textOrParts(m.Content, &blocks)
		if err != nil {
			return out, fmt.Errorf("messages.%d.content: %v", i, err)
		}
		if !isBlocks {
			if text == "" && !(i == len(in.Messages)-1 && m.Role == "assistant") {
				return out, fmt.Errorf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
			}
			blocks = []anBlock{{Type: "text", Text: text}}
		}
		if len(blocks) == 0 && !(i == len(in.Messages)-1 && m.Role == "assistant") {
			return out, fmt.Errorf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		for j, b := range blocks {
			if b.Type == "text" && b.Text == "" && isBlocks {
				return out, fmt.Errorf("messages.%d.content.%d: text content blocks must be non-empty", i, j)
			}
		}
		switch m.Role {
		case "assistant":
			if len(uses) > 0 {
				return out, unansweredUses(i, uses)
			}
			msg := llm.Message{Role: llm.RoleAssistant}
			var texts []string
			for j, b := range blocks {
				switch b.Type {
				case "text":
					texts = append(texts, b.Text)
				case "tool_use":
					if b.ID == "" || b.Name == "" || len(b.Input) == 0 || b.Input[0] != '{' {
						return out, fmt.Errorf("messages.%d.content.%d.tool_use: id, name and an input object are required", i, j)
					}
					uses[b.ID] = b.Name
					msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: b.ID, Name: b.Name, Input: b.Input})
				default:
					return out, fmt.Errorf("messages.%d.content.%d: llmtest does not expect a %q block from the assistant", i, j, b.Type)
				}
			}
			msg.Text = joinText(texts)
			out.Messages = append(out.Messages, msg)
		case "user":
			msg := llm.Message{Role: llm.RoleUser}
			var texts []string
			for j, b := range blocks {
				switch b.Type {
				case "tool_result":
					if len(texts) > 0 {
						return out, fmt.Errorf("messages.%d.content.%d: tool_result blocks must come before any other content in a user message", i, j)
					}
					name, ok := uses[b.ToolUseID]
					if !ok {
						return out, fmt.Errorf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
					}
					delete(uses, b.ToolUseID)
					r, err := toolResult(b, name)
					if err != nil {
						return out, fmt.Errorf("messages.%d.content.%d.content: %v", i, j, err)
					}
					msg.ToolResults = append(msg.ToolResults, r)
				case "text":
					texts = append(texts, b.Text)
				default:
					return out, fmt.Errorf("messages.%d.content.%d: llmtest does not expect a %q block from the user", i, j, b.Type)
				}
			}
			if len(uses) > 0 {
				return out, unansweredUses(i-1, uses)
			}
			msg.Text = joinText(texts)
			out.Messages = append(out.Messages, msg)
		case "system":
			return out, fmt.Errorf("messages.%d: Unexpected role \"system\". The Messages API accepts a top-level `system` parameter, not \"system\" as an input message role.", i)
		default:
			return out, fmt.Errorf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
	}
	return out, nil
}

func unansweredUses(i int, uses map[string]string) error {
	ids := make([]string, 0, len(uses))
	for id := range uses {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i, strings.Join(ids, ", "))
}

// toolResult decodes a tool_result block.
func toolResult(b anBlock, name string) (llm.ToolResult, error) {
	r := llm.ToolResult{CallID: b.ToolUseID, Name: name, IsError: b.IsError}
	var blocks []anBlock
	text, isBlocks, err := textOrParts(b.Content, &blocks)
	if err != nil {
		return r, err
	}
	var texts []string
	for _, c := range blocks {
		switch c.Type {
		case "text":
			if c.Text == "" {
				return r, fmt.Errorf("text content blocks must be non-empty")
			}
			texts = append(texts, c.Text)
		case "image":
			if c.Source == nil || c.Source.Type != "base64" {
				return r, fmt.Errorf("llmtest takes base64 image sources only")
			}
			img, err := decodeImage(c.Source.MediaType, c.Source.Data)
			if err != nil {
				return r, err
			}
			r.Images = append(r.Images, img)
		default:
			return r, fmt.Errorf("a tool_result takes text and image blocks, not %q", c.Type)
		}
	}
	if isBlocks {
		text = joinText(texts)
	}
	r.Text = text
	return r, nil
}

func (anthropicAPI) writeError(w http.ResponseWriter, status int, msg string) {
	typ := map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error",
	}[status]
	if typ == "" {
		typ = "api_error"
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}, "request_id": "req_llmtest"})
}

func (anthropicAPI) writeReply(w http.ResponseWriter, req Request, rep Reply, n int) {
	stop := map[string]string{llm.StopEnd: "end_turn", llm.StopToolUse: "tool_use", llm.StopMaxTokens: "max_tokens"}[rep.StopReason]
	var content []anBlock
	if rep.Text != "" {
		content = append(content, anBlock{Type: "text", Text: rep.Text})
	}
	for i, c := range rep.ToolCalls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("toolu_llmtest_%d_%d", n, i)
		}
		content = append(content, anBlock{Type: "tool_use", ID: id, Name: c.Name, Input: c.Input})
	}
	msg := map[string]any{
		"id": fmt.Sprintf("msg_llmtest_%d", n), "type": "message", "role": "assistant", "model": req.Model,
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": rep.Usage.InputTokens, "output_tokens": rep.Usage.OutputTokens},
	}
	if !req.Stream {
		if content == nil {
			msg["content"] = []anBlock{}
		}
		writeJSON(w, http.StatusOK, msg)
		return
	}
	s := newSSE(w)
	msg["content"], msg["stop_reason"] = []anBlock{}, nil
	msg["usage"] = map[string]int{"input_tokens": rep.Usage.InputTokens, "output_tokens": 1}
	s.event("message_start", map[string]any{"type": "message_start", "message": msg})
	s.event("ping", map[string]any{"type": "ping"})
	for i, b := range content {
		start := map[string]any{"type": b.Type, "text": ""}
		if b.Type == "tool_use" {
			start = map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}
		}
		s.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start})
		if b.Type == "text" {
			for _, p := range pieces(b.Text, 8) {
				s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": p}})
			}
		} else {
			s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": ""}})
			for _, p := range pieces(string(b.Input), 5) {
				s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
			}
		}
		s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	s.event("message_delta", map[string]any{
		"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": rep.Usage.OutputTokens},
	})
	s.event("message_stop", map[string]any{"type": "message_stop"})
}

package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/tool"
)

// responsesAPI is the Responses side of a server. It keeps nothing: a request that names a
// previous response, or an item by reference, is refused as the real API refuses one whose
// response was not stored.
type responsesAPI struct{}

// NewResponses starts a stand-in for OpenAI's Responses API (POST {URL}/responses).
func NewResponses(t testing.TB, script Script) *Server {
	return start(t, script, responsesAPI{}, "/v1")
}

type rsRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              []rsTool        `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Stream             *bool           `json:"stream"`
	Store              *bool           `json:"store"`
	PreviousResponseID *string         `json:"previous_response_id"`
}

type rsTool struct {
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
	Strict      *bool          `json:"strict"`
}

// rsItem is an input item; which fields count depends on its type.
type rsItem struct {
	Type             string          `json:"type"`
	ID               string          `json:"id"`
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	CallID           string          `json:"call_id"`
	Name             string          `json:"name"`
	Arguments        *string         `json:"arguments"`
	Output           json.RawMessage `json:"output"`
	EncryptedContent string          `json:"encrypted_content"`
}

// rsPart is a content part of a message or of a function call's output.
type rsPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL string `json:"image_url"`
	FileID   string `json:"file_id"`
}

func (responsesAPI) path() string { return "/v1/responses" }

func (responsesAPI) key(h http.Header) string { return openaiAPI{}.key(h) }

func (responsesAPI) header(h http.Header) string { return openaiAPI{}.header(h) }

func (responsesAPI) writeError(w http.ResponseWriter, status int, msg string) {
	openaiAPI{}.writeError(w, status, msg)
}

func (responsesAPI) decode(body []byte) (Request, error) {
	var in rsRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return Request{}, fmt.Errorf("We could not parse the JSON body of your request: %v", err)
	}
	out := Request{Model: in.Model, Stream: in.Stream != nil && *in.Stream}
	if in.MaxOutputTokens != nil {
		out.MaxTokens = *in.MaxOutputTokens
	}
	store := in.Store == nil || *in.Store // the API's default is to store
	switch {
	case in.Model == "":
		return out, fmt.Errorf("Missing required parameter: 'model'.")
	case absent(in.Input):
		return out, fmt.Errorf("Missing required parameter: 'input'.")
	case in.MaxOutputTokens != nil && *in.MaxOutputTokens < 16:
		return out, fmt.Errorf("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got %d instead.", *in.MaxOutputTokens)
	case in.PreviousResponseID != nil:
		return out, fmt.Errorf("Previous response with id '%s' not found.", *in.PreviousResponseID)
	case len(in.ToolChoice) > 0 && len(in.Tools) == 0:
		return out, fmt.Errorf("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.")
	}
	if len(in.ToolChoice) > 0 {
		var s string
		if json.Unmarshal(in.ToolChoice, &s) == nil {
			if s != "none" && s != "auto" && s != "required" {
				return out, fmt.Errorf("Invalid value: '%s'. Supported values are: 'none', 'auto', and 'required'.", s)
			}
			out.ToolChoice = s
		} else {
			out.ToolChoice = string(in.ToolChoice)
		}
	}
	for i, t := range in.Tools {
		if t.Type != "function" {
			return out, fmt.Errorf("tools[%d]: llmtest takes function tools only, not %q", i, t.Type)
		}
		if !validName(t.Name) {
			return out, fmt.Errorf("Invalid 'tools[%d].name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i)
		}
		if t.Strict == nil {
			return out, fmt.Errorf("Missing required parameter: 'tools[%d].strict'.", i)
		}
		if t.Parameters == nil {
			return out, fmt.Errorf("Missing required parameter: 'tools[%d].parameters'.", i)
		}
		if t.Parameters["type"] != "object" {
			return out, fmt.Errorf("Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"'", t.Name)
		}
		out.Tools = append(out.Tools, tool.Definition{Name: t.Name, Description: t.Description, InputSchema: t.Parameters})
	}
	if in.Instructions != nil {
		out.System = *in.Instructions
	}

	var items []rsItem
	var text string
	if in.Input[0] == '"' {
		if err := json.Unmarshal(in.Input, &text); err != nil {
			return out, fmt.Errorf("Invalid 'input': %v", err)
		}
		out.Messages = []llm.Message{{Role: llm.RoleUser, Text: text}}
		return out, nil
	}
	if err := json.Unmarshal(in.Input, &items); err != nil {
		return out, fmt.Errorf("Invalid 'input': expected a string or an array of input items: %v", err)
	}
	msgs, system, err := decodeItems(items, store)
	if err != nil {
		return out, err
	}
	out.Messages = msgs
	out.System = joinText(append([]string{out.System}, system...))
	return out, nil
}

// decodeItems checks input items as the API does and decodes them: each function_call is
// answered by a function_call_output with its call_id before the next message; the outputs
// of a turn, and a user message after them, make one user message.
func decodeItems(items []rsItem, store bool) (msgs []llm.Message, system []string, err error) {
	pending := map[string]string{} // call_id → name, until an output answers it
	var pendingOrder []string
	unanswered := func() error {
		for _, id := range pendingOrder {
			if _, ok := pending[id]; ok {
				return fmt.Errorf("No tool output found for function call %s.", id)
			}
		}
		return nil
	}
	last := "" // the kind of the message that msgs ends with: "assistant", "results" or "user"
	for i, it := range items {
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			if len(pending) > 0 {
				return nil, nil, unanswered()
			}
			var parts []rsPart
			text, isParts, err := textOrParts(it.Content, &parts)
			if err != nil {
				return nil, nil, fmt.Errorf("Invalid 'input[%d].content': %v", i, err)
			}
			if !isParts && absent(it.Content) {
				return nil, nil, fmt.Errorf("Missing required parameter: 'input[%d].content'.", i)
			}
			want := "input_text"
			if it.Role == "assistant" {
				want = "output_text"
			}
			for j, p := range parts {
				switch {
				case p.Type == want:
					text += p.Text
				case p.Type == "refusal" && it.Role == "assistant":
					text += p.Refusal
				case p.Type == "input_image" && it.Role == "user":
					return nil, nil, fmt.Errorf("input[%d].content[%d]: llmtest takes images only in function_call_output items", i, j)
				default:
					return nil, nil, fmt.Errorf("Invalid value: '%s' in input[%d].content[%d]: a %s message takes %s parts.", p.Type, i, j, it.Role, want)
				}
			}
			switch it.Role {
			case "system", "developer":
				system = append(system, text)
			case "assistant":
				msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Text: text})
				last = "assistant"
			case "user":
				if last == "results" {
					m := &msgs[len(msgs)-1]
					m.Text = joinText([]string{m.Text, text})
				} else {
					msgs = append(msgs, llm.Message{Role: llm.RoleUser, Text: text})
				}
				last = "user"
			default:
				return nil, nil, fmt.Errorf("Invalid value: '%s'. Supported values are: 'user', 'assistant', 'system', and 'developer'.", it.Role)
			}
		case "function_call":
			if it.CallID == "" || it.Name == "" || it.Arguments == nil {
				return nil, nil, fmt.Errorf("Missing required parameter: 'input[%d]': a function_call needs call_id, name and arguments.", i)
			}
			if _, dup := pending[it.CallID]; dup {
				return nil, nil, fmt.Errorf("Duplicate item found with call_id '%s'.", it.CallID)
			}
			if last != "assistant" {
				msgs = append(msgs, llm.Message{Role: llm.RoleAssistant})
				last = "assistant"
			}
			m := &msgs[len(msgs)-1]
			m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: it.CallID, Name: it.Name, Input: json.RawMessage(*it.Arguments)})
			pending[it.CallID] = it.Name
			pendingOrder = append(pendingOrder, it.CallID)
		case "function_call_output":
			name, ok := pending[it.CallID]
			if !ok {
				return nil, nil, fmt.Errorf("No tool call found for function call output with call_id %s.", it.CallID)
			}
			delete(pending, it.CallID)
			r, err := decodeOutput(i, it.Output)
			if err != nil {
				return nil, nil, err
			}
			r.CallID, r.Name = it.CallID, name
			if last != "results" {
				msgs = append(msgs, llm.Message{Role: llm.RoleUser})
				last = "results"
			}
			m := &msgs[len(msgs)-1]
			m.ToolResults = append(m.ToolResults, r)
		case "reasoning", "item_reference":
			if !store && it.EncryptedContent == "" {
				return nil, nil, fmt.Errorf("Item with id '%s' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.", it.ID)
			}
			return nil, nil, fmt.Errorf("input[%d]: llmtest keeps no items, so it takes no %s items", i, typ)
		default:
			return nil, nil, fmt.Errorf("input[%d]: llmtest does not take input items of type %q", i, typ)
		}
	}
	if len(pending) > 0 {
		return nil, nil, unanswered()
	}
	return msgs, system, nil
}

// absent says a field is missing or null.
func absent(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// decodeOutput decodes a function_call_output's output: a string, or input_text and
// input_image parts.
func decodeOutput(i int, raw json.RawMessage) (llm.ToolResult, error) {
	var parts []rsPart
	text, isParts, err := textOrParts(raw, &parts)
	if err != nil || !isParts && absent(raw) {
		return llm.ToolResult{}, fmt.Errorf("Invalid 'input[%d].output': expected a string or an array of input_text, input_image and input_file parts.", i)
	}
	var r llm.ToolResult
	var texts []string
	if !isParts {
		texts = []string{text}
	}
	for j, p := range parts {
		switch p.Type {
		case "input_text":
			texts = append(texts, p.Text)
		case "input_image":
			img, err := dataURL(p.ImageURL)
			if err != nil {
				return r, fmt.Errorf("input[%d].output[%d]: %v", i, j, err)
			}
			r.Images = append(r.Images, img)
		default:
			return r, fmt.Errorf("input[%d].output[%d]: llmtest takes input_text and input_image parts, not %q", i, j, p.Type)
		}
	}
	r.Text = strings.Join(texts, "")
	return r, nil
}

// rsOutput is an output item of a response.
type rsOutput struct {
	Type      string   `json:"type"`
	ID        string   `json:"id"`
	Status    string   `json:"status"`
	Role      string   `json:"role,omitempty"`
	Content   []rsText `json:"content,omitempty"`
	CallID    string   `json:"call_id,omitempty"`
	Name      string   `json:"name,omitempty"`
	Arguments *string  `json:"arguments,omitempty"`
}

type rsText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

func (responsesAPI) writeReply(w http.ResponseWriter, req Request, rep Reply, n int) {
	status, incomplete := "completed", any(nil)
	if rep.StopReason == llm.StopMaxTokens {
		status, incomplete = "incomplete", map[string]string{"reason": "max_output_tokens"}
	}
	// The items as they end; the stream sends each first as it begins.
	var items []rsOutput
	if rep.Text != "" || len(rep.ToolCalls) == 0 {
		items = append(items, rsOutput{Type: "message", ID: fmt.Sprintf("msg_llmtest_%d", n), Status: status, Role: "assistant",
			Content: []rsText{{Type: "output_text", Text: rep.Text, Annotations: []any{}, Logprobs: []any{}}}})
	}
	for i, c := range rep.ToolCalls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_llmtest_%d_%d", n, i)
		}
		args := string(c.Input)
		items = append(items, rsOutput{Type: "function_call", ID: fmt.Sprintf("fc_llmtest_%d_%d", n, i), Status: "completed",
			CallID: id, Name: c.Name, Arguments: &args})
	}
	var body struct {
		Instructions    *string         `json:"instructions"`
		MaxOutputTokens *int            `json:"max_output_tokens"`
		Tools           json.RawMessage `json:"tools"`
		ToolChoice      json.RawMessage `json:"tool_choice"`
		Store           *bool           `json:"store"`
	}
	_ = json.Unmarshal(req.Body, &body)
	if body.Tools == nil {
		body.Tools = json.RawMessage("[]")
	}
	if body.ToolChoice == nil {
		body.ToolChoice = json.RawMessage(`"auto"`)
	}
	response := func(status string, output []rsOutput, incomplete, usage any) map[string]any {
		return map[string]any{
			"id": fmt.Sprintf("resp_llmtest_%d", n), "object": "response", "created_at": 1700000000,
			"status": status, "error": nil, "incomplete_details": incomplete,
			"instructions": body.Instructions, "max_output_tokens": body.MaxOutputTokens, "model": req.Model,
			"output": output, "parallel_tool_calls": true, "previous_response_id": nil,
			"reasoning": map[string]any{"effort": nil, "summary": nil}, "store": body.Store == nil || *body.Store,
			"temperature": 1.0, "text": map[string]any{"format": map[string]string{"type": "text"}},
			"tool_choice": body.ToolChoice, "tools": body.Tools, "top_p": 1.0, "truncation": "disabled",
			"usage": usage, "user": nil, "metadata": map[string]any{},
		}
	}
	usage := map[string]any{
		"input_tokens": rep.Usage.InputTokens, "input_tokens_details": map[string]int{"cached_tokens": 0},
		"output_tokens": rep.Usage.OutputTokens, "output_tokens_details": map[string]int{"reasoning_tokens": 0},
		"total_tokens": rep.Usage.InputTokens + rep.Usage.OutputTokens,
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, response(status, items, incomplete, usage))
		return
	}

	s := newSSE(w)
	seq := 0
	event := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		s.event(typ, fields)
	}
	event("response.created", map[string]any{"response": response("in_progress", []rsOutput{}, nil, nil)})
	event("response.in_progress", map[string]any{"response": response("in_progress", []rsOutput{}, nil, nil)})
	for i, it := range items {
		begun := it
		begun.Status = "in_progress"
		switch it.Type {
		case "message":
			begun.Content = []rsText{}
			event("response.output_item.added", map[string]any{"output_index": i, "item": begun})
			part := rsText{Type: "output_text", Annotations: []any{}, Logprobs: []any{}}
			at := map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0}
			with := func(k string, v any) map[string]any {
				m := map[string]any{k: v}
				for k, v := range at {
					m[k] = v
				}
				return m
			}
			event("response.content_part.added", with("part", part))
			for _, p := range pieces(rep.Text, 8) {
				d := with("delta", p)
				d["logprobs"] = []any{}
				event("response.output_text.delta", d)
			}
			done := with("text", rep.Text)
			done["logprobs"] = []any{}
			event("response.output_text.done", done)
			part.Text = rep.Text
			event("response.content_part.done", with("part", part))
		case "function_call":
			empty := ""
			begun.Arguments = &empty
			event("response.output_item.added", map[string]any{"output_index": i, "item": begun})
			for _, p := range pieces(*it.Arguments, 5) {
				event("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": i, "delta": p})
			}
			event("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": i, "name": it.Name, "arguments": *it.Arguments})
		}
		event("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	event("response."+status, map[string]any{"response": response(status, items, incomplete, usage)})
}

// Package llm is the provider-neutral conversation the agent loop holds with a model, and
// the Provider interface that the OpenAI Chat Completions and Responses (llm/openai) and
// Anthropic Messages (llm/anthropic) clients implement.
//
// Not for: the loop itself (package agent) or the tools' definitions (package tool).
package llm

import (
	"context"
	"encoding/json"

	"github.com/cellbox/cellbox/internal/tool"
)

// Role is who said a message.
type Role string

// Roles of a conversation. Tool results travel in a user message, as in Anthropic's
// Messages API; the OpenAI provider turns them into tool messages.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Message is one turn of the conversation.
type Message struct {
	Role        Role
	Text        string       // what the user or the model wrote
	ToolCalls   []ToolCall   // the model's calls (assistant)
	ToolResults []ToolResult // results of the previous assistant message's calls, in its order (user)
}

// ToolCall is a model's call of a tool.
type ToolCall struct {
	ID    string
	Name  string
	Input json.RawMessage // the arguments, a JSON object
}

// ToolResult answers one ToolCall.
type ToolResult struct {
	CallID  string
	Name    string // the called tool's name
	Text    string
	Images  []tool.Image
	IsError bool
}

// Request is one call of a model.
type Request struct {
	Model     string
	System    string
	Messages  []Message
	Tools     []tool.Definition // none: the model must answer in text
	MaxTokens int               // 0: the provider's default
	// NoToolCalls keeps Tools declared (a history with tool calls needs them) but tells the
	// model not to call any (tool_choice "none"): the agent's last call after its step limit.
	NoToolCalls bool
}

// Stop reasons of a Response.
const (
	StopEnd       = "end"        // the model finished its answer
	StopToolUse   = "tool_use"   // the model called tools
	StopMaxTokens = "max_tokens" // the answer was cut at MaxTokens
)

// Response is the model's turn.
type Response struct {
	Message    Message // Role is RoleAssistant
	StopReason string
	Usage      Usage
}

// Usage counts tokens, as the provider reports them.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Provider is one model API.
type Provider interface {
	// Name is "openai", "openai-responses" or "anthropic".
	Name() string
	// Complete sends the conversation and returns the model's turn. With onText set the
	// response is streamed and onText sees the text as it comes; without, it is one request
	// and one response. Errors say what went wrong in words a person can act on (a missing
	// API key, an unknown model, a server that cannot be reached).
	Complete(ctx context.Context, req Request, onText func(delta string)) (*Response, error)
}

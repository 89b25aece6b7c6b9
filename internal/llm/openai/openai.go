// Package openai is the llm.Provider for the OpenAI Chat Completions API and the servers that
// speak it: OpenAI, Azure OpenAI's v1 endpoint, OpenRouter, Ollama, vLLM and the llama.cpp
// server (Provider); and for OpenAI's Responses API, used statelessly (ResponsesProvider).
// Each maps the provider-neutral conversation onto its wire format and back, streams when
// asked to, and turns failures into messages a person can act on, in one way for both.
//
// Not for: serving the Responses API (package internal/openai), the agent loop (package
// agent) or what tools say (package tool).
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/llm"
)

// Options configure a Provider. Empty fields fall back to the environment, then to defaults.
type Options struct {
	// APIKey: "" reads OPENAI_API_KEY. Only api.openai.com needs one; a local server
	// (Ollama, vLLM, llama.cpp) takes requests without.
	APIKey string
	// BaseURL is the API's base, to which /chat/completions is added: "" reads
	// OPENAI_BASE_URL, else https://api.openai.com/v1 (Ollama: http://localhost:11434/v1).
	BaseURL    string
	HTTPClient *http.Client // nil: the SDK's
	// MaxRetries bounds the retries of a request that failed with 408, 409, 429, a 5xx or
	// no connection: 0 keeps the SDK's default (2), a negative number means none.
	MaxRetries int
}

// DefaultBaseURL is OpenAI's API.
const DefaultBaseURL = "https://api.openai.com/v1"

var endpoint = llm.Endpoint{Provider: "openai", KeyEnv: "OPENAI_API_KEY", BaseEnv: "OPENAI_BASE_URL",
	DefaultBase: DefaultBaseURL, KeyHost: "api.openai.com", NoKeyHint: "a local server such as Ollama needs none: set its base URL instead"}

// Provider talks to one Chat Completions server.
type Provider struct {
	conn
}

var _ llm.Provider = (*Provider)(nil)

// conn is what both providers hold: the SDK's client, and what their messages say of the
// server (and keep out of them).
type conn struct {
	client openai.Client
	name   string // "openai" or "openai-responses": the start of every message
	base   string // the base URL for messages, without credentials
	key    string // to keep it out of every message
	// notFound is added to a 404 that comes without a message.
	notFound string
}

// New returns a Provider. It fails on a base URL that is not http(s) and on a missing key
// for api.openai.com; it does not connect.
func New(o Options) (*Provider, error) {
	c, err := dial(endpoint, o)
	if err != nil {
		return nil, err
	}
	c.notFound = "is the model name right, and is the base URL the API's (often ending in /v1)?"
	return &Provider{c}, nil
}

// dial resolves the key and the base URL and makes the SDK's client; it does not connect.
func dial(e llm.Endpoint, o Options) (conn, error) {
	key, u, err := e.Resolve(o.APIKey, o.BaseURL)
	if err != nil {
		return conn{}, err
	}
	base := u.String()
	opts := []option.RequestOption{option.WithBaseURL(base), option.WithMiddleware(errorShape)}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
		if strings.HasSuffix(u.Hostname(), ".azure.com") {
			opts = append(opts, option.WithHeader("api-key", key)) // Azure's own key header
		}
	}
	if o.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(o.HTTPClient))
	}
	if o.MaxRetries != 0 {
		opts = append(opts, option.WithMaxRetries(max(o.MaxRetries, 0)))
	}
	return conn{client: openai.NewClient(opts...), name: e.Provider, base: u.Redacted(), key: key}, nil
}

// Name is "openai".
func (p *Provider) Name() string { return "openai" }

// Complete sends the conversation; see llm.Provider.
func (p *Provider) Complete(ctx context.Context, req llm.Request, onText func(delta string)) (*llm.Response, error) {
	if req.Model == "" {
		return nil, errdefs.New(api.CodeInvalidArgument, "openai: no model given")
	}
	params := params(req)
	if onText == nil {
		c, err := p.client.Chat.Completions.New(ctx, params)
		if err != nil {
			return nil, p.explain(ctx, err)
		}
		if len(c.Choices) == 0 {
			return nil, errdefs.New(api.CodeUnavailable, "openai: the server answered with no choices")
		}
		ch := c.Choices[0]
		msg := llm.Message{Role: llm.RoleAssistant, Text: ch.Message.Content}
		for i, tc := range ch.Message.ToolCalls {
			if tc.Type == "function" || tc.Function.Name != "" {
				msg.ToolCalls = append(msg.ToolCalls, toolCall(i, tc.ID, tc.Function.Name, tc.Function.Arguments))
			}
		}
		return response(msg, ch.FinishReason, c.Usage), nil
	}
	return p.stream(ctx, params, onText)
}

// stream makes a streamed request: text comes in deltas, a tool call's id and name in its
// first delta and its arguments in pieces; usage comes last, in a chunk without choices.
func (p *Provider) stream(ctx context.Context, params openai.ChatCompletionNewParams, onText func(string)) (*llm.Response, error) {
	params.StreamOptions.IncludeUsage = openai.Bool(true)
	stream := p.client.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	type call struct {
		id, name string
		args     strings.Builder
	}
	var (
		text    strings.Builder
		calls   []*call
		byIndex = map[int64]*call{}
		finish  string
		usage   openai.CompletionUsage
	)
	for stream.Next() {
		chunk := stream.Current()
		if chunk.JSON.Usage.Valid() {
			usage = chunk.Usage
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if d := ch.Delta.Content; d != "" {
				text.WriteString(d)
				onText(d)
			}
			for _, d := range ch.Delta.ToolCalls {
				c := byIndex[d.Index]
				// Some servers number every call 0; a new id is a new call.
				if c == nil || d.ID != "" && c.id != "" && d.ID != c.id {
					c = &call{}
					calls = append(calls, c)
					byIndex[d.Index] = c
				}
				if c.id == "" {
					c.id = d.ID
				}
				if c.name == "" {
					c.name = d.Function.Name
				}
				c.args.WriteString(d.Function.Arguments)
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.explain(ctx, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("openai: %w", err)
	}
	if finish == "" {
		return nil, p.errorf(api.CodeUnavailable, "the stream ended before the answer was complete")
	}
	msg := llm.Message{Role: llm.RoleAssistant, Text: text.String()}
	for i, c := range calls {
		msg.ToolCalls = append(msg.ToolCalls, toolCall(i, c.id, c.name, c.args.String()))
	}
	return response(msg, finish, usage), nil
}

// params maps a request onto the wire.
func params(req llm.Request) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{Model: req.Model, Messages: messages(req)}
	if req.MaxTokens > 0 {
		p.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
	}
	for _, d := range req.Tools {
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:        d.Name,
			Description: openai.String(d.Description),
			Parameters:  openai.FunctionParameters(d.InputSchema),
		}))
	}
	if req.NoToolCalls && len(p.Tools) > 0 {
		p.ToolChoice.OfAuto = openai.String("none")
	}
	return p
}

// imageNote starts the text part before a tool result's images (see messages); llmtest
// reads it.
const imageNote = "Images from tool call "

// messages maps the conversation. Tool results become tool messages, which take text only,
// so the images of a turn's results follow in one user message, each result's images after
// a text part naming the call; the turn's own text comes last.
func messages(req llm.Request) []openai.ChatCompletionMessageParamUnion {
	var out []openai.ChatCompletionMessageParamUnion
	if req.System != "" {
		out = append(out, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		if m.Role == llm.RoleAssistant {
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Text != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Text)
			}
			for _, c := range m.ToolCalls {
				args := string(c.Input)
				if args == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: args},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
			continue
		}
		var parts []openai.ChatCompletionContentPartUnionParam
		for _, r := range m.ToolResults {
			text := r.Text
			if r.IsError {
				text = "Error: " + text
			}
			out = append(out, openai.ToolMessage(text, r.CallID))
			if len(r.Images) == 0 {
				continue
			}
			note := imageNote + r.CallID + ":"
			if r.Name != "" {
				note = imageNote + r.CallID + " (" + r.Name + "):"
			}
			parts = append(parts, openai.TextContentPart(note))
			for _, img := range r.Images {
				parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
					URL: "data:" + img.MIME + ";base64," + img.Data,
				}))
			}
		}
		switch {
		case parts != nil:
			if m.Text != "" {
				parts = append(parts, openai.TextContentPart(m.Text))
			}
			out = append(out, openai.UserMessage(parts))
		case m.Text != "" || len(m.ToolResults) == 0:
			out = append(out, openai.UserMessage(m.Text))
		}
	}
	return out
}

// toolCall is the i-th call of an answer. A server that gives no id gets one made up;
// arguments that are not JSON reach the tool as a JSON string, which it refuses in words
// the model can act on.
func toolCall(i int, id, name, args string) llm.ToolCall {
	if id == "" {
		id = fmt.Sprintf("call_%d", i)
	}
	input := json.RawMessage(args)
	switch {
	case strings.TrimSpace(args) == "":
		input = json.RawMessage("{}")
	case !json.Valid(input):
		input, _ = json.Marshal(args)
	}
	return llm.ToolCall{ID: id, Name: name, Input: input}
}

func response(msg llm.Message, finish string, u openai.CompletionUsage) *llm.Response {
	stop := llm.StopEnd
	switch {
	case finish == "length":
		stop = llm.StopMaxTokens
	case finish == "tool_calls" || finish == "function_call" || len(msg.ToolCalls) > 0:
		// Some servers say "stop" after tool calls.
		stop = llm.StopToolUse
	}
	return &llm.Response{
		Message:    msg,
		StopReason: stop,
		Usage:      llm.Usage{InputTokens: int(u.PromptTokens), OutputTokens: int(u.CompletionTokens)},
	}
}

// explain turns an SDK error into one a person can act on, classified by errdefs.
func (c *conn) explain(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", c.name, ctx.Err())
	}
	var apiErr *openai.Error
	var streamErr *ssestream.StreamError
	var urlErr *url.Error
	switch {
	case errors.As(err, &apiErr):
		return c.apiError(apiErr.StatusCode, apiErr.Message)
	case errors.As(err, &streamErr):
		return c.errorf(api.CodeUnavailable, "the server failed during the answer: %s", streamMessage(streamErr.Event.Data))
	case errors.As(err, &urlErr):
		return c.errorf(api.CodeUnavailable, "cannot reach %s: %v", c.base, urlErr.Err)
	}
	return fmt.Errorf("%s: %s", c.name, c.redact(err.Error()))
}

func (c *conn) apiError(status int, msg string) error {
	s := fmt.Sprintf("%s: %s answered %d %s", c.name, c.base, status, http.StatusText(status))
	if msg != "" {
		s += ": " + strings.TrimRight(msg, ". ")
	} else if status == http.StatusNotFound && c.notFound != "" {
		s += "; " + c.notFound
	}
	return endpoint.StatusError(status, s, c.key)
}

// errorf is an error of code that starts with the provider's name, the key kept out.
func (c *conn) errorf(code, format string, args ...any) error {
	return errdefs.New(code, c.redact(c.name+": "+fmt.Sprintf(format, args...)))
}

// redact keeps the API key out of a message.
func (c *conn) redact(s string) string { return llm.Redact(s, c.key) }

// errorShape rewrites an error body into OpenAI's {"error": {"message": ...}}: other servers
// answer {"error": "..."} (which the SDK fails to decode), {"message": ...} or plain text.
func errorShape(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err != nil || res.StatusCode < 400 {
		return res, err
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	var v struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil || v.Error.Message == "" {
		body, _ = json.Marshal(map[string]any{"error": map[string]string{"message": streamMessage(body)}})
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

// streamMessage picks the message out of an error's JSON, or returns it trimmed.
func streamMessage(data []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(data, &v) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case v.Message != "":
			return v.Message
		}
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

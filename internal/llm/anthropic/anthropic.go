// Package anthropic is the llm.Provider for Anthropic's Messages API (and servers and proxies
// that speak it). It maps the provider-neutral conversation onto the wire format and back,
// streams when asked to, and turns failures into messages a person can act on.
//
// Not for: the agent loop (package agent) or what tools say (package tool).
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/llm"
)

// Options configure a Provider. Empty fields fall back to the environment, then to defaults.
type Options struct {
	// APIKey: "" reads ANTHROPIC_API_KEY. api.anthropic.com needs one; a proxy may not.
	APIKey string
	// BaseURL: "" reads ANTHROPIC_BASE_URL, else https://api.anthropic.com (the SDK adds
	// /v1/messages).
	BaseURL    string
	HTTPClient *http.Client // nil: the SDK's
	// MaxRetries bounds the retries of a request that failed with 408, 409, 429, a 5xx or
	// no connection: 0 keeps the SDK's default (2), a negative number means none.
	MaxRetries int
}

// DefaultBaseURL is Anthropic's API.
const DefaultBaseURL = "https://api.anthropic.com"

var endpoint = llm.Endpoint{Provider: "anthropic", KeyEnv: "ANTHROPIC_API_KEY", BaseEnv: "ANTHROPIC_BASE_URL",
	DefaultBase: DefaultBaseURL, KeyHost: "api.anthropic.com"}

// DefaultMaxTokens is the answer's limit when a request sets none (the API requires one).
const DefaultMaxTokens = 8192

// Provider talks to one Messages API server.
type Provider struct {
	client anthropic.Client
	base   string // the base URL for messages, without credentials
	key    string // to keep it out of every message
}

var _ llm.Provider = (*Provider)(nil)

// New returns a Provider. It fails on a base URL that is not http(s) and on a missing key
// for api.anthropic.com; it does not connect. Of the environment it reads only
// ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL.
func New(o Options) (*Provider, error) {
	key, u, err := endpoint.Resolve(o.APIKey, o.BaseURL)
	if err != nil {
		return nil, err
	}
	base := u.String()
	// The SDK's own environment defaults would also read profiles and federation settings
	// from disk; this package resolves its two variables itself.
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithBaseURL(base)}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	if o.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(o.HTTPClient))
	}
	if o.MaxRetries != 0 {
		opts = append(opts, option.WithMaxRetries(max(o.MaxRetries, 0)))
	}
	return &Provider{client: anthropic.NewClient(opts...), base: u.Redacted(), key: key}, nil
}

// Name is "anthropic".
func (p *Provider) Name() string { return "anthropic" }

// Complete sends the conversation; see llm.Provider.
func (p *Provider) Complete(ctx context.Context, req llm.Request, onText func(delta string)) (*llm.Response, error) {
	if req.Model == "" {
		return nil, errdefs.New(api.CodeInvalidArgument, "anthropic: no model given")
	}
	params := params(req)
	// The SDK refuses a request without streaming that may take over 10 minutes.
	_, tooLong := anthropic.CalculateNonStreamingTimeout(int(params.MaxTokens), params.Model, nil)
	if onText == nil && tooLong == nil {
		m, err := p.client.Messages.New(ctx, params)
		if err != nil {
			return nil, p.explain(ctx, err)
		}
		return response(m), nil
	}
	stream := p.client.Messages.NewStreaming(ctx, params)
	defer stream.Close()
	var m anthropic.Message
	for stream.Next() {
		ev := stream.Current()
		if err := m.Accumulate(ev); err != nil {
			return nil, errdefs.New(api.CodeUnavailable, "anthropic: the stream was malformed: "+err.Error())
		}
		if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" && ev.Delta.Text != "" && onText != nil {
			onText(ev.Delta.Text)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.explain(ctx, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("anthropic: %w", err)
	}
	if m.StopReason == "" {
		return nil, errdefs.New(api.CodeUnavailable, "anthropic: the stream ended before the answer was complete")
	}
	return response(&m), nil
}

// params maps a request onto the wire.
func params(req llm.Request) anthropic.MessageNewParams {
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(req.Model),
		MaxTokens: DefaultMaxTokens,
		Messages:  messages(req.Messages),
	}
	if req.MaxTokens > 0 {
		p.MaxTokens = int64(req.MaxTokens)
	}
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for _, d := range req.Tools {
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
			Name:        d.Name,
			Description: anthropic.String(d.Description),
			InputSchema: param.Override[anthropic.ToolInputSchemaParam](d.InputSchema),
		}})
	}
	if req.NoToolCalls && len(p.Tools) > 0 {
		p.ToolChoice = anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}
	}
	return p
}

// messages maps the conversation. A message with nothing in it is left out: the API refuses
// empty messages, and joins consecutive messages of one role.
func messages(in []llm.Message) []anthropic.MessageParam {
	var out []anthropic.MessageParam
	for _, m := range in {
		var blocks []anthropic.ContentBlockParamUnion
		for _, r := range m.ToolResults {
			res := anthropic.ToolResultBlockParam{ToolUseID: r.CallID}
			if r.IsError {
				res.IsError = anthropic.Bool(true)
			}
			if r.Text != "" {
				res.Content = append(res.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: r.Text}})
			}
			for _, img := range r.Images {
				res.Content = append(res.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: &anthropic.ImageBlockParam{
					Source: anthropic.ImageBlockParamSourceUnion{OfBase64: &anthropic.Base64ImageSourceParam{
						Data:      img.Data,
						MediaType: anthropic.Base64ImageSourceMediaType(img.MIME),
					}},
				}})
			}
			blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &res})
		}
		if m.Text != "" {
			blocks = append(blocks, anthropic.NewTextBlock(m.Text))
		}
		for _, c := range m.ToolCalls {
			input := c.Input
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, input, c.Name))
		}
		if len(blocks) == 0 {
			continue
		}
		if m.Role == llm.RoleAssistant {
			out = append(out, anthropic.NewAssistantMessage(blocks...))
		} else {
			out = append(out, anthropic.NewUserMessage(blocks...))
		}
	}
	return out
}

func response(m *anthropic.Message) *llm.Response {
	msg := llm.Message{Role: llm.RoleAssistant}
	var text strings.Builder
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			input := b.Input
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			msg.ToolCalls = append(msg.ToolCalls, llm.ToolCall{ID: b.ID, Name: b.Name, Input: input})
		}
	}
	msg.Text = text.String()
	stop := llm.StopEnd
	switch m.StopReason {
	case anthropic.StopReasonToolUse:
		stop = llm.StopToolUse
	case anthropic.StopReasonMaxTokens, anthropic.StopReasonModelContextWindowExceeded:
		stop = llm.StopMaxTokens
	}
	return &llm.Response{
		Message:    msg,
		StopReason: stop,
		Usage:      llm.Usage{InputTokens: int(m.Usage.InputTokens), OutputTokens: int(m.Usage.OutputTokens)},
	}
}

// explain turns an SDK error into one a person can act on, classified by errdefs.
func (p *Provider) explain(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("anthropic: %w", ctx.Err())
	}
	var apiErr *anthropic.Error
	var urlErr *url.Error
	switch {
	case errors.As(err, &apiErr):
		return p.apiError(apiErr.StatusCode, errorMessage(apiErr.RawJSON()))
	case errors.As(err, &urlErr):
		return errdefs.New(api.CodeUnavailable, p.redact(fmt.Sprintf("anthropic: cannot reach %s: %v", p.base, urlErr.Err)))
	case errors.Is(err, context.DeadlineExceeded):
		return errdefs.New(api.CodeUnavailable, fmt.Sprintf("anthropic: %s did not answer in time", p.base))
	}
	return fmt.Errorf("anthropic: %s", p.redact(err.Error()))
}

func (p *Provider) apiError(status int, msg string) error {
	s := fmt.Sprintf("anthropic: %s answered %d", p.base, status)
	if t := http.StatusText(status); t != "" {
		s += " " + t
	}
	if status == http.StatusOK {
		s = fmt.Sprintf("anthropic: %s failed during the answer", p.base) // an error event in a stream
	}
	if msg != "" {
		s += ": " + msg
	}
	return endpoint.StatusError(status, s, p.key)
}

// redact keeps the API key out of a message.
func (p *Provider) redact(s string) string { return llm.Redact(s, p.key) }

// errorMessage picks the message out of an error body {"type":"error","error":{"message":...}},
// or returns the body trimmed.
func errorMessage(body string) string {
	var v struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(body), &v) == nil && v.Error.Message != "" {
		return v.Error.Message
	}
	s := strings.TrimSpace(body)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

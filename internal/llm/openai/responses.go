package openai

import (
	"context"
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/llm"
)

var responsesEndpoint = func() llm.Endpoint {
	e := endpoint
	e.Provider = "openai-responses"
	return e
}()

// ResponsesProvider talks to a server of OpenAI's Responses API (POST {base}/responses):
// OpenAI, or a server that speaks it (vLLM, Ollama, ...).
//
// It is stateless: every call sends the whole conversation as input items with store
// false, and never uses previous_response_id. Reasoning items are not kept between calls
// (llm.Message has no place for them), so a reasoning model thinks afresh each turn;
// everything it said and called is kept.
type ResponsesProvider struct {
	conn
}

var _ llm.Provider = (*ResponsesProvider)(nil)

// NewResponses returns a ResponsesProvider. Options are read as for New (OPENAI_API_KEY,
// OPENAI_BASE_URL); it fails on a base URL that is not http(s) and on a missing key for
// api.openai.com; it does not connect.
func NewResponses(o Options) (*ResponsesProvider, error) {
	c, err := dial(responsesEndpoint, o)
	if err != nil {
		return nil, err
	}
	c.notFound = "is the model name right, does the server speak the Responses API (POST /responses), and is the base URL the API's (often ending in /v1)?"
	return &ResponsesProvider{c}, nil
}

// Name is "openai-responses".
func (p *ResponsesProvider) Name() string { return responsesEndpoint.Provider }

// Complete sends the conversation; see llm.Provider.
func (p *ResponsesProvider) Complete(ctx context.Context, req llm.Request, onText func(delta string)) (*llm.Response, error) {
	if req.Model == "" {
		return nil, p.errorf(api.CodeInvalidArgument, "no model given")
	}
	params := responsesParams(req)
	if onText == nil {
		r, err := p.client.Responses.New(ctx, params)
		if err != nil {
			return nil, p.explain(ctx, err)
		}
		return p.answer(r)
	}
	stream := p.client.Responses.NewStreaming(ctx, params)
	defer stream.Close()
	var final *responses.Response
	for stream.Next() {
		e := stream.Current()
		switch e.Type {
		case "response.output_text.delta":
			if e.Delta != "" {
				onText(e.Delta)
			}
		case "response.completed", "response.incomplete", "response.failed":
			r := e.Response
			final = &r
		case "error":
			return nil, p.failure(e.Code, e.Message)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.explain(ctx, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", p.name, err)
	}
	if final == nil {
		return nil, p.errorf(api.CodeUnavailable, "the stream ended before the answer was complete")
	}
	return p.answer(final)
}

// answer maps a finished response: its messages' text (a refusal's too), its function calls,
// why it stopped. Other items (reasoning, ...) are dropped.
func (p *ResponsesProvider) answer(r *responses.Response) (*llm.Response, error) {
	if r.Status == responses.ResponseStatusFailed || r.Status == responses.ResponseStatusCancelled {
		return nil, p.failure(string(r.Error.Code), r.Error.Message)
	}
	msg := llm.Message{Role: llm.RoleAssistant}
	var text []string
	for _, item := range r.Output {
		switch item.Type {
		case "message":
			for _, c := range item.Content {
				switch c.Type {
				case "output_text":
					text = append(text, c.Text)
				case "refusal":
					text = append(text, c.Refusal)
				}
			}
		case "function_call":
			msg.ToolCalls = append(msg.ToolCalls, toolCall(len(msg.ToolCalls), item.CallID, item.Name, item.Arguments.OfString))
		}
	}
	msg.Text = strings.Join(text, "")
	stop := llm.StopEnd
	switch {
	case len(msg.ToolCalls) > 0:
		stop = llm.StopToolUse
	case r.Status == responses.ResponseStatusIncomplete && r.IncompleteDetails.Reason == "max_output_tokens":
		stop = llm.StopMaxTokens
	}
	return &llm.Response{
		Message:    msg,
		StopReason: stop,
		Usage:      llm.Usage{InputTokens: int(r.Usage.InputTokens), OutputTokens: int(r.Usage.OutputTokens)},
	}, nil
}

// failure is a response that failed, or a stream's error event: a rate limit is
// resource_exhausted, a prompt or image the model refused invalid_argument, anything else
// unavailable.
func (p *ResponsesProvider) failure(code, msg string) error {
	kind := api.CodeUnavailable
	switch {
	case code == "rate_limit_exceeded":
		kind = api.CodeResourceExhausted
	case code == "invalid_prompt" || strings.HasPrefix(code, "invalid_image") || code == "image_too_large" || code == "image_too_small" || code == "empty_image_file":
		kind = api.CodeInvalidArgument
	}
	msg = strings.TrimRight(msg, ". ")
	if msg == "" {
		msg = "no reason given"
	}
	if code != "" {
		msg += " (" + code + ")"
	}
	return p.errorf(kind, "the model failed to answer: %s", msg)
}

// responsesParams maps a request onto the wire.
func responsesParams(req llm.Request) responses.ResponseNewParams {
	p := responses.ResponseNewParams{
		Model: req.Model,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: inputItems(req.Messages)},
		Store: openai.Bool(false),
	}
	if req.System != "" {
		p.Instructions = openai.String(req.System)
	}
	if req.MaxTokens > 0 {
		p.MaxOutputTokens = openai.Int(int64(req.MaxTokens))
	}
	for _, d := range req.Tools {
		schema := d.InputSchema
		if schema == nil {
			schema = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		p.Tools = append(p.Tools, responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
			Name:        d.Name,
			Description: openai.String(d.Description),
			Parameters:  schema,
			Strict:      openai.Bool(false),
		}})
	}
	if req.NoToolCalls && len(p.Tools) > 0 {
		p.ToolChoice.OfToolChoiceMode = openai.Opt(responses.ToolChoiceOptionsNone)
	}
	return p
}

// inputItems maps the conversation: text becomes messages, a call a function_call item and
// its result a function_call_output item whose output is the text, or, with images, a list
// of input_text and input_image parts. A user message's own text follows its results.
func inputItems(msgs []llm.Message) responses.ResponseInputParam {
	var out responses.ResponseInputParam
	for _, m := range msgs {
		if m.Role == llm.RoleAssistant {
			if m.Text != "" || len(m.ToolCalls) == 0 {
				out = append(out, responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleAssistant))
			}
			for _, c := range m.ToolCalls {
				args := string(c.Input)
				if args == "" {
					args = "{}"
				}
				out = append(out, responses.ResponseInputItemParamOfFunctionCall(args, c.ID, c.Name))
			}
			continue
		}
		for _, r := range m.ToolResults {
			text := r.Text
			if r.IsError {
				text = "Error: " + text
			}
			var item responses.ResponseInputItemUnionParam
			if len(r.Images) == 0 {
				item = responses.ResponseInputItemParamOfFunctionCallOutput(text)
			} else {
				var parts responses.ResponseFunctionCallOutputItemListParam
				if text != "" {
					parts = append(parts, responses.ResponseFunctionCallOutputItemUnionParam{
						OfInputText: &responses.ResponseInputTextContentParam{Text: text},
					})
				}
				for _, img := range r.Images {
					parts = append(parts, responses.ResponseFunctionCallOutputItemUnionParam{
						OfInputImage: &responses.ResponseInputImageContentParam{ImageURL: openai.String("data:" + img.MIME + ";base64," + img.Data)},
					})
				}
				item = responses.ResponseInputItemParamOfFunctionCallOutput(parts)
			}
			item.OfFunctionCallOutput.CallID = openai.String(r.CallID)
			out = append(out, item)
		}
		if m.Text != "" || len(m.ToolResults) == 0 {
			out = append(out, responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleUser))
		}
	}
	return out
}

package openai

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/tool"
)

// The Responses API (POST /v1/responses): OpenAI's code_interpreter tool for any model the
// server has. The model is called through package llm (the server's provider); a call of
// the code interpreter runs in the container's cellbox session and the loop goes on until
// the model answers, or calls a function the client defined: then the response ends with
// that function_call, and a next request with previous_response_id and its
// function_call_output goes on from there.

// ResponsesOptions configure POST /v1/responses; a nil NewProvider turns it off.
type ResponsesOptions struct {
	// NewProvider returns the server's model provider ("" for its default) and the
	// provider's default model.
	NewProvider func(name string) (llm.Provider, string, error)
	// Runner runs code in sessions (the session manager).
	Runner tool.Runner
	// MaxSteps bounds the model calls of one response (default 20).
	MaxSteps int
	// Limits bound what one code result puts in the model's context.
	Limits tool.RenderLimits
}

// codeTool is the name the model sees for the code interpreter: gpt-oss and most models
// know a python tool.
const codeTool = "python"

// maxStored bounds the responses kept per tenant (the oldest go first).
const maxStored = 500

type responseRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       string            `json:"instructions"`
	Tools              []responseTool    `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	PreviousResponseID string            `json:"previous_response_id"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store"`
	MaxOutputTokens    int               `json:"max_output_tokens"`
	Metadata           map[string]string `json:"metadata"`
	Include            []string          `json:"include"`
}

type responseTool struct {
	Type        string          `json:"type"`
	Container   json.RawMessage `json:"container,omitempty"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parameters  map[string]any  `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// respItem is one input or output item of a response.
type respItem struct {
	Type        string          `json:"type"`
	ID          string          `json:"id,omitempty"`
	Role        string          `json:"role,omitempty"`
	Status      string          `json:"status,omitempty"`
	Content     json.RawMessage `json:"content,omitempty"`
	CallID      string          `json:"call_id,omitempty"`
	Name        string          `json:"name,omitempty"`
	Arguments   string          `json:"arguments,omitempty"`
	Output      json.RawMessage `json:"output,omitempty"`
	Code        *string         `json:"code,omitempty"`
	ContainerID string          `json:"container_id,omitempty"`
	Outputs     *[]ciOutput     `json:"outputs,omitempty"`
}

type ciOutput struct {
	Type string `json:"type"` // logs | image
	Logs string `json:"logs,omitempty"`
	URL  string `json:"url,omitempty"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// response is OpenAI's Response object.
type response struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Model              string            `json:"model"`
	Output             []respItem        `json:"output"`
	Usage              usage             `json:"usage"`
	Error              any               `json:"error"`
	IncompleteDetails  any               `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	Metadata           map[string]string `json:"metadata"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Store              bool              `json:"store"`
	Tools              []responseTool    `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
}

// stored is a response as later requests continue from it.
type stored struct {
	resp      response
	messages  []llm.Message // the conversation, this response's turns included
	container string        // its code interpreter's session; "" if none
	pending   map[string]string
	size      int64 // sizeOf, when stored
}

// responses keeps the stored responses of each tenant.
type responses struct {
	mu     sync.Mutex
	tenant map[string]*tenantResponses
}

type tenantResponses struct {
	byID  map[string]*stored
	order []string
	bytes int64
}

// maxStoredBytes bounds the stored responses of a tenant, as sizeOf counts them.
const maxStoredBytes = 64 << 20

func (rs *responses) put(tenant string, s *stored) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.tenant == nil {
		rs.tenant = map[string]*tenantResponses{}
	}
	t := rs.tenant[tenant]
	if t == nil {
		t = &tenantResponses{byID: map[string]*stored{}}
		rs.tenant[tenant] = t
	}
	s.size = sizeOf(s)
	t.byID[s.resp.ID] = s
	t.order = append(t.order, s.resp.ID)
	t.bytes += s.size
	for len(t.order) > maxStored || t.bytes > maxStoredBytes && len(t.order) > 1 {
		if old := t.byID[t.order[0]]; old != nil {
			t.bytes -= old.size
		}
		delete(t.byID, t.order[0])
		t.order = t.order[1:]
	}
}

func (rs *responses) get(tenant, id string) (*stored, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if t := rs.tenant[tenant]; t != nil {
		s, ok := t.byID[id]
		return s, ok
	}
	return nil, false
}

func (rs *responses) remove(tenant, id string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	t := rs.tenant[tenant]
	if t == nil || t.byID[id] == nil {
		return false
	}
	t.bytes -= t.byID[id].size
	delete(t.byID, id)
	for i, o := range t.order {
		if o == id {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
	return true
}

// withoutImages is msgs with each tool result's images replaced by a note: a stored
// conversation keeps text only (images are in the container, and a follow-up's model
// calls would carry every earlier one again).
func withoutImages(msgs []llm.Message) []llm.Message {
	out := make([]llm.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m
		if len(m.ToolResults) == 0 {
			continue
		}
		rs := make([]llm.ToolResult, len(m.ToolResults))
		for j, r := range m.ToolResults {
			if n := len(r.Images); n > 0 {
				r.Text += fmt.Sprintf("\n[%d image(s) shown then, not kept]", n)
				r.Images = nil
			}
			rs[j] = r
		}
		out[i].ToolResults = rs
	}
	return out
}

// sizeOf estimates what a stored response holds in memory.
func sizeOf(s *stored) int64 {
	b, _ := json.Marshal(s.resp)
	n := int64(len(b))
	for _, m := range s.messages {
		n += int64(len(m.Text))
		for _, c := range m.ToolCalls {
			n += int64(len(c.Input))
		}
		for _, r := range m.ToolResults {
			n += int64(len(r.Text))
		}
	}
	return n
}

// toolNames lists the tools the model may call in this turn.
func (t *turn) toolNames() string {
	var names []string
	for _, d := range t.tools {
		names = append(names, d.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func newID(prefix string) string {
	var b [16]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// nodeID is an id of something kept on this node: prefix, then 32 hex digits that start
// with the node's tag in a cluster (Options.IDPrefix), as a session id does, so that any
// node can tell where it is kept.
func (h *Handler) nodeID(prefix string) string {
	var b [16]byte
	rand.Read(b[:])
	return prefix + (h.opts.IDPrefix + hex.EncodeToString(b[:]))[:32]
}

func noResponse(id string) error {
	return fmt.Errorf("no response %q: it never existed, was not stored (store: false), or was deleted: %w", trimID(id), errdefs.ErrNotFound)
}

func trimID(id string) string {
	if len(id) > 80 {
		return id[:80] + "..."
	}
	return id
}

func (h *Handler) getResponse(w http.ResponseWriter, r *http.Request) {
	s, ok := h.stored.get(session.Tenant(r.Context()), r.PathValue("id"))
	if !ok {
		h.writeError(w, r, noResponse(r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, s.resp)
}

func (h *Handler) deleteResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !h.stored.remove(session.Tenant(r.Context()), id) {
		h.writeError(w, r, noResponse(id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response.deleted", "deleted": true})
}

// turn is one response being made: its request, what it continues from, its output.
type turn struct {
	h        *Handler
	ctx      context.Context
	r        *http.Request
	req      responseRequest
	prev     *stored
	resp     response
	messages []llm.Message
	tools    []tool.Definition
	clientFn map[string]bool // the client's function names
	ci       *responseTool   // the code_interpreter tool, if any
	cont     string          // its container's session id
	outputs  bool            // include code_interpreter_call.outputs
	ev       *events         // streaming; nil: one JSON answer
}

func (h *Handler) createResponse(w http.ResponseWriter, r *http.Request) {
	if h.ropts.NewProvider == nil {
		h.writeError(w, r, fmt.Errorf("this server has no model configured for the Responses API (set OPENAI_API_KEY or ANTHROPIC_API_KEY, see --provider): %w", errdefs.ErrFailedPrecondition))
		return
	}
	var req responseRequest
	if err := h.decode(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	t, err := h.newTurn(r, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if req.Stream {
		t.ev = newEvents(w)
	}
	if err := t.run(); err != nil {
		if t.ev != nil && t.ev.started {
			t.ev.send("error", map[string]any{"code": errdefs.Code(err), "message": h.errText(r, err)})
			return
		}
		h.writeError(w, r, err)
		return
	}
	if t.ev == nil {
		writeJSON(w, http.StatusOK, t.resp)
	}
}

// newTurn checks the request and gathers what the turn continues from.
func (h *Handler) newTurn(r *http.Request, req responseRequest) (*turn, error) {
	tenant := session.Tenant(r.Context())
	t := &turn{h: h, ctx: r.Context(), r: r, req: req, clientFn: map[string]bool{}}
	for _, inc := range req.Include {
		t.outputs = t.outputs || inc == "code_interpreter_call.outputs"
	}
	if req.PreviousResponseID != "" {
		prev, ok := h.stored.get(tenant, req.PreviousResponseID)
		if !ok {
			return nil, &paramError{"previous_response_id", noResponse(req.PreviousResponseID)}
		}
		t.prev = prev
		t.messages = append(t.messages, prev.messages...)
		t.cont = prev.container
	}
	for i := range req.Tools {
		tl := &req.Tools[i]
		switch tl.Type {
		case "code_interpreter":
			if t.ci != nil {
				return nil, invalid(fmt.Sprintf("tools[%d]", i), "one code_interpreter tool at most")
			}
			t.ci = tl
			t.tools = append(t.tools, pythonDefinition())
			// A container named by id must be the caller's, now: not a failure the model
			// reads later.
			var named string
			var auto struct {
				Type string `json:"type"`
			}
			if len(tl.Container) > 0 && json.Unmarshal(tl.Container, &named) != nil && (json.Unmarshal(tl.Container, &auto) != nil || auto.Type != "auto") {
				return nil, invalid(fmt.Sprintf("tools[%d].container", i), "a code_interpreter's container is a container id (cntr_...) or {\"type\": \"auto\"}")
			}
			if named != "" {
				id, err := sessionID(named)
				if err == nil {
					_, err = h.m.Get(r.Context(), id)
				}
				if err != nil {
					return nil, &paramError{fmt.Sprintf("tools[%d].container", i), notFound(err, named)}
				}
				t.cont = id // the named container, over the previous response's
			} else if len(tl.Container) > 0 {
				// An auto container's settings are checked now, not at the model's first call.
				var a struct {
					FileIDs     []string `json:"file_ids"`
					MemoryLimit string   `json:"memory_limit"`
				}
				json.Unmarshal(tl.Container, &a)
				if _, err := memoryMB(a.MemoryLimit, h.opts.MaxMemoryMB); err != nil {
					return nil, err
				}
				for j, fid := range a.FileIDs {
					if _, err := h.fileOf(r, fid); err != nil {
						return nil, &paramError{fmt.Sprintf("tools[%d].container.file_ids[%d]", i, j), err}
					}
				}
			}
		case "function":
			if tl.Name == "" || tl.Name == codeTool || t.clientFn[tl.Name] {
				return nil, invalid(fmt.Sprintf("tools[%d].name", i), "a function needs a name of its own (not %q, nor one given twice)", codeTool)
			}
			params := tl.Parameters
			if params == nil {
				params = map[string]any{"type": "object", "properties": map[string]any{}}
			}
			t.clientFn[tl.Name] = true
			t.tools = append(t.tools, tool.Definition{Name: tl.Name, Description: tl.Description, InputSchema: params})
		default:
			return nil, invalid(fmt.Sprintf("tools[%d].type", i), "cellbox runs the tools code_interpreter and function, not %q", tl.Type)
		}
	}
	if req.MaxOutputTokens < 0 {
		return nil, invalid("max_output_tokens", "max_output_tokens must not be negative")
	}
	if len(req.Metadata) > 16 {
		return nil, invalid("metadata", "metadata holds at most 16 pairs")
	}
	for k, v := range req.Metadata {
		if len(k) > 64 || len(v) > 512 {
			return nil, invalid("metadata", "metadata keys are at most 64 characters, values at most 512")
		}
	}
	input, err := t.inputMessages(req.Input)
	if err != nil {
		return nil, err
	}
	t.messages = append(t.messages, input...)
	if len(t.messages) == 0 {
		return nil, invalid("input", "a response needs input")
	}
	store := req.Store == nil || *req.Store
	var instructions *string
	if req.Instructions != "" {
		instructions = &req.Instructions
	}
	var prevID *string
	if req.PreviousResponseID != "" {
		prevID = &req.PreviousResponseID
	}
	var maxOut *int
	if req.MaxOutputTokens > 0 {
		maxOut = &req.MaxOutputTokens
	}
	choice := req.ToolChoice
	if len(choice) == 0 {
		choice = json.RawMessage(`"auto"`)
	}
	t.resp = response{ID: h.nodeID("resp_"), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress",
		Model: req.Model, Output: []respItem{}, Instructions: instructions, Metadata: req.Metadata, PreviousResponseID: prevID,
		Store: store, Tools: req.Tools, ToolChoice: choice, ParallelToolCalls: true, MaxOutputTokens: maxOut}
	if t.resp.Tools == nil {
		t.resp.Tools = []responseTool{}
	}
	return t, nil
}

// pythonDefinition is the code interpreter as the model sees it.
func pythonDefinition() tool.Definition {
	for _, d := range tool.Definitions(tool.Options{}) {
		if d.Name == tool.Python {
			return d
		}
	}
	panic("no python tool")
}

// inputMessages turns the request's input (a string, or items) into the conversation's
// messages. Function call outputs answer the previous response's pending calls.
func (t *turn) inputMessages(raw json.RawMessage) ([]llm.Message, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []llm.Message{{Role: llm.RoleUser, Text: text}}, nil
	}
	var items []respItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid("input", "input is a string or a list of items")
	}
	var out []llm.Message
	var results []llm.ToolResult
	for i, it := range items {
		switch {
		case it.Type == "function_call_output":
			name := ""
			if t.prev != nil {
				name = t.prev.pending[it.CallID]
			}
			if name == "" {
				return nil, invalid(fmt.Sprintf("input[%d].call_id", i), "no function call %q is waiting for its output in the previous response", trimID(it.CallID))
			}
			var s string
			if json.Unmarshal(it.Output, &s) != nil {
				s = string(it.Output)
			}
			results = append(results, llm.ToolResult{CallID: it.CallID, Name: name, Text: s})
		case it.Type == "message" || it.Type == "" && it.Role != "":
			txt, err := contentText(it.Content)
			if err != nil {
				return nil, &paramError{fmt.Sprintf("input[%d].content", i), err}
			}
			role := llm.RoleUser
			switch it.Role {
			case "assistant":
				role = llm.RoleAssistant
			case "system", "developer":
				txt = "(" + it.Role + ") " + txt
			}
			if len(results) > 0 {
				out = append(out, llm.Message{Role: llm.RoleUser, ToolResults: results})
				results = nil
			}
			out = append(out, llm.Message{Role: role, Text: txt})
		default:
			return nil, invalid(fmt.Sprintf("input[%d].type", i), "input items are messages and function_call_output, not %q", it.Type)
		}
	}
	if len(results) > 0 {
		out = append([]llm.Message{{Role: llm.RoleUser, ToolResults: results}}, out...)
	}
	return out, nil
}

// contentText is a message's content: a string, or input_text/output_text parts.
func contentText(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content is a string or a list of text parts: %w", errdefs.ErrInvalidArgument)
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			b.WriteString(p.Text)
		default:
			return "", fmt.Errorf("cellbox takes text parts only, not %q: %w", p.Type, errdefs.ErrInvalidArgument)
		}
	}
	return b.String(), nil
}

// upstream splits a request's model into the server's provider it names and the model there:
// "anthropic:claude-sonnet-4-5" is Anthropic's (any provider by its name, then a colon);
// any other name, Ollama's "gpt-oss:20b" too, is a model of the server's default provider,
// and "" that provider's default model.
func upstream(model string) (provider, name string) {
	if p, m, ok := strings.Cut(model, ":"); ok && m != "" &&
		slices.Contains([]string{api.ProviderOpenAI, api.ProviderOpenAIResponses, api.ProviderAnthropic}, p) {
		return p, m
	}
	return "", model
}

// run calls the model until it answers or calls a client function.
func (t *turn) run() error {
	provider, model := upstream(t.req.Model)
	p, def, err := t.h.ropts.NewProvider(provider)
	if err != nil {
		return fmt.Errorf("%s: %w", err.Error(), errdefs.ErrFailedPrecondition)
	}
	if model == "" {
		model = def
	}
	t.resp.Model = cmp.Or(t.req.Model, model)
	t.ev.send("response.created", map[string]any{"response": t.resp})
	t.ev.send("response.in_progress", map[string]any{"response": t.resp})
	steps := t.h.ropts.MaxSteps
	if steps <= 0 {
		steps = 20
	}
	pending := map[string]string{}
	for step := 0; ; step++ {
		req := llm.Request{Model: model, System: t.req.Instructions, Messages: t.messages, Tools: t.tools,
			MaxTokens: t.req.MaxOutputTokens, NoToolCalls: step >= steps || string(t.req.ToolChoice) == `"none"`}
		var msg *textItem
		var onText func(string)
		if t.ev != nil {
			onText = func(d string) {
				if msg == nil {
					msg = t.startMessage()
				}
				msg.delta(d)
			}
		}
		res, err := p.Complete(t.ctx, req, onText)
		if err != nil {
			return fmt.Errorf("the model failed: %s: %w", err.Error(), errdefs.ErrUnavailable)
		}
		t.resp.Usage.InputTokens += res.Usage.InputTokens
		t.resp.Usage.OutputTokens += res.Usage.OutputTokens
		t.resp.Usage.TotalTokens = t.resp.Usage.InputTokens + t.resp.Usage.OutputTokens
		if req.NoToolCalls && len(res.Message.ToolCalls) > 0 {
			// Told not to call tools (the step limit, tool_choice "none") and did anyway, as
			// local servers and hostile models do: the calls are dropped, the turn ends.
			res.Message.ToolCalls = nil
			if step >= steps {
				t.resp.IncompleteDetails = map[string]string{"reason": "max_tool_calls"}
			}
		}
		t.messages = append(t.messages, res.Message)
		if res.Message.Text != "" {
			if msg == nil {
				msg = t.startMessage()
				msg.delta(res.Message.Text)
			}
			msg.done()
		}
		if len(res.Message.ToolCalls) == 0 {
			t.resp.Status = "completed"
			if t.resp.IncompleteDetails != nil {
				t.resp.Status = "incomplete"
			}
			if res.StopReason == llm.StopMaxTokens {
				t.resp.Status, t.resp.IncompleteDetails = "incomplete", map[string]string{"reason": "max_output_tokens"}
			}
			break
		}
		var results []llm.ToolResult
		for _, c := range res.Message.ToolCalls {
			if c.Name == codeTool && t.ci != nil {
				results = append(results, t.interpret(c))
				continue
			}
			if !t.clientFn[c.Name] {
				// A tool nobody defined: the model reads that, the client gets no call.
				results = append(results, llm.ToolResult{CallID: c.ID, Name: c.Name, IsError: true,
					Text: fmt.Sprintf("there is no tool named %q here; the tools are: %s", trimID(c.Name), t.toolNames())})
				continue
			}
			pending[c.ID] = c.Name
			fc := respItem{Type: "function_call", ID: newID("fc_"), CallID: c.ID, Name: c.Name, Arguments: string(c.Input), Status: "completed"}
			t.add(fc)
		}
		if len(pending) > 0 {
			// The client runs its functions: the response ends here, the code results
			// of this step wait in the conversation for the client's outputs.
			if len(results) > 0 {
				t.messages = append(t.messages, llm.Message{Role: llm.RoleUser, ToolResults: results})
			}
			t.resp.Status = "completed"
			break
		}
		t.messages = append(t.messages, llm.Message{Role: llm.RoleUser, ToolResults: results})
	}
	if t.resp.Store {
		t.h.stored.put(session.Tenant(t.ctx), &stored{resp: t.resp, messages: withoutImages(t.messages), container: t.cont, pending: pending})
	}
	t.ev.send("response.completed", map[string]any{"response": t.resp})
	return nil
}

// add appends a finished output item.
func (t *turn) add(it respItem) {
	idx := len(t.resp.Output)
	t.resp.Output = append(t.resp.Output, it)
	t.ev.send("response.output_item.added", map[string]any{"output_index": idx, "item": it})
	t.ev.send("response.output_item.done", map[string]any{"output_index": idx, "item": it})
}

// interpret runs a code interpreter call in the container, adding its output item, and
// returns what the model reads.
func (t *turn) interpret(c llm.ToolCall) llm.ToolResult {
	call, err := tool.Decode(c.Name, c.Input)
	if err != nil {
		return llm.ToolResult{CallID: c.ID, Name: c.Name, Text: err.Error(), IsError: true}
	}
	code := call.Code
	ci := respItem{Type: "code_interpreter_call", ID: newID("ci_"), Status: "in_progress", Code: &code}
	if err := t.container(); err != nil {
		ci.Status = "failed"
		t.add(ci)
		return llm.ToolResult{CallID: c.ID, Name: c.Name, Text: "the code interpreter could not start: " + t.h.errText(t.r, err), IsError: true}
	}
	ci.ContainerID = containerPrefix + t.cont
	idx := len(t.resp.Output)
	t.resp.Output = append(t.resp.Output, ci)
	t.ev.send("response.output_item.added", map[string]any{"output_index": idx, "item": ci})
	t.ev.send("response.code_interpreter_call.in_progress", map[string]any{"output_index": idx, "item_id": ci.ID})
	t.ev.send("response.code_interpreter_call_code.delta", map[string]any{"output_index": idx, "item_id": ci.ID, "delta": code})
	t.ev.send("response.code_interpreter_call_code.done", map[string]any{"output_index": idx, "item_id": ci.ID, "code": code})
	t.ev.send("response.code_interpreter_call.interpreting", map[string]any{"output_index": idx, "item_id": ci.ID})
	// The run lives as long as the request: a client that goes away interrupts it.
	res, err := t.h.ropts.Runner.Execute(t.ctx, t.cont, api.ExecuteRequest{Code: code}, nil)
	var out llm.ToolResult
	if err != nil {
		ci.Status = "failed"
		out = llm.ToolResult{CallID: c.ID, Name: c.Name, Text: "the code could not run: " + t.h.errText(t.r, err), IsError: true}
	} else {
		ci.Status = "completed"
		rendered := tool.RenderExecute(res, t.h.ropts.Limits)
		out = llm.ToolResult{CallID: c.ID, Name: c.Name, Text: rendered.Text, Images: rendered.Images, IsError: rendered.IsError}
		if t.outputs {
			outs := t.ciOutputs(res, ci.ID)
			ci.Outputs = &outs
		}
	}
	t.resp.Output[idx] = ci
	t.ev.send("response.code_interpreter_call.completed", map[string]any{"output_index": idx, "item_id": ci.ID})
	t.ev.send("response.output_item.done", map[string]any{"output_index": idx, "item": ci})
	return out
}

// ciOutputs are a run's outputs as OpenAI gives them: the text as logs, each image as a
// file in the container with a URL the client fetches with its key.
func (t *turn) ciOutputs(res *api.ExecuteResult, callID string) []ciOutput {
	var logs strings.Builder
	outs := []ciOutput{}
	n := 0
	for _, o := range res.Outputs {
		switch {
		case o.Type == api.OutputStream:
			logs.WriteString(o.Text)
		case o.Type == api.OutputError:
			logs.WriteString(strings.Join(o.Traceback, "\n"))
		default:
			if png, ok := o.Data["image/png"].(string); ok {
				b, err := base64.StdEncoding.DecodeString(png)
				if err != nil {
					continue
				}
				rel := fmt.Sprintf("outputs/%s_%d.png", callID, n)
				n++
				if _, err := t.h.m.PutFile(t.ctx, t.cont, rel, bytes.NewReader(b)); err != nil {
					continue
				}
				outs = append(outs, ciOutput{Type: "image", URL: t.baseURL() + "/v1/containers/" + containerPrefix + t.cont + "/files/" + cfileID(rel) + "/content"})
			} else if s, ok := o.Data["text/plain"].(string); ok {
				logs.WriteString(s + "\n")
			}
		}
	}
	if logs.Len() > 0 {
		outs = append([]ciOutput{{Type: "logs", Logs: logs.String()}}, outs...)
	}
	return outs
}

// baseURL is where the URLs of the answer point (Options.BaseURL): the server's public
// URL behind a proxy that ends TLS, else where the client reached it.
func (t *turn) baseURL() string {
	if t.h.opts.BaseURL != nil {
		return t.h.opts.BaseURL(t.r)
	}
	if t.r.TLS != nil {
		return "https://" + t.r.Host
	}
	return "http://" + t.r.Host
}

// container finds or makes the code interpreter's container: the one the tool names, else
// the previous response's, else a new one (container {type: auto}).
func (t *turn) container() error {
	if t.cont != "" {
		if _, err := t.h.m.Get(t.ctx, t.cont); err == nil {
			return nil
		}
	}
	var named string
	if json.Unmarshal(t.ci.Container, &named) == nil && named != "" {
		id, err := sessionID(named)
		if err != nil {
			return err
		}
		if _, err := t.h.m.Get(t.ctx, id); err != nil {
			return notFound(err, named)
		}
		t.cont = id
		return nil
	}
	var auto struct {
		Type        string   `json:"type"`
		FileIDs     []string `json:"file_ids"`
		MemoryLimit string   `json:"memory_limit"`
	}
	if len(t.ci.Container) > 0 {
		if err := json.Unmarshal(t.ci.Container, &auto); err != nil || auto.Type != "auto" {
			return invalid("tools.container", "a code_interpreter's container is a container id or {\"type\": \"auto\"}")
		}
	}
	create, err := t.h.sessionRequest("code-interpreter-"+t.resp.ID, nil, auto.MemoryLimit, nil)
	if err != nil {
		return err
	}
	var files []storedFile
	for _, id := range auto.FileIDs {
		f, err := t.h.fileOf(t.r, id)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	s, err := t.h.m.Create(t.ctx, create)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := t.h.copyIn(t.r, s.ID, f); err != nil {
			t.h.m.Delete(context.WithoutCancel(t.ctx), s.ID)
			return err
		}
	}
	t.cont = s.ID
	return nil
}

// textItem is the assistant message being written (streamed text deltas).
type textItem struct {
	t    *turn
	idx  int
	id   string
	text strings.Builder
}

func (t *turn) startMessage() *textItem {
	m := &textItem{t: t, idx: len(t.resp.Output), id: newID("msg_")}
	it := respItem{Type: "message", ID: m.id, Role: "assistant", Status: "in_progress", Content: json.RawMessage(`[]`)}
	t.resp.Output = append(t.resp.Output, it)
	t.ev.send("response.output_item.added", map[string]any{"output_index": m.idx, "item": it})
	t.ev.send("response.content_part.added", map[string]any{"output_index": m.idx, "item_id": m.id, "content_index": 0,
		"part": outputText{Type: "output_text", Annotations: []any{}}})
	return m
}

func (m *textItem) delta(d string) {
	m.text.WriteString(d)
	m.t.ev.send("response.output_text.delta", map[string]any{"output_index": m.idx, "item_id": m.id, "content_index": 0, "delta": d})
}

func (m *textItem) done() {
	part := outputText{Type: "output_text", Text: m.text.String(), Annotations: []any{}}
	content, _ := json.Marshal([]outputText{part})
	it := respItem{Type: "message", ID: m.id, Role: "assistant", Status: "completed", Content: content}
	m.t.resp.Output[m.idx] = it
	m.t.ev.send("response.output_text.done", map[string]any{"output_index": m.idx, "item_id": m.id, "content_index": 0, "text": part.Text})
	m.t.ev.send("response.content_part.done", map[string]any{"output_index": m.idx, "item_id": m.id, "content_index": 0, "part": part})
	m.t.ev.send("response.output_item.done", map[string]any{"output_index": m.idx, "item": it})
}

// events writes the Responses API's server-sent events; a nil *events writes nothing.
type events struct {
	w       http.ResponseWriter
	seq     int
	started bool
}

func newEvents(w http.ResponseWriter) *events { return &events{w: w} }

func (e *events) send(typ string, fields map[string]any) {
	if e == nil {
		return
	}
	if !e.started {
		e.w.Header().Set("Content-Type", "text/event-stream")
		e.w.Header().Set("Cache-Control", "no-cache")
		e.w.WriteHeader(http.StatusOK)
		e.started = true
	}
	fields["type"] = typ
	fields["sequence_number"] = e.seq
	e.seq++
	b, _ := json.Marshal(fields)
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", typ, b)
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

// errText is err as a client or a model may read it (errdefs.Public).
func (h *Handler) errText(r *http.Request, err error) string {
	return errdefs.Public(h.log, err, "method", r.Method, "path", r.URL.Path)
}

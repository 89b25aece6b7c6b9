package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/agent"
	"github.com/cellbox/cellbox/internal/conversation"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/tool"
	"github.com/cellbox/cellbox/internal/workspace"
)

// maxAgentSteps bounds max_steps of POST /v1/agent.
const maxAgentSteps = 50

// tools answers GET /v1/tools?format=openai|anthropic|mcp (default openai)&languages=js,r:
// the tool set, with the tools of the languages named (else the server's --tool-languages).
func (s *server) tools(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format == "" {
		format = tool.FormatOpenAI
	}
	o := s.opts.Tools
	o.SessionID = format == tool.FormatMCP // as /mcp lists them
	if l := r.URL.Query().Get("languages"); l != "" {
		o.Languages = nil
		for _, name := range strings.Split(l, ",") {
			if lang, ok := api.LanguageOf(strings.TrimSpace(name)); ok && lang != api.LanguagePython {
				name = lang
			}
			o.Languages = append(o.Languages, name)
		}
		if err := tool.CheckLanguages(o.Languages); err != nil {
			s.writeError(w, r, fmt.Errorf("languages: %s: %w", err.Error(), errdefs.ErrInvalidArgument))
			return
		}
	}
	v, err := tool.Format(tool.Definitions(o), format)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("%s: %w", err.Error(), errdefs.ErrInvalidArgument))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// agent answers POST /v1/agent: the tool-calling loop, in a session, with the server's
// model credentials. With Accept: text/event-stream it streams "text", "call", "output" and
// "step" events (see answer).
func (s *server) agent(w http.ResponseWriter, r *http.Request) {
	var req api.AgentRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	cfg, err := s.agentConfig(&req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Links {
		cfg.Runner = linkingRunner{s.m, s, r}
	}
	created := req.SessionID == ""
	if err := s.startAgent(r.Context(), &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	cfg.SessionID = req.SessionID
	answer(s, w, r, func(send func(string, any)) (*api.AgentResponse, error) {
		if send != nil {
			cfg.Stream = true
			cfg.OnEvent = func(e agent.Event) {
				switch e.Kind {
				case agent.EventText:
					send("text", map[string]string{"text": e.Text})
				case agent.EventCall:
					send("call", map[string]string{"id": e.Call.ID, "tool": e.Call.Name, "code": e.Call.Code})
				case agent.EventOutput:
					send("output", e.Output)
				case agent.EventStep:
					send("step", conversation.Step(*e.Step))
				}
			}
		}
		res, err := runAgent(r.Context(), cfg, &req)
		if err != nil && created {
			// A session made for a request that fails is deleted: the caller never learns its id.
			s.m.Delete(context.WithoutCancel(r.Context()), req.SessionID)
		}
		return res, err
	})
}

// startAgent picks or creates the request's session and uploads its files. A session it
// created is deleted again if the files cannot be placed.
func (s *server) startAgent(ctx context.Context, req *api.AgentRequest) error {
	if req.SessionID != "" {
		if _, err := s.m.Get(ctx, req.SessionID); err != nil {
			return err
		}
		return s.m.PutFiles(ctx, req.SessionID, req.Files)
	}
	sess, err := s.m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		return err
	}
	if err := s.m.PutFiles(ctx, sess.ID, req.Files); err != nil {
		s.m.Delete(context.WithoutCancel(ctx), sess.ID)
		return err
	}
	req.SessionID = sess.ID
	return nil
}

// agentConfig checks the request and picks its provider and model.
func (s *server) agentConfig(req *api.AgentRequest) (agent.Config, error) {
	if strings.TrimSpace(req.Input) == "" {
		return agent.Config{}, fmt.Errorf("input is empty: say what the model should do: %w", errdefs.ErrInvalidArgument)
	}
	if req.MaxSteps < 0 || req.MaxSteps > maxAgentSteps {
		return agent.Config{}, fmt.Errorf("max_steps %d: give 1 to %d (0 or none: %d): %w", req.MaxSteps, maxAgentSteps, agent.DefaultMaxSteps, errdefs.ErrInvalidArgument)
	}
	if s.opts.NewProvider == nil {
		return agent.Config{}, fmt.Errorf("this server has no model provider configured: %w", errdefs.ErrUnavailable)
	}
	p, model, err := s.opts.NewProvider(req.Provider)
	if err != nil {
		return agent.Config{}, err
	}
	if req.Model != "" {
		model = req.Model
	}
	req.Provider, req.Model = p.Name(), model
	return agent.Config{
		Provider: p,
		Model:    model,
		System:   req.System,
		MaxSteps: req.MaxSteps,
		Runner:   s.m,
		Sessions: s.m,
		Tools:    tool.Definitions(s.opts.Tools),
	}, nil
}

func runAgent(ctx context.Context, cfg agent.Config, req *api.AgentRequest) (*api.AgentResponse, error) {
	a, err := agent.New(cfg)
	if err != nil {
		return nil, err
	}
	input := req.Input
	if note := describeInputs(req.Files); note != "" {
		input = note + "\n\n" + input
	}
	turn, err := a.Send(ctx, input)
	if err != nil {
		if ctx.Err() == nil && errdefs.Code(err) == api.CodeInternal {
			// The model API failed: the server cannot do its job right now.
			err = fmt.Errorf("%s: %w", err.Error(), errdefs.ErrUnavailable)
		}
		return nil, err
	}
	res := &api.AgentResponse{
		Output:     turn.Output,
		SessionID:  req.SessionID,
		Steps:      make([]api.AgentStep, 0, len(turn.Steps)),
		Files:      turn.Files,
		StopReason: turn.StopReason,
		Provider:   req.Provider,
		Model:      req.Model,
	}
	if res.Files == nil {
		res.Files = []api.FileChange{}
	}
	for _, st := range turn.Steps {
		res.Steps = append(res.Steps, conversation.Step(st))
	}
	return res, nil
}

// describeInputs tells the model about the request's files (already checked and placed).
func describeInputs(files []api.InputFile) string {
	var descs []string
	for _, f := range files {
		body := []byte(f.Content)
		if f.ContentBase64 != "" {
			body, _ = base64.StdEncoding.DecodeString(f.ContentBase64)
		}
		rel, err := workspace.Clean(f.Path)
		if err != nil {
			continue
		}
		descs = append(descs, agent.DescribeFile(rel, int64(len(body)), bytes.NewReader(body)))
	}
	return agent.FilesNote(descs)
}

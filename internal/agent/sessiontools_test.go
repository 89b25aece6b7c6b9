package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
	"github.com/cellbox/cellbox/internal/tool"
)

// The seed flow, against the stand-ins of the model APIs over HTTP (whose request checks
// take the tool's schema as the real APIs would) and a real session: asked a question, the
// model defines a tool with python in one step and calls it by name in the next; a call
// with bad arguments comes back as the validator's message, which the model acts on.

const defineArea = "from cellbox import tool\n\n" +
	"@tool\n" +
	"def area(w: float, h: float) -> float:\n" +
	"    \"\"\"Area of a rectangle of width w and height h.\"\"\"\n" +
	"    return w * h\n"

// seedModel is the stand-in model's script of the seed flow: define area, call it with a
// width that is not a number, then as it should, then answer with what it returned. It
// records what it was offered and given, for the test.
type seedModel struct {
	mu      sync.Mutex
	offered [][]tool.Definition // the tools of each request
	results []llm.ToolResult    // the tool result each request carried
}

func (m *seedModel) script(r llmtest.Request) llmtest.Reply {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.offered = append(m.offered, r.Tools)
	var res llm.ToolResult
	if last := r.Messages[len(r.Messages)-1]; len(last.ToolResults) > 0 {
		res = last.ToolResults[0]
	}
	m.results = append(m.results, res)
	switch len(m.offered) {
	case 1:
		args, _ := json.Marshal(map[string]string{"code": defineArea})
		return llmtest.CallTool(tool.Python, string(args))
	case 2:
		return llmtest.CallTool("area", `{"w": "wide", "h": 4.5}`)
	case 3:
		return llmtest.CallTool("area", `{"w": 3, "h": 4.5}`)
	default:
		return llmtest.Text("The area is " + strings.TrimPrefix(res.Text, "Returned: ") + " square metres.")
	}
}

// find is the definition named name, or nil.
func find(defs []tool.Definition, name string) *tool.Definition {
	for i := range defs {
		if defs[i].Name == name {
			return &defs[i]
		}
	}
	return nil
}

func TestSeedFlow(t *testing.T) {
	m := sessiontest.New(t, nil)
	for _, provider := range []string{api.ProviderOpenAI, api.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			model := &seedModel{}
			srv := llmtest.NewOpenAI(t, model.script)
			if provider == api.ProviderAnthropic {
				srv = llmtest.NewAnthropic(t, model.script)
			}
			p, _, err := NewProvider(ProviderConfig{Name: provider, BaseURL: srv.URL, APIKey: srv.Key})
			if err != nil {
				t.Fatal(err)
			}
			var asked []tool.Call
			a := newAgent(t, m, p, func(c *Config) {
				c.Approve = func(ctx context.Context, call tool.Call) (Decision, error) {
					asked = append(asked, call)
					return Run, nil
				}
			})
			turn, err := a.Send(context.Background(), "What is the area of a 3 m by 4.5 m room?")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range srv.Requests() {
				if r.Refused != "" {
					t.Fatalf("the stand-in refused a request: %s", r.Refused)
				}
			}
			// Offered from the step after its definition on, after python and shell, with
			// the schema its signature makes.
			if len(model.offered) != 4 || find(model.offered[0], "area") != nil {
				t.Fatalf("%d requests; the first offered area: %v", len(model.offered), find(model.offered[0], "area") != nil)
			}
			for i, defs := range model.offered[1:] {
				d := find(defs, "area")
				if len(defs) != 3 || defs[0].Name != tool.Python || defs[1].Name != tool.Shell || d == nil {
					t.Fatalf("request %d offered %+v", i+2, defs)
				}
				props, _ := d.InputSchema["properties"].(map[string]any)
				w, _ := props["w"].(map[string]any)
				if d.Description != "Area of a rectangle of width w and height h." || w["type"] != "number" ||
					fmt.Sprint(d.InputSchema["required"]) != "[w h]" {
					t.Errorf("request %d: area = %+v", i+2, d)
				}
			}
			// The bad call reached the model as the validator's message; the good one as
			// its value.
			// (Chat Completions has no error flag: the provider marks the text instead.)
			if bad := model.results[2]; !bad.IsError && !strings.HasPrefix(bad.Text, "Error: ") || !strings.Contains(bad.Text, "area's input schema") || !strings.Contains(bad.Text, "/w") {
				t.Errorf("the bad call's result: %+v", bad)
			}
			if good := model.results[3]; good.IsError || good.Text != "Returned: 13.5" {
				t.Errorf("the call's result: %+v", good)
			}
			if turn.Output != "The area is 13.5 square metres." || turn.StopReason != StopDone {
				t.Errorf("turn = %+v", turn)
			}
			// The steps, and what the approval prompt was shown.
			if len(turn.Steps) != 3 {
				t.Fatalf("steps = %+v", turn.Steps)
			}
			if s := turn.Steps[1]; s.Tool != "area" || s.Code != `{"w":"wide","h":4.5}` || s.Error == "" || s.Result != nil {
				t.Errorf("the bad step = %+v", s)
			}
			if s := turn.Steps[2]; s.Tool != "area" || s.Code != `{"w":3,"h":4.5}` || s.Result == nil || s.Result.Tool == nil ||
				!s.Result.Tool.HasValue || s.Result.Tool.Value != 13.5 {
				t.Errorf("the call's step = %+v", s)
			}
			if len(asked) != 3 || asked[2].Name != "area" || asked[2].Code != `{"w":3,"h":4.5}` {
				t.Errorf("asked %+v", asked)
			}
		})
	}
}

// A declined call of a session tool does not run it; a runner that cannot list a session's
// tools offers python and shell only.
func TestSessionToolDeclinedAndRunnerWithoutTools(t *testing.T) {
	m := sessiontest.New(t, nil)
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		switch n {
		case 1:
			return callPython("c1", defineArea+"calls = []\n"), nil
		case 2:
			return &llm.Response{Message: llm.Message{ToolCalls: []llm.ToolCall{{ID: "c2", Name: "area", Input: json.RawMessage(`{"w":1,"h":2}`)}}}, StopReason: llm.StopToolUse}, nil
		}
		return answer("ok"), nil
	}}
	a := newAgent(t, m, p, func(c *Config) {
		c.Approve = func(ctx context.Context, call tool.Call) (Decision, error) {
			if call.Name == "area" {
				return Decline, nil
			}
			return Run, nil
		}
	})
	turn, err := a.Send(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	if len(turn.Steps) != 2 || !turn.Steps[1].Declined || turn.Steps[1].Tool != "area" || turn.Steps[1].Result != nil {
		t.Fatalf("steps = %+v", turn.Steps)
	}
	if got := lastResults(t, p.requests()[2])[0]; !strings.Contains(got.Text, "declined") {
		t.Errorf("the model got %q", got.Text)
	}

	// The same session through a runner that is python and shell only.
	p2 := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		if len(req.Tools) != 2 {
			return nil, fmt.Errorf("offered %d tools", len(req.Tools))
		}
		if n == 1 {
			return &llm.Response{Message: llm.Message{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "area", Input: json.RawMessage(`{}`)}}}, StopReason: llm.StopToolUse}, nil
		}
		return answer(lastResults(t, req)[0].Text), nil
	}}
	b, err := New(Config{Provider: p2, Runner: pythonOnly{m}, SessionID: a.cfg.SessionID})
	if err != nil {
		t.Fatal(err)
	}
	turn, err = b.Send(context.Background(), "go")
	if err != nil || !strings.Contains(turn.Output, `there is no tool "area"`) {
		t.Fatalf("turn %+v, %v", turn, err)
	}
}

// pythonOnly hides the session manager's tools.
type pythonOnly struct{ r tool.Runner }

func (p pythonOnly) Execute(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	return p.r.Execute(ctx, id, req, onOutput)
}

func (p pythonOnly) Command(ctx context.Context, id string, req api.CommandRequest) (*api.CommandResult, error) {
	return p.r.Command(ctx, id, req)
}

// The system prompt says how to make a tool.
func TestSystemPromptSaysHowToMakeATool(t *testing.T) {
	for _, want := range []string{"from cellbox import tool", "@tool\n", "def area(w: float, h: float) -> float:", `"""`,
		"next step", "by name", "@tool(save=True) proposes", "next sessions", "the user decides", "Restarting the kernel drops"} {
		if !strings.Contains(DefaultSystem, want) {
			t.Errorf("the system prompt lacks %q", want)
		}
	}
}

// builtinNamed is a runner whose session lists tools named like built-in ones beside area
// (as if they slipped past the session layer, which refuses them), and records what runs.
type builtinNamed struct {
	mu       sync.Mutex
	executed []api.ExecuteRequest
	called   []string
}

func (r *builtinNamed) Execute(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.executed = append(r.executed, req)
	return &api.ExecuteResult{Status: api.StatusOK, Outputs: []api.Output{}, Files: []api.FileChange{}}, nil
}

func (r *builtinNamed) Command(ctx context.Context, id string, req api.CommandRequest) (*api.CommandResult, error) {
	return nil, fmt.Errorf("no command expected")
}

func (r *builtinNamed) Tools(ctx context.Context, id string) ([]api.SessionTool, error) {
	var out []api.SessionTool
	for _, name := range []string{"bash", "Bash", "PYTHON", "r", "Shell", "area"} {
		out = append(out, api.SessionTool{Name: name, Description: "a session's " + name, InputSchema: map[string]any{"type": "object"}})
	}
	return out, nil
}

func (r *builtinNamed) CallTool(ctx context.Context, id, name string, req api.ToolCallRequest, onOutput func(api.Output)) (*api.ToolCallResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.called = append(r.called, name)
	return &api.ToolCallResult{Status: api.StatusOK, Outputs: []api.Output{}, Files: []api.FileChange{}}, nil
}

// TestAttackSessionToolNamedLikeBuiltin: a session's tools named like built-in ones, in
// any case, are never offered; a call of such a name runs the built-in when it is offered
// (the languages on) and nothing otherwise, never the session's tool.
func TestAttackSessionToolNamedLikeBuiltin(t *testing.T) {
	for _, langs := range [][]string{nil, {api.LanguageBash, api.LanguageR}} {
		t.Run(fmt.Sprintf("languages %v", langs), func(t *testing.T) {
			r := &builtinNamed{}
			calls := []llm.ToolCall{
				{ID: "c1", Name: "bash", Input: json.RawMessage(`{"code":"echo built-in"}`)},
				{ID: "c2", Name: "r", Input: json.RawMessage(`{"code":"1 + 1"}`)},
				{ID: "c3", Name: "PYTHON", Input: json.RawMessage(`{"code":"1"}`)},
			}
			p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
				if n == 1 {
					return &llm.Response{Message: llm.Message{ToolCalls: calls}, StopReason: llm.StopToolUse}, nil
				}
				return answer("done"), nil
			}}
			a, err := New(Config{Provider: p, Runner: r, SessionID: "s1", Tools: tool.Definitions(tool.Options{Languages: langs})})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Send(context.Background(), "go"); err != nil {
				t.Fatal(err)
			}
			var offered []string
			for _, d := range p.requests()[0].Tools {
				offered = append(offered, d.Name)
				if strings.HasPrefix(d.Description, "a session's") && d.Name != "area" {
					t.Errorf("the session's %s is offered", d.Name)
				}
			}
			if want := strings.Join(append(append([]string{"python", "shell"}, langs...), "area"), ","); strings.Join(offered, ",") != want {
				t.Errorf("offered %v, want %s", offered, want)
			}
			if len(r.called) != 0 {
				t.Errorf("the session's tools %v were called", r.called)
			}
			results := lastResults(t, p.requests()[1])
			if langs == nil {
				if len(r.executed) != 0 {
					t.Errorf("ran %+v with no language tools offered", r.executed)
				}
			} else if len(r.executed) != 2 || r.executed[0].Language != "bash" || r.executed[0].Code != "echo built-in" || r.executed[1].Language != "r" {
				t.Errorf("ran %+v, want the bash and r built-ins", r.executed)
			}
			for i, res := range results {
				builtin := i < 2 && langs != nil
				if builtin == (res.IsError || strings.Contains(res.Text, "no tool")) {
					t.Errorf("%s: %+v", calls[i].Name, res)
				}
			}
		})
	}
}

package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// runner is python and shell only; toolRunner can call session tools too. Run's routing is
// tested here; the real calls are tested with a real session in package agent.
type runner struct{}

func (runner) Execute(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	return &api.ExecuteResult{Status: api.StatusOK, Outputs: []api.Output{{Type: api.OutputStream, Name: "stdout", Text: strings.TrimSpace("ran " + req.Language + " " + req.Code)}}}, nil
}

func (runner) Command(ctx context.Context, id string, req api.CommandRequest) (*api.CommandResult, error) {
	return &api.CommandResult{Status: api.StatusOK, Stdout: strings.Join(req.Cmd, " ")}, nil
}

type toolRunner struct {
	runner
	got api.ToolCallRequest
}

func (r *toolRunner) Tools(ctx context.Context, id string) ([]api.SessionTool, error) {
	return nil, nil
}

func (r *toolRunner) CallTool(ctx context.Context, id, name string, req api.ToolCallRequest, onOutput func(api.Output)) (*api.ToolCallResult, error) {
	r.got = req
	if name != "area" {
		return nil, fmt.Errorf("session %s has no tool %q: %w", id, name, errdefs.ErrNotFound)
	}
	onOutput(api.Output{Type: api.OutputStream, Name: "stdout", Text: "computing\n"})
	return &api.ToolCallResult{Status: api.StatusOK, HasValue: true, Value: 6.0}, nil
}

var _ ToolRunner = (*toolRunner)(nil)

func TestRunSessionTool(t *testing.T) {
	r := &toolRunner{}
	var seen []api.Output
	res, err := Run(context.Background(), r, "s1", Call{Name: "area", Code: `{"w":2,"h":3}`}, RenderLimits{}, func(o api.Output) { seen = append(seen, o) })
	if err != nil {
		t.Fatal(err)
	}
	if string(r.got.Arguments) != `{"w":2,"h":3}` || !json.Valid(r.got.Arguments) {
		t.Errorf("arguments sent: %s", r.got.Arguments)
	}
	if res.Text != "Returned: 6" || res.Tool == nil || res.Tool.Value != 6.0 || res.Execute != nil || len(seen) != 1 {
		t.Errorf("result %+v, outputs seen %d", res, len(seen))
	}
	// The server's refusal is the caller's to tell the model.
	if _, err := Run(context.Background(), r, "s1", Call{Name: "volume", Code: `{}`}, RenderLimits{}, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown tool: err = %v", err)
	}
	// python and shell still go where they went.
	if res, err := Run(context.Background(), r, "s1", Call{Name: Python, Code: "1"}, RenderLimits{}, nil); err != nil || res.Text != "ran  1" && res.Text != "ran 1" {
		t.Errorf("python: %+v, %v", res, err)
	}
}

func TestRunSessionToolWithoutToolRunner(t *testing.T) {
	_, err := Run(context.Background(), runner{}, "s1", Call{Name: "area", Code: `{}`}, RenderLimits{}, nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "only python and shell") {
		t.Errorf("err = %v", err)
	}
}

// A language's tool is offered when asked for, decoded, and run in its language.
func TestLanguageTools(t *testing.T) {
	defs := Definitions(Options{Languages: []string{api.LanguageJavaScript, api.LanguageBash, "cobol"}})
	if len(defs) != 4 || defs[2].Name != "javascript" || defs[3].Name != "bash" || !strings.Contains(defs[3].Description, "stateful shell") {
		t.Fatalf("definitions: %+v", defs)
	}
	if err := CheckLanguages([]string{"r", "cobol"}); err == nil || !strings.Contains(err.Error(), "cobol") {
		t.Errorf("CheckLanguages: %v", err)
	}
	c, err := Decode("javascript", json.RawMessage(`{"code":"1 + 1"}`), defs...)
	if err != nil || c.Code != "1 + 1" || c.IsSessionTool() {
		t.Fatalf("decode: %+v %v", c, err)
	}
	if _, err := Decode("bash", json.RawMessage(`{"code":""}`), defs...); err == nil || !strings.Contains(err.Error(), "the bash tool") {
		t.Errorf("empty code: %v", err)
	}
	// A language not offered is no tool.
	if c, err := Decode("r", json.RawMessage(`{"code":"1"}`), defs...); err == nil || !strings.Contains(err.Error(), `no tool "r"; the tools are "python", "shell", "javascript", "bash"`) {
		t.Errorf("r, not offered: %+v, %v", c, err)
	}
	res, err := Run(context.Background(), runner{}, "s1", c, RenderLimits{}, nil)
	if err != nil || !strings.Contains(res.Text, "ran javascript 1 + 1") || res.Execute == nil {
		t.Errorf("run: %+v %v", res, err)
	}
}

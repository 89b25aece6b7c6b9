package httpapi_test

// The seed flow through POST /v1/agent and a conversation: the stand-in model, asked a
// question, defines a tool with python in one step and calls it by name in the next.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/tool"
)

const defineArea = "from cellbox import tool\n\n" +
	"@tool\n" +
	"def area(w: float, h: float) -> float:\n" +
	"    \"\"\"Area of a rectangle of width w and height h.\"\"\"\n" +
	"    return w * h\n"

// seedModel defines area, calls it with a width that is not a number, then as it should,
// then answers with what it returned; it keeps what each request offered and carried.
type seedModel struct {
	mu      sync.Mutex
	offered [][]tool.Definition
	results []string // the text of the tool result each request carried
}

func (m *seedModel) script(r llmtest.Request) llmtest.Reply {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.offered = append(m.offered, r.Tools)
	res, _ := toolResult(r)
	m.results = append(m.results, res.Text)
	switch len(m.offered) {
	case 1:
		args, _ := json.Marshal(map[string]string{"code": defineArea})
		return llmtest.CallTool("python", string(args))
	case 2:
		return llmtest.CallTool("area", `{"w": "wide", "h": 4.5}`)
	case 3:
		return llmtest.CallTool("area", `{"w": 3, "h": 4.5}`)
	case 4:
		return llmtest.Text("The area is " + strings.TrimPrefix(res.Text, "Returned: ") + " square metres.")
	}
	return llmtest.Fail(http.StatusBadRequest, fmt.Sprintf("unexpected request %d", len(m.offered)))
}

// check asserts what the model was offered and given along the flow.
func (m *seedModel) check(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.offered) != 4 || len(m.offered[0]) != 2 {
		t.Fatalf("%d requests, the first offering %d tools", len(m.offered), len(m.offered[0]))
	}
	for i, defs := range m.offered[1:] {
		if len(defs) != 3 || defs[0].Name != "python" || defs[1].Name != "shell" || defs[2].Name != "area" {
			t.Fatalf("request %d offered %+v", i+2, defs)
		}
		schema, _ := json.Marshal(defs[2].InputSchema)
		for _, want := range []string{`"w":{"type":"number"}`, `"required":["w","h"]`, `"additionalProperties":false`} {
			if !strings.Contains(string(schema), want) {
				t.Errorf("request %d: area's schema lacks %s: %s", i+2, want, schema)
			}
		}
		if defs[2].Description != "Area of a rectangle of width w and height h." {
			t.Errorf("request %d: area's description %q", i+2, defs[2].Description)
		}
	}
	if !strings.Contains(m.results[2], "area's input schema") || !strings.Contains(m.results[2], "/w") {
		t.Errorf("the bad call's result: %q", m.results[2])
	}
	if m.results[3] != "Returned: 13.5" {
		t.Errorf("the call's result: %q", m.results[3])
	}
}

// checkSteps asserts the steps of the flow, as the API shows them.
func checkSteps(t *testing.T, steps []api.AgentStep) {
	t.Helper()
	if len(steps) != 3 || steps[0].Tool != "python" || steps[0].Result == nil {
		t.Fatalf("steps %+v", steps)
	}
	if s := steps[1]; s.Tool != "area" || s.Code != `{"w":"wide","h":4.5}` || !strings.Contains(s.Error, "input schema") || s.ToolResult != nil {
		t.Errorf("the bad step %+v", s)
	}
	if s := steps[2]; s.Tool != "area" || s.Code != `{"w":3,"h":4.5}` || s.ToolResult == nil || s.ToolResult.Status != api.StatusOK ||
		!s.ToolResult.HasValue || s.ToolResult.Value != 13.5 {
		t.Errorf("the call's step %+v", s)
	}
}

func TestAgentSeedFlow(t *testing.T) {
	c := newClient(t)
	model := &seedModel{}
	useAnthropic(t, model.script)
	var res api.AgentResponse
	if st := c.do("POST", "/v1/agent", api.AgentRequest{Input: "What is the area of a 3 m by 4.5 m room?", Provider: "anthropic"}, &res); st != 200 {
		t.Fatalf("status %d: %+v", st, res)
	}
	model.check(t)
	checkSteps(t, res.Steps)
	if res.Output != "The area is 13.5 square metres." || res.StopReason != api.AgentDone {
		t.Errorf("response %+v", res)
	}
	// The tool stays in the session, for the next request or a direct call.
	var list api.SessionToolList
	if st := c.do("GET", "/v1/sessions/"+res.SessionID+"/tools", nil, &list); st != 200 || len(list.Tools) != 1 || list.Tools[0].Name != "area" {
		t.Errorf("session tools: %d %+v", st, list)
	}
}

// In a conversation that asks first, the call of area waits for approval, named with its
// arguments, as a python call does.
func TestConversationSeedFlow(t *testing.T) {
	c := newClient(t)
	model := &seedModel{}
	useOpenAI(t, model.script)
	conv := c.conversation(api.ConversationRequest{Provider: "openai", Approve: api.ApproveAsk})
	events, done := c.stream(conv.ID, api.MessageRequest{Input: "What is the area of a 3 m by 4.5 m room?"})
	defer done()
	var calls []string
	_, turn := turnOf(t, events, func(ev sseEvent) {
		if ev.name != "call" {
			return
		}
		var call struct{ ID, Tool, Code, Approval string }
		json.Unmarshal([]byte(ev.data), &call)
		var cv api.Conversation
		c.do("GET", "/v1/conversations/"+conv.ID, nil, &cv)
		if cv.Waiting == nil || cv.Waiting.Tool != call.Tool || cv.Waiting.Code != call.Code {
			t.Errorf("waiting %+v for call %+v", cv.Waiting, call)
		}
		calls = append(calls, call.Tool+" "+call.Code)
		if st := c.do("POST", "/v1/conversations/"+conv.ID+"/approvals", api.ApprovalRequest{CallID: call.ID, Decision: api.DecisionRun}, nil); st != 204 {
			t.Errorf("approve: %d", st)
		}
	})
	model.check(t)
	checkSteps(t, turn.Steps)
	if turn.Output != "The area is 13.5 square metres." {
		t.Errorf("turn %+v", turn)
	}
	if len(calls) != 3 || calls[2] != `area {"w":3,"h":4.5}` {
		t.Errorf("calls %q", calls)
	}
	// GET shows the turn as it streamed.
	var cv api.Conversation
	if st := c.do("GET", "/v1/conversations/"+conv.ID, nil, &cv); st != 200 || len(cv.Turns) != 1 {
		t.Fatalf("conversation: %d %+v", st, cv)
	}
	checkSteps(t, cv.Turns[0].Steps)
}

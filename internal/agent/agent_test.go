package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
	"github.com/cellbox/cellbox/internal/tool"
)

// The loop's logic is tested here against a scripted provider in this process and a real
// session (IPython on the local-unsafe backend). The providers' wire formats, over HTTP, are
// tested with the stand-in servers of llmtest in cmd/cellbox and internal/httpapi.

// scripted is a provider that answers with a function of the request and records requests.
type scripted struct {
	mu    sync.Mutex
	reqs  []llm.Request
	reply func(n int, req llm.Request) (*llm.Response, error)
}

func (p *scripted) Name() string { return "scripted" }

func (p *scripted) Complete(ctx context.Context, req llm.Request, onText func(string)) (*llm.Response, error) {
	p.mu.Lock()
	req.Messages = append([]llm.Message(nil), req.Messages...)
	p.reqs = append(p.reqs, req)
	n := len(p.reqs)
	p.mu.Unlock()
	resp, err := p.reply(n, req)
	if err == nil && onText != nil && resp.Message.Text != "" {
		onText(resp.Message.Text)
	}
	return resp, err
}

func (p *scripted) requests() []llm.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]llm.Request(nil), p.reqs...)
}

func answer(text string) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Text: text}, StopReason: llm.StopEnd}
}

func callPython(id, code string) *llm.Response {
	args, _ := json.Marshal(map[string]string{"code": code})
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: id, Name: tool.Python, Input: args}}}, StopReason: llm.StopToolUse}
}

// lastResults are the tool results a request carries in its last message.
func lastResults(t *testing.T, req llm.Request) []llm.ToolResult {
	t.Helper()
	last := req.Messages[len(req.Messages)-1]
	if last.Role != llm.RoleUser || len(last.ToolResults) == 0 {
		t.Fatalf("the last message is not tool results: %+v", last)
	}
	return last.ToolResults
}

func newAgent(t *testing.T, m *session.Manager, p llm.Provider, mod func(*Config)) *Agent {
	t.Helper()
	s, err := m.Create(context.Background(), api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Provider: p, Model: "test-model", Runner: m, SessionID: s.ID}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRetryAfterAnError(t *testing.T) {
	m := sessiontest.New(t, nil)
	var seen []string
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		switch n {
		case 1:
			if req.Model != "test-model" || req.System != DefaultSystem || len(req.Tools) != 2 {
				return nil, fmt.Errorf("bad request: model %q, %d tools", req.Model, len(req.Tools))
			}
			return callPython("c1", "x = 10\nx / 0"), nil
		case 2:
			r := lastResults(t, req)[0]
			seen = append(seen, r.Text)
			if !r.IsError || r.CallID != "c1" || !strings.Contains(r.Text, "ZeroDivisionError") {
				return nil, fmt.Errorf("the model did not get the error: %+v", r)
			}
			return callPython("c2", "print(x / 2)"), nil
		default:
			r := lastResults(t, req)[0]
			seen = append(seen, r.Text)
			return answer("x / 2 is " + strings.TrimSpace(r.Text)), nil
		}
	}}
	var events []string
	a := newAgent(t, m, p, func(c *Config) {
		c.Stream = true
		c.OnEvent = func(e Event) { events = append(events, e.Kind) }
	})
	turn, err := a.Send(context.Background(), "what is x/2?")
	if err != nil {
		t.Fatal(err)
	}
	if turn.Output != "x / 2 is 5.0" || turn.StopReason != StopDone || len(turn.Steps) != 2 {
		t.Fatalf("turn = %+v (the model saw %q)", turn, seen)
	}
	if s := turn.Steps[0]; s.Tool != tool.Python || s.Result == nil || s.Result.Execute.Status != api.StatusError {
		t.Errorf("step 1 = %+v", s)
	}
	want := "call,output,step,call,output,step,text" // the traceback is an output too
	if got := strings.Join(events, ","); got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}

func TestImageReachesTheModel(t *testing.T) {
	m := sessiontest.New(t, nil)
	var got llm.ToolResult
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		if n == 1 {
			return callPython("c1", "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.savefig('line.png')\nplt.show()"), nil
		}
		got = lastResults(t, req)[0]
		return answer("a line"), nil
	}}
	turn, err := newAgent(t, m, p, nil).Send(context.Background(), "plot")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Images) != 1 || got.Images[0].MIME != "image/png" {
		t.Fatalf("images the model got: %d (%s)", len(got.Images), got.Text)
	}
	png, err := base64.StdEncoding.DecodeString(got.Images[0].Data)
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
		t.Errorf("not a PNG: %v", err)
	}
	if !strings.Contains(got.Text, "/mnt/data/line.png (created") {
		t.Errorf("the file is not listed for the model: %s", got.Text)
	}
	if len(turn.Files) != 1 || turn.Files[0].Path != "/mnt/data/line.png" || turn.Files[0].Change != api.ChangeCreated {
		t.Errorf("turn files = %+v", turn.Files)
	}
}

func TestDecline(t *testing.T) {
	m := sessiontest.New(t, nil)
	var got llm.ToolResult
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		if n == 1 {
			return callPython("c1", "open('should-not-exist', 'w').write('x')"), nil
		}
		got = lastResults(t, req)[0]
		return answer("ok, I won't"), nil
	}}
	var asked []tool.Call
	a := newAgent(t, m, p, func(c *Config) {
		c.Approve = func(ctx context.Context, call tool.Call) (Decision, error) {
			asked = append(asked, call)
			return Decline, nil
		}
	})
	turn, err := a.Send(context.Background(), "write a file")
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || !strings.Contains(asked[0].Code, "should-not-exist") || asked[0].ID != "c1" {
		t.Errorf("asked %+v", asked)
	}
	if !strings.Contains(got.Text, "declined") || len(turn.Steps) != 1 || !turn.Steps[0].Declined || turn.Steps[0].Result != nil {
		t.Errorf("model got %q; steps %+v", got.Text, turn.Steps)
	}
	list, err := m.ListFiles(context.Background(), a.cfg.SessionID, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Files) != 0 {
		t.Errorf("declined code ran: %+v", list.Files)
	}
}

func TestStopThenGoOn(t *testing.T) {
	m := sessiontest.New(t, nil)
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		switch n {
		case 1:
			r := callPython("c1", "1")
			r.Message.ToolCalls = append(r.Message.ToolCalls, llm.ToolCall{ID: "c2", Name: tool.Python, Input: json.RawMessage(`{"code":"2"}`)})
			return r, nil
		default:
			// The stopped turn's results and the new question share one user message.
			last := req.Messages[len(req.Messages)-1]
			if len(last.ToolResults) != 2 || !strings.Contains(last.ToolResults[1].Text, "stopped") || last.Text != "something else" {
				return nil, fmt.Errorf("bad history: %+v", last)
			}
			return answer("sure"), nil
		}
	}}
	a := newAgent(t, m, p, func(c *Config) {
		c.Approve = func(context.Context, tool.Call) (Decision, error) { return Stop, nil }
	})
	turn, err := a.Send(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	if turn.StopReason != StopStopped || len(turn.Steps) != 1 || len(p.requests()) != 1 {
		t.Fatalf("turn = %+v after %d requests", turn, len(p.requests()))
	}
	turn, err = a.Send(context.Background(), "something else")
	if err != nil || turn.Output != "sure" {
		t.Fatalf("turn = %+v, %v", turn, err)
	}
}

func TestStepLimit(t *testing.T) {
	m := sessiontest.New(t, nil)
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		if req.NoToolCalls {
			return answer("I ran out of steps"), nil
		}
		return callPython(fmt.Sprint("c", n), fmt.Sprintf("print(%d)", n)), nil
	}}
	turn, err := newAgent(t, m, p, func(c *Config) { c.MaxSteps = 3 }).Send(context.Background(), "loop forever")
	if err != nil {
		t.Fatal(err)
	}
	reqs := p.requests()
	if turn.StopReason != StopStepLimit || len(turn.Steps) != 3 || len(reqs) != 4 || turn.Output != "I ran out of steps" {
		t.Fatalf("turn = %+v after %d requests", turn, len(reqs))
	}
	last := reqs[3].Messages[len(reqs[3].Messages)-1]
	if !strings.Contains(last.Text, "all 3 tool calls") || !reqs[3].NoToolCalls || reqs[2].NoToolCalls {
		t.Errorf("the last request does not say the limit was reached: %q", last.Text)
	}
}

func TestStepLimitIgnoresCallsInTheFinalAnswer(t *testing.T) {
	m := sessiontest.New(t, nil)
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		r := callPython(fmt.Sprint("c", n), "1") // a model that calls tools even when told not to
		r.Message.Text = fmt.Sprint("attempt ", n)
		return r, nil
	}}
	a := newAgent(t, m, p, func(c *Config) { c.MaxSteps = 1 })
	turn, err := a.Send(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	if turn.StopReason != StopStepLimit || turn.Output != "attempt 2" || len(turn.Steps) != 1 {
		t.Fatalf("turn = %+v", turn)
	}
	for _, msg := range a.history {
		if len(msg.ToolCalls) > 0 && msg.Text == "attempt 2" {
			t.Error("an unanswered tool call was kept in the history")
		}
	}
}

func TestBadCalls(t *testing.T) {
	m := sessiontest.New(t, nil)
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		if n == 1 {
			return &llm.Response{Message: llm.Message{ToolCalls: []llm.ToolCall{
				{ID: "a", Name: "rm_rf", Input: json.RawMessage(`{}`)},
				{ID: "b", Name: tool.Python, Input: json.RawMessage(`{"source":"1"}`)},
				{ID: "c", Name: tool.Shell, Input: json.RawMessage(`{"command":"echo hi; exit 3"}`)},
			}}, StopReason: llm.StopToolUse}, nil
		}
		rs := lastResults(t, req)
		var b strings.Builder
		for _, r := range rs {
			fmt.Fprintf(&b, "%s|%v|%s\n", r.CallID, r.IsError, r.Text)
		}
		return answer(b.String()), nil
	}}
	turn, err := newAgent(t, m, p, nil).Send(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`a|true|there is no tool "rm_rf"`, `b|true|the python tool's arguments`, "c|true|exit code 3\nhi"} {
		if !strings.Contains(turn.Output, want) {
			t.Errorf("the model was not told %q:\n%s", want, turn.Output)
		}
	}
	if len(turn.Steps) != 3 || turn.Steps[0].Error == "" || turn.Steps[2].Result.Command.ExitCode != 3 {
		t.Errorf("steps = %+v", turn.Steps)
	}
}

func TestProviderErrorKeepsTheConversation(t *testing.T) {
	m := sessiontest.New(t, nil)
	fail := true
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		if fail {
			return nil, errors.New("openai: 429 Too Many Requests")
		}
		return answer(fmt.Sprint(len(req.Messages), " messages: ", req.Messages[0].Text)), nil
	}}
	a := newAgent(t, m, p, nil)
	if _, err := a.Send(context.Background(), "one"); err == nil || !strings.Contains(err.Error(), "429") {
		t.Fatalf("err = %v", err)
	}
	fail = false
	// The failed request is forgotten, not answered with the next one.
	turn, err := a.Send(context.Background(), "two")
	if err != nil || turn.Output != "1 messages: two" {
		t.Fatalf("turn %+v, %v", turn, err)
	}
}

func TestCanceledTurnLeavesAValidConversation(t *testing.T) {
	m := sessiontest.New(t, nil)
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		if n == 1 {
			return callPython("c1", "1"), nil
		}
		// Every call in the history has its result.
		if len(req.Messages) != 3 || len(req.Messages[2].ToolResults) != 1 || req.Messages[2].ToolResults[0].CallID != "c1" || req.Messages[2].Text != "next" {
			return nil, fmt.Errorf("bad history: %+v", req.Messages)
		}
		return answer("ok"), nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	a := newAgent(t, m, p, func(c *Config) {
		c.Approve = func(ctx context.Context, _ tool.Call) (Decision, error) {
			cancel() // Ctrl-C at the prompt
			return Run, ctx.Err()
		}
	})
	if _, err := a.Send(ctx, "first"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	a.cfg.Approve = nil
	if turn, err := a.Send(context.Background(), "next"); err != nil || turn.Output != "ok" {
		t.Fatalf("turn %+v, %v", turn, err)
	}
}

func TestOldImagesAreDropped(t *testing.T) {
	m := sessiontest.New(t, nil)
	const plot = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"
	var images []int // images in each request's history
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		count := 0
		for _, msg := range req.Messages {
			for _, r := range msg.ToolResults {
				count += len(r.Images)
			}
		}
		images = append(images, count)
		if last := req.Messages[len(req.Messages)-1]; len(last.ToolResults) > 0 {
			return answer("a plot"), nil
		}
		return callPython(fmt.Sprint("c", n), plot), nil
	}}
	a := newAgent(t, m, p, nil)
	for range 5 {
		if _, err := a.Send(context.Background(), "plot again"); err != nil {
			t.Fatal(err)
		}
	}
	// Each turn adds one image; the history keeps those of the latest 3 results.
	want := []int{0, 1, 1, 2, 2, 3, 3, 4, 3, 4}
	if fmt.Sprint(images) != fmt.Sprint(want) {
		t.Errorf("images per request %v, want %v", images, want)
	}
	if !strings.Contains(a.history[2].ToolResults[0].Text, "no longer kept") {
		t.Errorf("the dropped image is not noted: %q", a.history[2].ToolResults[0].Text)
	}
}

// TestHistoryBound: past MaxHistoryBytes the oldest exchanges are dropped whole (a request,
// its calls and their results), so the history still starts with a request of the person's;
// the latest exchange always stays, however big.
func TestHistoryBound(t *testing.T) {
	m := sessiontest.New(t, nil)
	p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) {
		if n%2 == 1 {
			return callPython(fmt.Sprintf("c%d", n), "print('x' * 300)"), nil
		}
		return answer("done"), nil
	}}
	a := newAgent(t, m, p, func(c *Config) { c.MaxHistoryBytes = 1000 })
	for i := range 4 {
		if _, err := a.Send(context.Background(), fmt.Sprintf("request %d %s", i, strings.Repeat("y", 200))); err != nil {
			t.Fatal(err)
		}
	}
	reqs := p.requests()
	last := reqs[len(reqs)-1].Messages
	first := last[0]
	if first.Role != llm.RoleUser || len(first.ToolResults) > 0 || !strings.HasPrefix(first.Text, "request ") {
		t.Fatalf("the history starts with %+v", first)
	}
	if strings.HasPrefix(first.Text, "request 0") || strings.HasPrefix(first.Text, "request 1") {
		t.Errorf("old exchanges kept: the history starts with %.20q (%d messages)", first.Text, len(last))
	}
	// One exchange bigger than the bound is still sent whole.
	a.cfg.MaxHistoryBytes = 10
	if _, err := a.Send(context.Background(), "request 4"); err != nil {
		t.Fatal(err)
	}
	reqs = p.requests()
	if got := reqs[len(reqs)-1].Messages; got[0].Text != "request 4" || len(got) != 3 {
		t.Errorf("with a tiny bound the last request has %d messages, starting %.20q; want the latest exchange's 3", len(got), got[0].Text)
	}
}

// netSessions answers for the session with the network policy of the moment.
type netSessions struct {
	mu  sync.Mutex
	net api.Network
}

func (s *netSessions) Get(ctx context.Context, id string) (*api.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &api.Session{ID: id, Network: s.net}, nil
}

func (s *netSessions) set(n api.Network) {
	s.mu.Lock()
	s.net = n
	s.mu.Unlock()
}

// The system prompt ends with what the session's code may reach, as its policy is at the
// start of each turn; a custom system prompt gets it too.
func TestSystemPromptTellsTheNetwork(t *testing.T) {
	m := sessiontest.New(t, nil)
	allow := api.Network{Egress: api.EgressAllowlist, Allow: []string{"pypi.org", "*.pythonhosted.org"},
		Secrets: []api.EgressSecret{{Domain: "api.github.com", Headers: map[string]string{"Authorization": api.EgressRedacted}}}}
	tests := []struct {
		name, system string
		turns        []api.Network
		want         [][]string // per turn
	}{
		{"none", "", []api.Network{{Egress: api.EgressNone}},
			[][]string{{DefaultSystem, "no internet access", "pip install"}}},
		{"allowlist, then none", "", []api.Network{allow, {Egress: api.EgressNone}},
			[][]string{{"only pypi.org, *.pythonhosted.org", "403", "api.github.com get their credentials added"}, {"no internet access"}}},
		{"a custom prompt", "Be brief.", []api.Network{{Egress: api.EgressPublic}},
			[][]string{{"Be brief.\n\nNetwork: the code may reach the public internet"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sessions := &netSessions{}
			p := &scripted{reply: func(n int, req llm.Request) (*llm.Response, error) { return answer("ok"), nil }}
			a := newAgent(t, m, p, func(c *Config) { c.System, c.Sessions = tt.system, sessions })
			for i, n := range tt.turns {
				sessions.set(n)
				if _, err := a.Send(context.Background(), "hello"); err != nil {
					t.Fatal(err)
				}
				sys := p.requests()[i].System
				for _, w := range tt.want[i] {
					if !strings.Contains(sys, w) {
						t.Errorf("turn %d: the system prompt lacks %q:\n%s", i+1, w, sys)
					}
				}
				if strings.Contains(sys, api.EgressRedacted) || strings.Contains(sys, "Authorization") {
					t.Errorf("turn %d: the system prompt names a secret's header:\n%s", i+1, sys)
				}
			}
		})
	}
}

package httpapi_test

// POST /v1/agent and GET /v1/tools end to end: the shared runc server, and stand-in model
// APIs (llmtest) speaking the real Chat Completions and Messages wire formats over HTTP.
// The server finds them through the providers' own variables, as in production.

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/tool"
)

// useOpenAI points the server's openai provider at a stand-in.
func useOpenAI(t *testing.T, script llmtest.Script) *llmtest.Server {
	s := llmtest.NewOpenAI(t, script)
	t.Setenv("OPENAI_BASE_URL", s.URL)
	t.Setenv("OPENAI_API_KEY", s.Key)
	return s
}

func useAnthropic(t *testing.T, script llmtest.Script) *llmtest.Server {
	s := llmtest.NewAnthropic(t, script)
	t.Setenv("ANTHROPIC_BASE_URL", s.URL)
	t.Setenv("ANTHROPIC_API_KEY", s.Key)
	return s
}

// toolResult is the first tool result of a request's last message.
func toolResult(r llmtest.Request) (llm.ToolResult, bool) {
	if len(r.Messages) == 0 {
		return llm.ToolResult{}, false
	}
	last := r.Messages[len(r.Messages)-1]
	if len(last.ToolResults) == 0 {
		return llm.ToolResult{}, false
	}
	return last.ToolResults[0], true
}

func TestAgentAnalysesAFileWithOpenAI(t *testing.T) {
	c := newClient(t)
	data, err := os.ReadFile(sharedData(t))
	if err != nil {
		t.Fatal(err)
	}
	var got llm.ToolResult
	var firstInput string
	code := "import pandas as pd, matplotlib.pyplot as plt\n" +
		"df = pd.read_csv('/mnt/data/traffic_accidents.csv')\nprint(df.shape)\n" +
		"df['accidents'].hist()\nplt.savefig('/mnt/data/hist.png')\nplt.show()"
	llmSrv := useOpenAI(t, func(r llmtest.Request) llmtest.Reply {
		if res, ok := toolResult(r); ok {
			got = res
			return llmtest.Text("The table has 8000 rows; see hist.png.")
		}
		firstInput = r.Messages[0].Text
		args, _ := json.Marshal(map[string]string{"code": code})
		return llmtest.CallTool("python", string(args))
	})
	var res api.AgentResponse
	st := c.do("POST", "/v1/agent", api.AgentRequest{
		Input:    "How many rows are there? Plot the accidents.",
		Provider: "openai",
		Model:    "gpt-test",
		Files:    []api.InputFile{{Path: "traffic_accidents.csv", ContentBase64: base64.StdEncoding.EncodeToString(data)}},
		Links:    true,
	}, &res)
	if st != 200 {
		t.Fatalf("status %d: %+v", st, res)
	}
	// The model was told about the file before it ran anything.
	for _, want := range []string{"/mnt/data/traffic_accidents.csv", "8,000 rows", "accidents, traffic_fine_amount", "How many rows"} {
		if !strings.Contains(firstInput, want) {
			t.Errorf("the first message lacks %q:\n%s", want, firstInput)
		}
	}
	// The real result, text and image, reached the model.
	if !strings.Contains(got.Text, "(8000, 10)") || !strings.Contains(got.Text, "/mnt/data/hist.png (created") || got.IsError {
		t.Errorf("tool result text: %q", got.Text)
	}
	if len(got.Images) != 1 || got.Images[0].MIME != "image/png" {
		t.Fatalf("images the model got: %+v", len(got.Images))
	}
	if png, _ := base64.StdEncoding.DecodeString(got.Images[0].Data); !strings.HasPrefix(string(png), "\x89PNG") {
		t.Error("the image is not a PNG")
	}
	if res.Output != "The table has 8000 rows; see hist.png." || res.StopReason != api.AgentDone || res.Provider != "openai" || res.Model != "gpt-test" {
		t.Errorf("response %+v", res)
	}
	if len(res.Steps) != 1 || res.Steps[0].Code != code || res.Steps[0].Result == nil || res.Steps[0].Result.Status != api.StatusOK {
		t.Fatalf("steps %+v", res.Steps)
	}
	if len(res.Files) != 1 || res.Files[0].Path != "/mnt/data/hist.png" {
		t.Fatalf("files %+v", res.Files)
	}
	// Links asked: the model read the plot's link in the call's result, to hand it on, and
	// the answer has it; it downloads the plot without a key.
	if u := res.Files[0].URL; u == "" || !strings.Contains(got.Text, "link for the user: "+u) {
		t.Errorf("the plot's link %q, in the model's result: %q", u, got.Text)
	} else if resp, err := http.Get(u); err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/png" {
		t.Errorf("the plot's link: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	if reqs := llmSrv.Requests(); len(reqs) != 2 || reqs[0].Model != "gpt-test" || reqs[0].Stream {
		t.Errorf("requests: %d", len(reqs))
	}
	// The session is kept: the plot is there to download, and state goes on.
	resp, err := http.Get(c.url + "/v1/sessions/" + res.SessionID + "/files/hist.png")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("download: %v %v", err, resp.Status)
	}
	resp.Body.Close()
	if out := stdout(c.exec(res.SessionID, "print(len(df))", 0)); out != "8000\n" {
		t.Errorf("state after the agent: %q", out)
	}
}

func TestAgentStreamsARetryWithAnthropic(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	var sawError string
	llmSrv := useAnthropic(t, func(r llmtest.Request) llmtest.Reply {
		res, ok := toolResult(r)
		switch {
		case !ok:
			return llmtest.CallTool("python", `{"code": "x = 6\nx / 0"}`)
		case res.IsError:
			sawError = res.Text
			return llmtest.CallTool("python", `{"code": "print(x * 7)"}`)
		default:
			return llmtest.Text("The answer is " + strings.TrimSpace(res.Text) + ".")
		}
	})
	events, _ := c.postSSE("/v1/agent", []byte(`{"input": "what is x*7?", "provider": "anthropic", "session_id": "`+id+`"}`))
	var kinds []string
	var text strings.Builder
	var res api.AgentResponse
	for ev := range events {
		if len(kinds) == 0 || kinds[len(kinds)-1] != ev.name {
			kinds = append(kinds, ev.name)
		}
		switch ev.name {
		case "text":
			var d struct{ Text string }
			json.Unmarshal([]byte(ev.data), &d)
			text.WriteString(d.Text)
		case "result":
			json.Unmarshal([]byte(ev.data), &res)
		case "error":
			t.Fatalf("error event: %s", ev.data)
		}
	}
	if !strings.Contains(sawError, "ZeroDivisionError") {
		t.Errorf("the model did not get the exception: %q", sawError)
	}
	if res.Output != "The answer is 42." || text.String() != res.Output || len(res.Steps) != 2 || res.SessionID != id {
		t.Errorf("result %+v (streamed text %q)", res, text.String())
	}
	if res.Steps[0].Result.Status != api.StatusError || res.Steps[1].Result.Status != api.StatusOK {
		t.Errorf("statuses %s, %s", res.Steps[0].Result.Status, res.Steps[1].Result.Status)
	}
	want := "call,output,step,call,output,step,text,result"
	if got := strings.Join(kinds, ","); got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	for _, r := range llmSrv.Requests() {
		if !r.Stream {
			t.Error("a request was not streamed")
		}
	}
}

func TestAgentStepLimit(t *testing.T) {
	c := newClient(t)
	llmSrv := useOpenAI(t, func(r llmtest.Request) llmtest.Reply {
		if r.ToolChoice == "none" {
			return llmtest.Text("I could not finish.")
		}
		return llmtest.CallTool("python", `{"code": "print('again')"}`)
	})
	var res api.AgentResponse
	if st := c.do("POST", "/v1/agent", api.AgentRequest{Input: "loop", Provider: "openai", MaxSteps: 2}, &res); st != 200 {
		t.Fatalf("status %d", st)
	}
	if res.StopReason != api.AgentStepLimit || len(res.Steps) != 2 || res.Output != "I could not finish." {
		t.Errorf("response %+v", res)
	}
	reqs := llmSrv.Requests()
	if len(reqs) != 3 || reqs[2].ToolChoice != "none" {
		t.Fatalf("%d requests", len(reqs))
	}
	last := reqs[2].Messages[len(reqs[2].Messages)-1]
	if !strings.Contains(last.Text, "all 2 tool calls") {
		t.Errorf("the model was not told it reached the limit: %q", last.Text)
	}
}

func TestAgentErrors(t *testing.T) {
	c := newClient(t)
	useOpenAI(t, llmtest.Replies(llmtest.Fail(401, "Incorrect API key provided")))
	tests := []struct {
		name string
		body string
		code int
		msg  string
	}{
		{"empty input", `{"input": " "}`, 400, "input is empty"},
		{"unknown provider", `{"input": "x", "provider": "gemini"}`, 400, "gemini"},
		{"too many steps", `{"input": "x", "max_steps": 500}`, 400, "max_steps"},
		{"unknown session", `{"input": "x", "session_id": "nope"}`, 404, "nope"},
		{"bad file", `{"input": "x", "files": [{"path": "../etc/passwd", "content": "x"}]}`, 400, "files[0].path"},
		{"unknown field", `{"input": "x", "temperature": 2}`, 400, "temperature"},
		{"model API refuses the key", `{"input": "x", "provider": "openai"}`, 503, "OPENAI_API_KEY"},
	}
	sessions := func() int {
		var l api.SessionList
		c.do("GET", "/v1/sessions", nil, &l)
		return len(l.Sessions)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := sessions()
			var e api.ErrorBody
			if st := c.do("POST", "/v1/agent", tt.body, &e); st != tt.code || !strings.Contains(e.Error.Message, tt.msg) {
				t.Errorf("status %d %+v, want %d with %q", st, e.Error, tt.code, tt.msg)
			}
			if after := sessions(); after != before {
				t.Errorf("a failed request left %d session(s) behind", after-before)
			}
		})
	}
}

// A web page must not reach the API: not across origins, and not by DNS rebinding.
func TestBrowserRequestsRefused(t *testing.T) {
	c := newClient(t)
	tests := []struct {
		name, method, path string
		header             map[string]string
		status             int
	}{
		{"cross-site fetch", "POST", "/v1/agent", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"foreign origin", "POST", "/v1/execute", map[string]string{"Origin": "http://evil.example"}, 403},
		{"rebound host", "GET", "/v1/sessions", map[string]string{"Host": "evil.example:8080"}, 403},
		{"rebound host, MCP", "POST", "/mcp", map[string]string{"Host": "evil.example:8080"}, 403},
		{"cross-site read of a safe method", "GET", "/healthz", map[string]string{"Sec-Fetch-Site": "cross-site"}, 200},
		{"localhost by name", "GET", "/healthz", map[string]string{"Host": "localhost:8080"}, 200},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, c.url+tt.path, strings.NewReader(`{"code": "1", "input": "x"}`))
		for k, v := range tt.header {
			req.Header.Set(k, v)
		}
		req.Host = req.Header.Get("Host")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.ErrorBody
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tt.status || (tt.status == 403 && tt.path != "/mcp" && e.Error.Code != api.CodePermissionDenied) {
			t.Errorf("%s: status %d %+v, want %d", tt.name, resp.StatusCode, e.Error, tt.status)
		}
	}
}

func TestTools(t *testing.T) {
	c := newClient(t)
	for _, format := range []string{"", "openai", "anthropic", "mcp"} {
		var v any
		if st := c.do("GET", "/v1/tools?format="+format, nil, &v); st != 200 {
			t.Errorf("format %q: status %d", format, st)
			continue
		}
		b, _ := json.Marshal(v)
		for _, want := range []string{`"python"`, `"shell"`, "/mnt/data", "60 s"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("format %q lacks %s: %s", format, want, b)
			}
		}
		if strings.Contains(string(b), "session_id") != (format == "mcp") {
			t.Errorf("format %q: session_id offered wrongly", format)
		}
	}
	var e api.ErrorBody
	if st := c.do("GET", "/v1/tools?format=gemini", nil, &e); st != 400 || e.Error.Code != api.CodeInvalidArgument {
		t.Errorf("bad format: %d %+v", st, e)
	}
	var defs []tool.Definition
	if st := c.do("GET", "/v1/tools?format=anthropic&languages=js,r", nil, &defs); st != 200 || len(defs) != 4 ||
		defs[2].Name != "javascript" || defs[3].Name != "r" || !strings.Contains(defs[3].Description, "R session") {
		t.Errorf("languages js,r: %d %+v", st, defs)
	}
	if st := c.do("GET", "/v1/tools?languages=cobol", nil, &e); st != 400 || !strings.Contains(e.Error.Message, "cobol") {
		t.Errorf("language cobol: %d %+v", st, e)
	}
}

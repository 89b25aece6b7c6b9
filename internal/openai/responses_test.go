package openai

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/anthropic"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	llmopenai "github.com/cellbox/cellbox/internal/llm/openai"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
)

// responsesServer serves the handler over a real session manager (real IPython) with the
// model played by a Chat Completions stand-in running script.
func responsesServer(t *testing.T, script llmtest.Script) (*httptest.Server, *llmtest.Server) {
	return responsesServerOn(t, wires[0], script)
}

// wire is a model API the server can use upstream: its provider name, its stand-in and its
// provider.
type wire struct {
	name   string
	server func(testing.TB, llmtest.Script) *llmtest.Server
	client func(url, key string) (llm.Provider, error)
}

var wires = []wire{
	{api.ProviderOpenAI, llmtest.NewOpenAI, func(url, key string) (llm.Provider, error) {
		return llmopenai.New(llmopenai.Options{BaseURL: url, APIKey: key})
	}},
	{api.ProviderOpenAIResponses, llmtest.NewResponses, func(url, key string) (llm.Provider, error) {
		return llmopenai.NewResponses(llmopenai.Options{BaseURL: url, APIKey: key})
	}},
	{api.ProviderAnthropic, llmtest.NewAnthropic, func(url, key string) (llm.Provider, error) {
		return anthropic.New(anthropic.Options{BaseURL: url, APIKey: key})
	}},
}

// responsesServerOn is responsesServer with the model on the wire w, the server's default
// provider.
func responsesServerOn(t *testing.T, w wire, script llmtest.Script) (*httptest.Server, *llmtest.Server) {
	return responsesServerWith(t, w, script, nil)
}

// responsesServerWith is responsesServerOn with options changed by mod (if not nil).
func responsesServerWith(t *testing.T, w wire, script llmtest.Script, mod func(*Options)) (*httptest.Server, *llmtest.Server) {
	t.Helper()
	m := sessiontest.New(t, nil)
	model := w.server(t, script)
	opts := Options{StateDir: t.TempDir(), MaxBodyBytes: 1 << 20, MaxUploadBytes: 1 << 20, MaxMemoryMB: 4096,
		Responses: ResponsesOptions{Runner: m, NewProvider: func(name string) (llm.Provider, string, error) {
			if name != "" && name != w.name {
				return nil, "", fmt.Errorf("no provider %s here", name)
			}
			p, err := w.client(model.URL, model.Key)
			return p, "stand-in-model", err
		}}}
	if mod != nil {
		mod(&opts)
	}
	h, err := New(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(session.WithTenant(r.Context(), "alice")))
	}))
	t.Cleanup(srv.Close)
	return srv, model
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// A plot's image URL points where the server's public URL says (behind a proxy that ends
// TLS, the client's key must not go to http://), not at the Host the request came with.
func TestResponsesImageURLs(t *testing.T) {
	script := llmtest.Replies(
		llmtest.CallTool("python", `{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"}`),
		llmtest.Text("Plotted."),
	)
	srv, _ := responsesServerWith(t, wires[0], script, func(o *Options) {
		o.BaseURL = func(*http.Request) string { return "https://cellbox.example.com" }
	})
	st, r := post(t, srv.URL+"/v1/responses", `{"model": "m", "input": "Plot it.",
		"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}], "include": ["code_interpreter_call.outputs"]}`)
	if st != 200 {
		t.Fatalf("%d %v", st, r)
	}
	var urls []string
	for _, o := range r["output"].([]any)[0].(map[string]any)["outputs"].([]any) {
		if o := o.(map[string]any); o["type"] == "image" {
			urls = append(urls, o["url"].(string))
		}
	}
	if len(urls) != 1 || !strings.HasPrefix(urls[0], "https://cellbox.example.com/v1/containers/cntr_") {
		t.Errorf("image URLs %q; want one under https://cellbox.example.com", urls)
	}
}

// TestResponsesCodeInterpreter, with the model behind each wire the server can use.
func TestResponsesCodeInterpreter(t *testing.T) {
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) { testCodeInterpreter(t, w) })
	}
}

func testCodeInterpreter(t *testing.T, w wire) {
	// Turn 1: the model runs code, then answers with its result. Turn 2 (previous_response_id):
	// it uses the variable of turn 1, then calls the client's function; turn 3 gives the
	// function's output and gets the answer.
	script := llmtest.Replies(
		llmtest.CallTool("python", `{"code": "x = 6 * 7\nprint(x)"}`),
		llmtest.Text("The answer is 42."),
		llmtest.CallTool("python", `{"code": "print(x + 1)"}`),
		llmtest.CallTool("get_weather", `{"city": "Paris"}`),
		llmtest.Text("43, and it is sunny."),
	)
	srv, model := responsesServerOn(t, w, script)
	st, r1 := post(t, srv.URL+"/v1/responses", `{"model": "`+w.name+`:m", "input": "What is 6*7? Use code.",
		"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}], "include": ["code_interpreter_call.outputs"]}`)
	if st != 200 || r1["status"] != "completed" {
		t.Fatalf("%d %v", st, r1)
	}
	out := r1["output"].([]any)
	ci := out[0].(map[string]any)
	if ci["type"] != "code_interpreter_call" || ci["status"] != "completed" || !strings.HasPrefix(ci["container_id"].(string), "cntr_") {
		t.Errorf("code_interpreter_call: %v", ci)
	}
	logs := ci["outputs"].([]any)[0].(map[string]any)
	if logs["type"] != "logs" || logs["logs"] != "42\n" {
		t.Errorf("outputs: %v", ci["outputs"])
	}
	msg := out[1].(map[string]any)
	if msg["type"] != "message" || msg["content"].([]any)[0].(map[string]any)["text"] != "The answer is 42." {
		t.Errorf("message: %v", msg)
	}
	// What the model read of the code's run; the model named by its provider's name.
	if reqs := model.Requests(); len(reqs) != 2 || !strings.Contains(lastResult(reqs[1]), "42") || reqs[0].Model != "m" || r1["model"] != w.name+":m" {
		t.Errorf("the model's second request: %+v; response model %v", reqs, r1["model"])
	}

	st, r2 := post(t, srv.URL+"/v1/responses", `{"model": "m", "input": "Add one, then the weather.", "previous_response_id": "`+r1["id"].(string)+`",
		"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}, {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]}`)
	out = r2["output"].([]any)
	if st != 200 || len(out) != 2 || out[1].(map[string]any)["type"] != "function_call" || out[1].(map[string]any)["name"] != "get_weather" {
		t.Fatalf("%d %v", st, r2)
	}
	if out[0].(map[string]any)["container_id"] != ci["container_id"] {
		t.Errorf("the follow-up ran in another container: %v", out[0])
	}
	if reqs := model.Requests(); !strings.Contains(lastResult(reqs[3]), "43") {
		t.Errorf("the variable of the first turn: %q", lastResult(reqs[3]))
	}
	call := out[1].(map[string]any)["call_id"].(string)
	st, r3 := post(t, srv.URL+"/v1/responses", `{"model": "m", "previous_response_id": "`+r2["id"].(string)+`",
		"input": [{"type": "function_call_output", "call_id": "`+call+`", "output": "sunny"}],
		"tools": [{"type": "function", "name": "get_weather"}]}`)
	if st != 200 || r3["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"] != "43, and it is sunny." {
		t.Fatalf("%d %v", st, r3)
	}

	// Kept, per tenant: GET, DELETE, then gone.
	resp, _ := http.Get(srv.URL + "/v1/responses/" + r1["id"].(string))
	resp.Body.Close()
	req, _ := http.NewRequest("DELETE", srv.URL+"/v1/responses/"+r1["id"].(string), nil)
	del, _ := http.DefaultClient.Do(req)
	del.Body.Close()
	again, _ := http.Get(srv.URL + "/v1/responses/" + r1["id"].(string))
	again.Body.Close()
	if resp.StatusCode != 200 || del.StatusCode != 200 || again.StatusCode != 404 {
		t.Errorf("get %d, delete %d, get again %d", resp.StatusCode, del.StatusCode, again.StatusCode)
	}
}

func TestResponsesStream(t *testing.T) {
	srv, _ := responsesServer(t, llmtest.Replies(llmtest.CallTool("python", `{"code": "print(2 + 2)"}`), llmtest.Text("It is 4.")))
	resp, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(`{"input": "2+2?", "stream": true,
		"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	var text string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev map[string]any
			json.Unmarshal([]byte(d), &ev)
			types = append(types, ev["type"].(string))
			if ev["type"] == "response.output_text.delta" {
				text += ev["delta"].(string)
			}
		}
	}
	joined := strings.Join(types, ",")
	for _, want := range []string{"response.created", "response.code_interpreter_call.in_progress", "response.code_interpreter_call_code.delta",
		"response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed", "response.output_text.delta", "response.completed"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no %s in %s", want, joined)
		}
	}
	if text != "It is 4." || types[len(types)-1] != "response.completed" {
		t.Errorf("text %q, last %s", text, types[len(types)-1])
	}
}

func TestResponsesRefusals(t *testing.T) {
	srv, _ := responsesServer(t, llmtest.Replies())
	for name, c := range map[string]struct {
		body   string
		status int
		want   string
	}{
		"unknown previous":        {`{"input": "x", "previous_response_id": "resp_nope"}`, 404, "no response"},
		"unknown container":       {`{"input": "x", "tools": [{"type": "code_interpreter", "container": "cntr_0123456789abcdef01234567"}]}`, 404, "cntr_0123456789abcdef01234567"},
		"a tool cellbox lacks":    {`{"input": "x", "tools": [{"type": "web_search"}]}`, 400, "code_interpreter and function"},
		"a function named python": {`{"input": "x", "tools": [{"type": "function", "name": "python"}]}`, 400, "a name of its own"},
		"an output for no call":   {`{"input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]}`, 400, "no function call"},
		"no input":                {`{}`, 400, "needs input"},
	} {
		t.Run(name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
				t.Errorf("%d %s; want %d with %q", resp.StatusCode, b, c.status, c.want)
			}
		})
	}
}

// lastResult is the text of the first tool result of a request's last message.
func lastResult(r llmtest.Request) string {
	if len(r.Messages) == 0 {
		return ""
	}
	last := r.Messages[len(r.Messages)-1]
	if len(last.ToolResults) == 0 {
		return ""
	}
	return last.ToolResults[0].Text
}

// A model that calls tools whatever it is told: the step limit and tool_choice "none" end
// the turn, and a call of a tool nobody defined reaches neither the client nor the sandbox.
func TestResponsesUnrulyModel(t *testing.T) {
	always := func(r llmtest.Request) llmtest.Reply { return llmtest.CallTool("python", `{"code": "1"}`) }
	srv, model := responsesServer(t, always)
	st, r := post(t, srv.URL+"/v1/responses", `{"input": "x", "tool_choice": "none", "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}`)
	if st != 200 || r["status"] != "completed" || len(r["output"].([]any)) != 0 || len(model.Requests()) != 1 {
		t.Errorf("tool_choice none: %d %v after %d model requests", st, r, len(model.Requests()))
	}
	st, r = post(t, srv.URL+"/v1/responses", `{"input": "x", "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}`)
	if st != 200 || r["status"] != "incomplete" || len(model.Requests()) != 1+21 {
		t.Errorf("the step limit: %d %v after %d model requests", st, r["status"], len(model.Requests()))
	}

	srv, model = responsesServer(t, llmtest.Replies(llmtest.CallTool("delete_everything", `{}`), llmtest.Text("ok")))
	st, r = post(t, srv.URL+"/v1/responses", `{"input": "x", "tools": [{"type": "function", "name": "get_weather"}]}`)
	out := r["output"].([]any)
	if st != 200 || len(out) != 1 || out[0].(map[string]any)["type"] != "message" {
		t.Errorf("a tool nobody defined: %d %v", st, r)
	}
	if res := lastResult(model.Requests()[1]); !strings.Contains(res, `no tool named "delete_everything"`) {
		t.Errorf("what the model read: %q", res)
	}
}

func TestUpstream(t *testing.T) {
	for _, c := range []struct{ model, provider, name string }{
		{"", "", ""},
		{"gpt-4.1-mini", "", "gpt-4.1-mini"},
		{"gpt-oss:20b", "", "gpt-oss:20b"}, // Ollama's names have colons
		{"anthropic:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"},
		{"openai-responses:gpt-5", "openai-responses", "gpt-5"},
		{"openai:llama3:8b", "openai", "llama3:8b"},
		{"anthropic:", "", "anthropic:"},
		{"Anthropic:x", "", "Anthropic:x"},
	} {
		if p, n := upstream(c.model); p != c.provider || n != c.name {
			t.Errorf("upstream(%q) = %q, %q; want %q, %q", c.model, p, n, c.provider, c.name)
		}
	}
}

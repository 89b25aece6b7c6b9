package httpapi_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
)

// TestToolRoutesRefuse: the tool routes' refusals, in REST's error shape: an unknown
// session and another key's session are not found, an unknown tool names the tools there
// are, a bad body or format is a bad request, the library has nothing of another key's.
func TestToolRoutesRefuse(t *testing.T) {
	k := startKeyed(t, nil)
	alice, bob := "Authorization: Bearer "+aliceKey, "X-API-Key: "+bobKey
	a := k.do(t, "POST", "/v1/sessions", "{}", alice)
	var sess api.Session
	if err := json.Unmarshal(a.body, &sess); err != nil || a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	id := sess.ID
	tests := []struct {
		name, method, path, body, key string
		status                        int
		code, say                     string
	}{
		{"unknown session", "GET", "/v1/sessions/nope/tools", "", alice, 404, "not_found", "nope"},
		{"another key's session", "GET", "/v1/sessions/" + id + "/tools", "", bob, 404, "not_found", ""},
		{"another key's call", "POST", "/v1/sessions/" + id + "/tools/add/call", `{"arguments":{}}`, bob, 404, "not_found", ""},
		{"another key's load", "POST", "/v1/sessions/" + id + "/tools/load", `{}`, bob, 404, "not_found", ""},
		{"unknown tool", "POST", "/v1/sessions/" + id + "/tools/add/call", `{"arguments":{"a":1}}`, alice, 404, "not_found", "its tools: none"},
		{"unknown tool, streamed", "POST", "/v1/sessions/" + id + "/tools/add/call", `{}`, alice, 404, "not_found", "its tools: none"},
		{"arguments not JSON", "POST", "/v1/sessions/" + id + "/tools/add/call", `{"arguments":{`, alice, 400, "invalid_argument", ""},
		{"unknown format", "GET", "/v1/sessions/" + id + "/tools?format=xml", "", alice, 400, "invalid_argument", "openai, anthropic or mcp"},
		{"unknown saved tool", "GET", "/v1/saved-tools/nope", "", alice, 404, "not_found", "nope"},
		{"hostile saved tool name", "GET", "/v1/saved-tools/..%2F..%2Fetc", "", alice, 404, "not_found", ""},
		{"delete unknown saved tool", "DELETE", "/v1/saved-tools/nope", "", alice, 404, "not_found", "nope"},
		{"load unknown saved tool", "POST", "/v1/sessions/" + id + "/tools/load", `{"names":["nope"]}`, alice, 404, "not_found", "nope"},
		{"save unknown tool", "POST", "/v1/sessions/" + id + "/tools/add/save", `{}`, alice, 404, "not_found", "its tools: none"},
		{"another key's save", "POST", "/v1/sessions/" + id + "/tools/add/save", `{}`, bob, 404, "not_found", ""},
		{"save body not JSON", "POST", "/v1/sessions/" + id + "/tools/add/save", `{"source":`, alice, 400, "invalid_argument", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := []string{tt.key}
			if strings.Contains(tt.name, "streamed") {
				hdr = append(hdr, "Accept: text/event-stream")
			}
			a := k.do(t, tt.method, tt.path, tt.body, hdr...)
			if a.status != tt.status || a.err().Code != tt.code || !strings.Contains(a.err().Message, tt.say) {
				t.Errorf("%d %s, want %d %s saying %q", a.status, a.body, tt.status, tt.code, tt.say)
			}
		})
	}
	for _, q := range []string{"", "?format=openai", "?format=anthropic", "?format=mcp"} {
		a := k.do(t, "GET", "/v1/sessions/"+id+"/tools"+q, "", alice)
		if a.status != 200 {
			t.Errorf("GET tools%s: %d %s", q, a.status, a.body)
		}
	}
	if a := k.do(t, "GET", "/v1/sessions/"+id+"/tools", "", alice); string(a.body) != `{"tools":[]}`+"\n" && string(a.body) != `{"tools":[]}` {
		t.Errorf("no tools: %s", a.body)
	}
	if a := k.do(t, "GET", "/v1/saved-tools", "", alice); a.status != 200 || !strings.Contains(string(a.body), `"tools":[]`) {
		t.Errorf("library: %d %s", a.status, a.body)
	}
}

// TestToolDefinedThenCalled: a cell defines a tool; it is listed in every format and
// called with good arguments (its value as JSON, its prints among the outputs), with bad
// ones (400, the validator's message), returns what JSON can't hold (text), raises; one
// proposed for the library (save=True) is in it once the caller saves it, survives a
// kernel restart that drops the unsaved one, and loads into another session.
func TestToolDefinedThenCalled(t *testing.T) {
	k := startKeyed(t, nil)
	alice := "Authorization: Bearer " + aliceKey
	newSession := func() string {
		a := k.do(t, "POST", "/v1/sessions", "{}", alice)
		var s api.Session
		json.Unmarshal(a.body, &s)
		return s.ID
	}
	id := newSession()
	code := `from cellbox import tool

@tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    print("adding")
    return a + b

@tool
def odd(n: int):
    return complex(n, 1)

@tool
def boom():
    raise ValueError("no")

@tool(save=True)
def double(x: float) -> float:
    """Twice x."""
    return 2 * x
`
	body, _ := json.Marshal(api.ExecuteRequest{Code: code})
	if a := k.do(t, "POST", "/v1/sessions/"+id+"/execute", string(body), alice); a.status != 200 || !strings.Contains(string(a.body), `"status":"ok"`) {
		t.Fatalf("define: %d %s", a.status, a.body)
	}
	var list api.SessionToolList
	json.Unmarshal(k.do(t, "GET", "/v1/sessions/"+id+"/tools", "", alice).body, &list)
	if len(list.Tools) != 4 || list.Tools[0].Name != "add" || list.Tools[0].Description != "Add two numbers." {
		t.Fatalf("tools: %+v", list.Tools)
	}
	if a := k.do(t, "GET", "/v1/sessions/"+id+"/tools?format=openai", "", alice); !strings.Contains(string(a.body), `"parameters"`) {
		t.Errorf("openai format: %s", a.body)
	}
	call := func(name, args string) (answer, api.ToolCallResult) {
		a := k.do(t, "POST", "/v1/sessions/"+id+"/tools/"+name+"/call", `{"arguments":`+args+`}`, alice)
		var r api.ToolCallResult
		json.Unmarshal(a.body, &r)
		return a, r
	}
	if a, r := call("add", `{"a": 2, "b": 3}`); a.status != 200 || r.Status != "ok" || !r.HasValue || r.Value != 5.0 ||
		len(r.Outputs) != 1 || r.Outputs[0].Text != "adding\n" {
		t.Errorf("add: %d %s", a.status, a.body)
	}
	if a, _ := call("add", `{"a": "two"}`); a.status != 400 || !strings.Contains(a.err().Message, "at '/a'") {
		t.Errorf("add with bad arguments: %d %s", a.status, a.body)
	}
	if a, r := call("odd", `{"n": 1}`); a.status != 200 || r.HasValue || r.Text != "(1+1j)" || r.ValueType != "complex" {
		t.Errorf("odd: %d %s", a.status, a.body)
	}
	if a, r := call("boom", `{}`); a.status != 200 || r.Status != "error" || len(r.Outputs) == 0 || r.Outputs[len(r.Outputs)-1].EName != "ValueError" {
		t.Errorf("boom: %d %s", a.status, a.body)
	}
	// The kernel proposed double; only the caller's save puts it in the library.
	double := list.Tools[2] // in name order: add, boom, double, odd
	if double.Name != "double" || !double.SaveProposed || double.Saved || list.Tools[0].SaveProposed {
		t.Errorf("listed: %+v", list.Tools)
	}
	if a := k.do(t, "GET", "/v1/saved-tools/double", "", alice); a.status != 404 {
		t.Errorf("saved by the kernel alone: %d %s", a.status, a.body)
	}
	save := func(id, name, source string) answer {
		b, _ := json.Marshal(api.SaveToolRequest{Source: source})
		return k.do(t, "POST", "/v1/sessions/"+id+"/tools/"+name+"/save", string(b), alice)
	}
	if a := save(id, "add", ""); a.status != 409 || !strings.Contains(a.err().Message, "save=True") {
		t.Errorf("save a tool not proposed: %d %s", a.status, a.body)
	}
	if a := save(id, "double", "def double(x): return 3 * x"); a.status != 409 || !strings.Contains(a.err().Message, "defined again") {
		t.Errorf("save with another source: %d %s", a.status, a.body)
	}
	if a := k.do(t, "POST", "/v1/sessions/"+id+"/tools/double/save", "", "X-API-Key: "+bobKey); a.status != 404 {
		t.Errorf("another key saves: %d %s", a.status, a.body)
	}
	var st api.SavedTool
	if a := save(id, "double", double.Source); a.status != 200 || json.Unmarshal(a.body, &st) != nil || st.Name != "double" || st.Source != double.Source {
		t.Errorf("save: %d %s", a.status, a.body)
	}
	if a := k.do(t, "GET", "/v1/saved-tools/double", "", alice); a.status != 200 {
		t.Errorf("saved: %d %s", a.status, a.body)
	}
	if a := k.do(t, "POST", "/v1/sessions/"+id+"/restart", "", alice); a.status != 200 {
		t.Fatalf("restart: %d %s", a.status, a.body)
	}
	json.Unmarshal(k.do(t, "GET", "/v1/sessions/"+id+"/tools", "", alice).body, &list)
	if len(list.Tools) != 1 || list.Tools[0].Name != "double" {
		t.Errorf("after the restart: %+v", list.Tools)
	}
	if _, r := call("double", `{"x": 2}`); r.Value != 4.0 {
		t.Errorf("double after the restart: %+v", r)
	}
	other := newSession()
	if a := k.do(t, "POST", "/v1/sessions/"+other+"/tools/load", `{}`, alice); a.status != 200 || !strings.Contains(string(a.body), `"double"`) {
		t.Errorf("load: %d %s", a.status, a.body)
	}
	// A cell that kills its kernel: the result says the kernel restarted and which tools
	// went; the saved one is back.
	k.do(t, "POST", "/v1/sessions/"+id+"/execute", string(body), alice)
	body, _ = json.Marshal(api.ExecuteRequest{Code: "import os; os._exit(3)"})
	var res api.ExecuteResult
	a := k.do(t, "POST", "/v1/sessions/"+id+"/execute", string(body), alice)
	json.Unmarshal(a.body, &res)
	if !res.KernelRestarted || !strings.Contains(res.Message, "kept. The kernel restart dropped the tools add, boom, odd") || !strings.Contains(res.Message, "loaded again: double") {
		t.Errorf("a cell that killed the kernel: %d %s", a.status, a.body)
	}
	json.Unmarshal(k.do(t, "GET", "/v1/sessions/"+id+"/tools", "", alice).body, &list)
	if len(list.Tools) != 1 || list.Tools[0].Name != "double" {
		t.Errorf("after the kernel died: %+v", list.Tools)
	}
	// Deleted from the library, it stays deleted though the session reports it again.
	if a := k.do(t, "DELETE", "/v1/saved-tools/double", "", alice); a.status != 200 && a.status != 204 {
		t.Fatalf("delete double: %d %s", a.status, a.body)
	}
	body, _ = json.Marshal(api.ExecuteRequest{Code: "from cellbox import tool\n\n@tool\ndef z() -> int:\n    return 0\n"})
	k.do(t, "POST", "/v1/sessions/"+id+"/execute", string(body), alice)
	if a := k.do(t, "GET", "/v1/saved-tools/double", "", alice); a.status != 404 {
		t.Errorf("double after it was deleted and the session reported its tools again: %d %s", a.status, a.body)
	}

	// A saved tool whose loading kills the kernel (its default is computed when it is
	// defined, and kills once the file boom exists): the tools loaded before it go with
	// the kernel, and the session lists none, rather than what its kernel no longer has.
	body, _ = json.Marshal(api.ExecuteRequest{Code: `from cellbox import tool

@tool(save=True)
def alpha() -> int:
    return 1

@tool(save=True)
def fragile(x: int = (__import__("os")._exit(9) if __import__("os").path.exists("boom") else 1)) -> int:
    return x
`})
	if a := k.do(t, "POST", "/v1/sessions/"+other+"/execute", string(body), alice); !strings.Contains(string(a.body), `"status":"ok"`) {
		t.Fatalf("define fragile: %d %s", a.status, a.body)
	}
	for _, name := range []string{"alpha", "fragile"} {
		if a := save(other, name, ""); a.status != 200 {
			t.Fatalf("save %s: %d %s", name, a.status, a.body)
		}
	}
	body, _ = json.Marshal(api.ExecuteRequest{Code: `open("boom", "w").close(); import os; os._exit(3)`})
	a = k.do(t, "POST", "/v1/sessions/"+other+"/execute", string(body), alice)
	res = api.ExecuteResult{}
	json.Unmarshal(a.body, &res)
	if !res.KernelRestarted || !strings.Contains(res.Message, "fragile (loading it cost the kernel, which restarted with no tools: the kernel died (exit code 9)") ||
		!strings.Contains(res.Message, "the kernel having restarted again: alpha") {
		t.Errorf("a restart whose reload kills the kernel again: %d %s", a.status, res.Message)
	}
	list = api.SessionToolList{}
	json.Unmarshal(k.do(t, "GET", "/v1/sessions/"+other+"/tools", "", alice).body, &list)
	if len(list.Tools) != 0 {
		t.Errorf("tools listed that the kernel lost: %+v", list.Tools)
	}
	if a := k.do(t, "POST", "/v1/sessions/"+other+"/tools/load", `{"names":["alpha"]}`, alice); a.status != 200 || !strings.Contains(string(a.body), `"alpha"`) {
		t.Errorf("load alpha: %d %s", a.status, a.body)
	}
	if a := k.do(t, "POST", "/v1/sessions/"+other+"/tools/load", `{"names":["fragile"]}`, alice); a.status != 409 || !strings.Contains(a.err().Message, "saved tool fragile: loading it cost the kernel") {
		t.Errorf("load fragile: %d %s", a.status, a.body)
	}
	list = api.SessionToolList{}
	json.Unmarshal(k.do(t, "GET", "/v1/sessions/"+other+"/tools", "", alice).body, &list)
	if len(list.Tools) != 0 {
		t.Errorf("after a load that killed the kernel, tools listed that it lost: %+v", list.Tools)
	}
}

// TestToolCallLimits: a tool's call is a cell's run: past its timeout it stops (the
// kernel's variables kept), an interrupt stops it, and a plot it draws comes back among
// its outputs, its value null.
func TestToolCallLimits(t *testing.T) {
	k := startKeyed(t, nil)
	alice := "Authorization: Bearer " + aliceKey
	var s api.Session
	json.Unmarshal(k.do(t, "POST", "/v1/sessions", "{}", alice).body, &s)
	code := `from cellbox import tool
import time
kept = 41

@tool
def spin() -> None:
    """Never returns."""
    print("spinning", flush=True)
    while True:
        time.sleep(0.01)

@tool
def plot(n: int) -> None:
    """Plots n points."""
    import matplotlib.pyplot as plt
    plt.plot(range(n))
    plt.show()
`
	body, _ := json.Marshal(api.ExecuteRequest{Code: code})
	if a := k.do(t, "POST", "/v1/sessions/"+s.ID+"/execute", string(body), alice); a.status != 200 || !strings.Contains(string(a.body), `"status":"ok"`) {
		t.Fatalf("define: %d %s", a.status, a.body)
	}
	var r api.ToolCallResult
	a := k.do(t, "POST", "/v1/sessions/"+s.ID+"/tools/spin/call", `{"timeout_s": 1}`, alice)
	if json.Unmarshal(a.body, &r); a.status != 200 || r.Status != api.StatusTimeout || r.HasValue {
		t.Errorf("spin past its timeout: %d %s", a.status, a.body)
	}
	body, _ = json.Marshal(api.ExecuteRequest{Code: "kept + 1"})
	if a := k.do(t, "POST", "/v1/sessions/"+s.ID+"/execute", string(body), alice); !strings.Contains(string(a.body), `"42"`) {
		t.Errorf("the kernel's variables after the timeout: %s", a.body)
	}

	// Interrupted once it has started (its print is streamed).
	req, _ := http.NewRequest("POST", k.url+"/v1/sessions/"+s.ID+"/tools/spin/call", strings.NewReader(`{"timeout_s": 60}`))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	interrupted, result := false, ""
	for sc.Scan() {
		line := sc.Text()
		if !interrupted && strings.Contains(line, "spinning") {
			interrupted = true
			if a := k.do(t, "POST", "/v1/sessions/"+s.ID+"/interrupt", "", alice); a.status != 200 && a.status != 204 {
				t.Fatalf("interrupt: %d %s", a.status, a.body)
			}
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"duration_ms"`) {
			result = d
		}
	}
	if err := json.Unmarshal([]byte(result), &r); err != nil || !interrupted || r.Status != api.StatusInterrupted {
		t.Errorf("spin interrupted: saw its print %v, result %s", interrupted, result)
	}

	a = k.do(t, "POST", "/v1/sessions/"+s.ID+"/tools/plot/call", `{"arguments": {"n": 5}}`, alice)
	r = api.ToolCallResult{}
	json.Unmarshal(a.body, &r)
	png := false
	for _, o := range r.Outputs {
		if _, ok := o.Data["image/png"].(string); ok {
			png = true
		}
	}
	if a.status != 200 || r.Status != api.StatusOK || !png || !r.HasValue || r.Value != nil {
		t.Errorf("plot: %d %s", a.status, a.body)
	}
}

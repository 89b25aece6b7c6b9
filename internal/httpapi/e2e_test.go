package httpapi_test

// End-to-end tests of the REST contract on the runc backend: a real server (in process),
// real runc sandboxes, the real guest binary, real IPython. CELLBOX_TEST_RUNTIME picks
// the OCI runtime and CELLBOX_TEST_SETUP the setup (runc on the host's root by default);
// what a backend changes is the conformance suite's (internal/sandbox/sandboxtest).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testserver"
)

// shared is the server the tests of this package share, on testbin.TestSetup's setup.
var shared = &testserver.Shared{Prefix: "e2e", FromSetup: true}

func TestMain(m *testing.M) { testserver.Main(m, shared) }

// testRuntime is the OCI runtime of the shared server.
func testRuntime() string { return testserver.Runtime() }

// sharedOnImages: the shared server's sandboxes run on the default image, not on the host's
// root filesystem.
func sharedOnImages() bool { return shared.Setup().ImagesDir != "" }

type client struct {
	t   *testing.T
	url string
}

func newClient(t *testing.T) *client { return &client{t: t, url: shared.Start(t).URL} }

// caps is what the shared server's backend enforces.
func (c *client) caps() sandbox.Capabilities { return shared.Start(c.t).Backend.Capabilities() }

// do sends a request and decodes a JSON answer into out (if not nil); it returns the status.
func (c *client) do(method, path string, body any, out any) int {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.url+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: status %d, body not JSON: %v: %s", method, path, resp.StatusCode, err, data)
		}
	}
	return resp.StatusCode
}

func (c *client) session(req api.CreateSessionRequest) string {
	c.t.Helper()
	var s api.Session
	if st := c.do("POST", "/v1/sessions", req, &s); st != http.StatusCreated {
		c.t.Fatalf("create session: status %d", st)
	}
	c.t.Cleanup(func() { c.do("DELETE", "/v1/sessions/"+s.ID, nil, nil) })
	return s.ID
}

func (c *client) exec(id, code string, timeout float64) api.ExecuteResult {
	c.t.Helper()
	var res api.ExecuteResult
	if st := c.do("POST", "/v1/sessions/"+id+"/execute", api.ExecuteRequest{Code: code, TimeoutS: timeout}, &res); st != http.StatusOK {
		c.t.Fatalf("execute %q: status %d", code, st)
	}
	return res
}

func stdout(r api.ExecuteResult) string {
	var b strings.Builder
	for _, o := range r.Outputs {
		if o.Type == api.OutputStream && o.Name == "stdout" {
			b.WriteString(o.Text)
		}
	}
	return b.String()
}

func result(r api.ExecuteResult) string {
	for _, o := range r.Outputs {
		if o.Type == api.OutputExecuteResult {
			s, _ := o.Data["text/plain"].(string)
			return s
		}
	}
	return ""
}

func wantStatus(t *testing.T, r api.ExecuteResult, status string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %q (%s), want %q; outputs: %+v", r.Status, r.Message, status, r.Outputs)
	}
}

func TestStateStreamsErrors(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	r := c.exec(id, "x = 41\nimport sys\nprint('out'); print('err', file=sys.stderr)", 0)
	wantStatus(t, r, api.StatusOK)
	if stdout(r) != "out\n" {
		t.Errorf("stdout %q", stdout(r))
	}
	var gotErr bool
	for _, o := range r.Outputs {
		gotErr = gotErr || (o.Type == api.OutputStream && o.Name == "stderr" && o.Text == "err\n")
	}
	if !gotErr {
		t.Errorf("no stderr output in %+v", r.Outputs)
	}
	r2 := c.exec(id, "x + 1", 0)
	if result(r2) != "42" || r2.ExecutionCount != r.ExecutionCount+1 {
		t.Errorf("second cell: result %q count %d (first %d)", result(r2), r2.ExecutionCount, r.ExecutionCount)
	}
	r3 := c.exec(id, "1/0", 0)
	wantStatus(t, r3, api.StatusError)
	last := r3.Outputs[len(r3.Outputs)-1]
	if last.Type != api.OutputError || last.EName != "ZeroDivisionError" || len(last.Traceback) == 0 {
		t.Errorf("error output %+v", last)
	}
	if strings.Contains(strings.Join(last.Traceback, ""), "\x1b[") {
		t.Errorf("traceback has terminal colour codes: %q", last.Traceback)
	}
}

func TestPlotAndDataFrame(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	r := c.exec(id, "import matplotlib.pyplot as plt\nplt.plot([1,2,3],[3,1,2])\nplt.title('t')\nplt.show()", 0)
	wantStatus(t, r, api.StatusOK)
	var png []byte
	for _, o := range r.Outputs {
		if s, ok := o.Data["image/png"].(string); ok && o.Type == api.OutputDisplayData {
			png, _ = base64.StdEncoding.DecodeString(s)
		}
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG display_data in %d outputs", len(r.Outputs))
	}
	r = c.exec(id, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})", 0)
	wantStatus(t, r, api.StatusOK)
	var html string
	for _, o := range r.Outputs {
		if o.Type == api.OutputExecuteResult {
			html, _ = o.Data["text/html"].(string)
		}
	}
	if !strings.Contains(html, "<table") {
		t.Fatalf("DataFrame result has no HTML table: %+v", r.Outputs)
	}
}

func TestFilesUploadArtifactsDownload(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	csv, err := os.ReadFile(sharedData(t))
	if err != nil {
		t.Fatal(err)
	}
	var info api.FileInfo
	if st := c.do("PUT", "/v1/sessions/"+id+"/files/data/accidents.csv", csv, &info); st != http.StatusCreated {
		t.Fatalf("upload: status %d", st)
	}
	if info.Size != int64(len(csv)) || info.Path != "/mnt/data/data/accidents.csv" {
		t.Errorf("upload info %+v", info)
	}
	r := c.exec(id, "import pandas as pd\ndf = pd.read_csv('/mnt/data/data/accidents.csv')\n"+
		"df.head(3).to_csv('/mnt/data/head.csv', index=False)\nprint(len(df))", 0)
	wantStatus(t, r, api.StatusOK)
	lines := strings.Count(string(csv), "\n") - 1
	if strings.TrimSpace(stdout(r)) != fmt.Sprint(lines) {
		t.Errorf("rows %q, want %d", stdout(r), lines)
	}
	if len(r.Files) != 1 || r.Files[0].Path != "/mnt/data/head.csv" || r.Files[0].Change != api.ChangeCreated {
		t.Errorf("files %+v, want head.csv created", r.Files)
	}
	resp, err := http.Get(c.url + "/v1/sessions/" + id + "/files/head.csv")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Count(string(got), "\n") != 4 || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("download: status %d, %d lines, headers %v", resp.StatusCode, strings.Count(string(got), "\n"), resp.Header)
	}
	var list api.FileList
	c.do("GET", "/v1/sessions/"+id+"/files?path=data", nil, &list)
	if len(list.Files) != 1 || list.Files[0].Name != "accidents.csv" {
		t.Errorf("list data/: %+v", list)
	}
	if st := c.do("DELETE", "/v1/sessions/"+id+"/files/head.csv", nil, nil); st != http.StatusNoContent {
		t.Errorf("delete: status %d", st)
	}
	var e api.ErrorBody
	if st := c.do("GET", "/v1/sessions/"+id+"/files/head.csv", nil, &e); st != http.StatusNotFound || e.Error.Code != api.CodeNotFound {
		t.Errorf("after delete: status %d, %+v", st, e)
	}
	// Nothing but what the user made: no IPython history, no caches.
	c.do("GET", "/v1/sessions/"+id+"/files", nil, &list)
	if len(list.Files) != 1 || list.Files[0].Name != "data" {
		t.Errorf("workspace holds %+v, want only data/", list.Files)
	}
}

func sharedData(t *testing.T) string {
	p := filepath.Join("..", "..", "examples", "data", "traffic_accidents.csv")
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInterruptAndRestart(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	c.exec(id, "kept = 'yes'", 0)
	done := make(chan api.ExecuteResult)
	go func() {
		var r api.ExecuteResult
		c.do("POST", "/v1/sessions/"+id+"/execute", api.ExecuteRequest{Code: "import time\nwhile True: time.sleep(0.05)"}, &r)
		done <- r
	}()
	waitBusy(t, c, id)
	if st := c.do("POST", "/v1/sessions/"+id+"/interrupt", nil, nil); st != 200 {
		t.Fatalf("interrupt: status %d", st)
	}
	r := <-done
	wantStatus(t, r, api.StatusInterrupted)
	if result(c.exec(id, "kept", 0)) != "'yes'" {
		t.Fatal("state lost after interrupt")
	}
	if st := c.do("POST", "/v1/sessions/"+id+"/restart", nil, nil); st != 200 {
		t.Fatalf("restart: status %d", st)
	}
	r = c.exec(id, "kept", 0)
	if r.Status != api.StatusError || r.Outputs[len(r.Outputs)-1].EName != "NameError" {
		t.Fatalf("after restart: %+v", r)
	}
}

// waitBusy waits until the session reports a running execution. An interrupt sent from
// then on reaches the run, even if the guest has not begun the cell yet.
func waitBusy(t *testing.T, c *client, id string) {
	t.Helper()
	if !testbin.Eventually(5*time.Second, func() bool {
		var s api.Session
		c.do("GET", "/v1/sessions/"+id, nil, &s)
		return s.State == "busy"
	}) {
		t.Fatal("session never became busy")
	}
}

// TestSSEWhileRunning proves outputs stream before the cell ends: the cell prints, then
// waits for a file that the test uploads only after it has read that print from the stream.
func TestSSEWhileRunning(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	code := "import os, time\nprint('first', flush=True)\n" +
		"while not os.path.exists('/mnt/data/go'): time.sleep(0.02)\nprint('second')"
	body, _ := json.Marshal(api.ExecuteRequest{Code: code, TimeoutS: 30})
	events, _ := c.postSSE("/v1/sessions/"+id+"/execute", body)
	ev := <-events
	var o api.Output
	if ev.name != "output" || json.Unmarshal([]byte(ev.data), &o) != nil || o.Text != "first\n" {
		t.Fatalf("first event %+v", ev)
	}
	if st := c.do("PUT", "/v1/sessions/"+id+"/files/go", "", nil); st != http.StatusCreated {
		t.Fatalf("upload go: %d", st)
	}
	var names []string
	var res api.ExecuteResult
	for ev := range events {
		names = append(names, ev.name)
		if ev.name == "result" {
			json.Unmarshal([]byte(ev.data), &res)
		}
	}
	if len(names) != 2 || names[0] != "output" || names[1] != "result" {
		t.Fatalf("events after first: %v", names)
	}
	wantStatus(t, res, api.StatusOK)
	if stdout(res) != "first\nsecond\n" {
		t.Errorf("result stdout %q", stdout(res))
	}
}

type sseEvent struct{ name, data string }

// postSSE POSTs body to path asking for Server-Sent Events, checks that they come, and
// returns them and what closes the response (closed anyway when the test ends).
func (c *client) postSSE(path string, body []byte) (<-chan sseEvent, func()) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.url+path, bytes.NewReader(body))
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	closeBody := func() { resp.Body.Close() }
	c.t.Cleanup(closeBody)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		c.t.Fatalf("POST %s: status %d, content type %q", path, resp.StatusCode, ct)
	}
	return readSSE(c.t, resp.Body), closeBody
}

func readSSE(t *testing.T, r io.Reader) <-chan sseEvent {
	ch := make(chan sseEvent)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			case line == "" && ev.name != "":
				ch <- ev
				ev = sseEvent{}
			}
		}
	}()
	return ch
}

// TestContexts: an execution's context and env over REST, DELETE of a context, and names
// that are paths, NUL or huge refused.
func TestContexts(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	run := func(req api.ExecuteRequest) string {
		t.Helper()
		var r api.ExecuteResult
		if st := c.do("POST", "/v1/sessions/"+id+"/execute", req, &r); st != http.StatusOK {
			t.Fatalf("execute %+v: status %d", req, st)
		}
		wantStatus(t, r, api.StatusOK)
		return stdout(r)
	}
	run(api.ExecuteRequest{Code: "x = 'default'"})
	run(api.ExecuteRequest{Code: "x = 'a'\nimport os\nos.chdir('/tmp')", Context: "a"})
	if got := run(api.ExecuteRequest{Code: "import os\nprint(x, os.getcwd(), os.environ.get('V'))", Context: "a", Env: map[string]string{"V": "v"}}); got != "a /tmp v\n" {
		t.Errorf("in a: %q", got)
	}
	if got := run(api.ExecuteRequest{Code: "import os\nprint(x, os.getcwd(), os.environ.get('V'))"}); got != "default /mnt/data None\n" {
		t.Errorf("in the default context: %q", got)
	}
	if st := c.do("DELETE", "/v1/sessions/"+id+"/contexts/a", nil, nil); st != http.StatusNoContent {
		t.Errorf("delete context: status %d", st)
	}
	var e api.ErrorBody
	if st := c.do("DELETE", "/v1/sessions/"+id+"/contexts/a", nil, &e); st != http.StatusNotFound || !strings.Contains(e.Error.Message, `"a"`) {
		t.Errorf("delete it again: status %d, %+v", st, e)
	}
	if st := c.do("DELETE", "/v1/sessions/nope/contexts/a", nil, nil); st != http.StatusNotFound {
		t.Errorf("delete in an unknown session: status %d", st)
	}
	for _, name := range []string{"a%2Fb", "..%2F..%2Fetc", "a%00b", strings.Repeat("n", 10<<10)} {
		e = api.ErrorBody{}
		if st := c.do("DELETE", "/v1/sessions/"+id+"/contexts/"+name, nil, &e); st != http.StatusBadRequest || e.Error.Code != api.CodeInvalidArgument {
			t.Errorf("delete context %.20q: status %d, %+v", name, st, e)
		}
	}
	for _, body := range []string{`{"code":"1","context":"a/b"}`, `{"code":"1","context":"a\u0000b"}`, `{"code":"1","env":{"A":"a\u0000"}}`} {
		e = api.ErrorBody{}
		if st := c.do("POST", "/v1/sessions/"+id+"/execute", body, &e); st != http.StatusBadRequest || e.Error.Code != api.CodeInvalidArgument {
			t.Errorf("execute %s: status %d, %+v", body, st, e)
		}
	}
}

func TestOneShot(t *testing.T) {
	c := newClient(t)
	var r api.ExecuteResult
	st := c.do("POST", "/v1/execute", api.OneShotRequest{
		Code:  "print(1+1)\nprint(open('/mnt/data/in.txt').read())",
		Files: []api.InputFile{{Path: "in.txt", Content: "hello"}},
	}, &r)
	if st != 200 {
		t.Fatalf("status %d", st)
	}
	wantStatus(t, r, api.StatusOK)
	if stdout(r) != "2\nhello\n" {
		t.Errorf("stdout %q", stdout(r))
	}
}

func TestCommands(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	var r api.CommandResult
	c.do("POST", "/v1/sessions/"+id+"/commands", api.CommandRequest{Cmd: []string{"bash", "-c", "cat; echo err >&2; echo made > f.txt; exit 3"}, Stdin: "in\n"}, &r)
	if r.Status != api.StatusError || r.ExitCode != 3 || r.Stdout != "in\n" || r.Stderr != "err\n" {
		t.Errorf("command result %+v", r)
	}
	if len(r.Files) != 1 || r.Files[0].Path != "/mnt/data/f.txt" {
		t.Errorf("files %+v", r.Files)
	}
	c.do("POST", "/v1/sessions/"+id+"/commands", api.CommandRequest{Cmd: []string{"sleep", "30"}, TimeoutS: 1}, &r)
	if r.Status != api.StatusTimeout {
		t.Errorf("sleep 30 with timeout 1: %+v", r)
	}
}

func TestBadRequests(t *testing.T) {
	c := newClient(t)
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"bad json", "POST", "/v1/sessions", "{", 400, api.CodeInvalidArgument},
		{"unknown field", "POST", "/v1/sessions", `{"langauge":"python"}`, 400, api.CodeInvalidArgument},
		{"wrong type", "POST", "/v1/sessions", `{"limits":{"memory_mb":"lots"}}`, 400, api.CodeInvalidArgument},
		{"bad language", "POST", "/v1/sessions", `{"language":"cobol"}`, 400, api.CodeInvalidArgument},
		{"limit above max", "POST", "/v1/sessions", `{"limits":{"memory_mb":999999}}`, 400, api.CodeInvalidArgument},
		{"unknown session", "GET", "/v1/sessions/nope", "", 404, api.CodeNotFound},
		{"execute unknown", "POST", "/v1/sessions/nope/execute", `{"code":"1"}`, 404, api.CodeNotFound},
		{"execute empty body", "POST", "/v1/sessions/nope/execute", ``, 400, api.CodeInvalidArgument},
		{"no route", "GET", "/v2/x", "", 404, api.CodeNotFound},
		{"bad method", "PATCH", "/v1/sessions", "", 405, api.CodeInvalidArgument},
		{"bad method on a session", "PUT", "/v1/sessions/nope", "", 405, api.CodeInvalidArgument},
		{"metadata with a NUL", "POST", "/v1/sessions", `{"metadata":{"a":"\u0000"}}`, 400, api.CodeInvalidArgument},
		{"metadata not strings", "POST", "/v1/sessions", `{"metadata":{"a":1}}`, 400, api.CodeInvalidArgument},
		{"lifetime above max", "POST", "/v1/sessions", `{"lifetime_s":86401}`, 400, api.CodeInvalidArgument},
		{"negative lifetime", "POST", "/v1/sessions", `{"lifetime_s":-1}`, 400, api.CodeInvalidArgument},
		{"patch unknown session", "PATCH", "/v1/sessions/nope", `{"lifetime_s":60}`, 404, api.CodeNotFound},
		{"patch empty body", "PATCH", "/v1/sessions/nope", ``, 400, api.CodeInvalidArgument},
		{"patch unknown field", "PATCH", "/v1/sessions/nope", `{"timeout":60}`, 400, api.CodeInvalidArgument},
		{"one-shot bad file path", "POST", "/v1/execute", `{"code":"1","files":[{"path":"../x","content":"a"}]}`, 400, api.CodeInvalidArgument},
		{"huge body", "POST", "/v1/execute", `{"code":"` + strings.Repeat("x", 9<<20) + `"}`, 413, api.CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e api.ErrorBody
			st := c.do(tt.method, tt.path, tt.body, &e)
			if st != tt.status || e.Error.Code != tt.code || e.Error.Message == "" {
				t.Errorf("status %d, error %+v; want %d %s", st, e, tt.status, tt.code)
			}
		})
	}
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	c := newClient(t)
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if st := c.do("GET", "/v1/openapi.json", nil, &doc); st != 200 {
		t.Fatalf("status %d", st)
	}
	// Every documented operation is routed (a 404 here would be the mux's "no route").
	for p, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			path := strings.NewReplacer("{id}", "nope", "{path}", "f.txt", "{name}", "c").Replace(p)
			req, _ := http.NewRequest(strings.ToUpper(method), c.url+path, strings.NewReader("{}"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var e api.ErrorBody
			json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if st := resp.StatusCode; st == 405 || (st == 404 && strings.HasPrefix(e.Error.Message, "no route")) {
				t.Errorf("%s %s is documented but not routed (status %d)", method, p, resp.StatusCode)
			}
		}
	}
	for _, p := range []string{"/v1/sessions", "/v1/sessions/{id}/execute", "/v1/sessions/{id}/contexts/{name}", "/v1/sessions/{id}/files/{path}", "/v1/execute", "/v1/tools", "/v1/agent", "/healthz", "/metrics",
		"/v1/providers", "/v1/cluster", "/v1/conversations", "/v1/conversations/{id}", "/v1/conversations/{id}/messages",
		"/v1/conversations/{id}/approvals", "/v1/conversations/{id}/stop",
		"/v1/sessions/{id}/tools", "/v1/sessions/{id}/tools/{name}/call", "/v1/sessions/{id}/tools/{name}/save", "/v1/sessions/{id}/tools/load", "/v1/saved-tools", "/v1/saved-tools/{name}", "/v1/sessions/{id}/links", "/v1/links/rotate", "/v1/sessions/{id}/pause", "/v1/sessions/{id}/resume", "/v1/sessions/{id}/fork", "/v1/sessions/{id}/complete", "/v1/sessions/{id}/inspect", "/v1/notebooks/execute"} {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("%s is routed but not documented", p)
		}
	}
}

func TestMetrics(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	c.exec(id, "1", 0)
	resp, err := http.Get(c.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"cellbox_sessions ", "cellbox_pool_size ", `cellbox_executions_total{kind="execute",status="ok"}`, "cellbox_execution_duration_seconds_bucket"} {
		if !bytes.Contains(b, []byte(m)) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

func hostIP(t *testing.T) string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
			return ip.IP.String()
		}
	}
	testbin.Missing(t, "no non-loopback IPv4 address on this host")
	return ""
}

// TestAttackCommandOutlivesCaller: a client that starts a long command and goes away no
// longer leaves it running: the command and what it started are killed, and the session's
// next call runs at once (one execution at a time holds).
func TestAttackCommandOutlivesCaller(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, _ := json.Marshal(api.CommandRequest{Cmd: []string{"bash", "-c", "touch started; sleep 20 & sleep 21; touch late"}})
	req, _ := http.NewRequestWithContext(ctx, "POST", c.url+"/v1/sessions/"+id+"/commands", bytes.NewReader(body))
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	testbin.WaitFor(t, time.Minute, "the command to start", func() error {
		if st := c.do("GET", "/v1/sessions/"+id+"/files/started", nil, nil); st != http.StatusOK {
			return fmt.Errorf("GET its file started: HTTP %d", st)
		}
		return nil
	})
	cancel() // the client goes away
	<-gone
	var r api.CommandResult
	if st := c.do("POST", "/v1/sessions/"+id+"/commands", api.CommandRequest{Cmd: []string{"ps", "-eo", "args"}}, &r); st != http.StatusOK {
		t.Fatalf("next command: status %d", st)
	}
	if strings.Contains(r.Stdout, "sleep 2") {
		t.Errorf("the command outlived its caller:\n%s", r.Stdout)
	}
	if st := c.do("GET", "/v1/sessions/"+id+"/files/late", nil, nil); st != http.StatusNotFound {
		t.Errorf("the command ran to its end: late file status %d", st)
	}
}

// TestSessionLifetimeAndMetadata: metadata and a lifetime given at creation come back with
// the session; PATCH sets a new deadline from now, and at it the session ends although a
// cell runs: the cell's caller is told, and the session is gone.
func TestSessionLifetimeAndMetadata(t *testing.T) {
	c := newClient(t)
	md := map[string]string{"user": "ada", "purpose": "e2e"}
	var s api.Session
	if st := c.do("POST", "/v1/sessions", api.CreateSessionRequest{LifetimeS: 3600, Metadata: md}, &s); st != http.StatusCreated {
		t.Fatalf("create: status %d", st)
	}
	t.Cleanup(func() { c.do("DELETE", "/v1/sessions/"+s.ID, nil, nil) })
	var got api.Session
	if st := c.do("GET", "/v1/sessions/"+s.ID, nil, &got); st != http.StatusOK || !maps.Equal(got.Metadata, md) ||
		got.ExpiresAt == nil || got.ExpiresAt.Sub(got.CreatedAt) != time.Hour {
		t.Fatalf("get: %d %+v", st, got)
	}
	for _, bad := range []string{`{"lifetime_s": 0}`, `{"lifetime_s": -5}`, `{"lifetime_s": 86401}`, `{"lifetime_s": 9223372036854775807}`} {
		var e api.ErrorBody
		if st := c.do("PATCH", "/v1/sessions/"+s.ID, bad, &e); st != http.StatusBadRequest || !strings.Contains(e.Error.Message, "lifetime_s") {
			t.Errorf("PATCH %s: %d %+v", bad, st, e)
		}
	}

	done := make(chan string, 1) // the end of the cell's event stream
	started := make(chan struct{})
	go func() {
		req, _ := http.NewRequest("POST", c.url+"/v1/sessions/"+s.ID+"/execute", strings.NewReader(`{"code": "print('started', flush=True); import time; time.sleep(600)", "timeout_s": 900}`))
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var last []string
		var once sync.Once
		for sc.Scan() {
			if strings.Contains(sc.Text(), "started") {
				once.Do(func() { close(started) })
			}
			if last = append(last, sc.Text()); len(last) > 3 {
				last = last[1:]
			}
		}
		done <- strings.Join(last, "\n")
	}()
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the cell does not start")
	}
	var patched api.Session
	before := time.Now()
	if st := c.do("PATCH", "/v1/sessions/"+s.ID, `{"lifetime_s": 1}`, &patched); st != http.StatusOK ||
		patched.ExpiresAt == nil || patched.ExpiresAt.Before(before.Add(time.Second)) || patched.State != "busy" || !maps.Equal(patched.Metadata, md) {
		t.Fatalf("PATCH: %d %+v", st, patched)
	}
	select {
	case end := <-done: // the session's end is what ends the cell
		if !strings.Contains(end, "event: error") || !strings.Contains(end, api.CodeNotFound) || !strings.Contains(end, "ended") {
			t.Errorf("the running cell's stream ended with %q, want an error event: the session ended", end)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the cell still runs two minutes after the session's deadline")
	}
	if st := c.do("GET", "/v1/sessions/"+s.ID, nil, nil); st != http.StatusNotFound {
		t.Errorf("the session after its deadline: %d", st)
	}
}

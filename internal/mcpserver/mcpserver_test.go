package mcpserver

// The server through the Go SDK's own client, over in-memory transports and over
// streamable HTTP, against a real manager (local-unsafe backend, real guest, real IPython).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/tool"
)

func newServer(t testing.TB) (*Server, *session.Manager) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts sandboxes; not in -short mode")
	}
	m := sessiontest.New(t, nil)
	s := New(m, Options{TimeoutS: 60, MemoryMB: 1024})
	t.Cleanup(s.Close) // before the manager's Shutdown, after the clients close
	return s, m
}

// client is one MCP connection, with the progress notifications it got.
type client struct {
	t  testing.TB
	cs *mcp.ClientSession

	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
}

func connect(t *testing.T, s *Server) *client {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	if _, err := s.newMCP(nil).Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	return newClient(t, ct)
}

func newClient(t testing.TB, tr mcp.Transport) *client {
	t.Helper()
	c := &client{t: t}
	mc := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, r.Params)
			c.mu.Unlock()
		},
	})
	cs, err := mc.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.cs = cs
	t.Cleanup(func() { cs.Close() })
	return c
}

// call calls a tool and returns its result and its text.
func (c *client) call(name string, args map[string]any) (*mcp.CallToolResult, string) {
	c.t.Helper()
	res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		c.t.Fatalf("call %s %v: %v", name, args, err)
	}
	return res, text(res)
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func sessionOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	id, _ := res.Meta[MetaSessionID].(string)
	if id == "" {
		t.Fatalf("no %s in the result's _meta: %v", MetaSessionID, res.Meta)
	}
	return id
}

func TestListTools(t *testing.T) {
	s, _ := newServer(t)
	c := connect(t, s)
	res, err := c.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := tool.Definitions(tool.Options{TimeoutS: 60, MemoryMB: 1024, SessionID: true})
	if len(res.Tools) != len(want) {
		t.Fatalf("%d tools, want %d", len(res.Tools), len(want))
	}
	for i, tl := range res.Tools {
		if tl.Name != want[i].Name || tl.Description != want[i].Description {
			t.Errorf("tool %d: %s, want %s as package tool defines it", i, tl.Name, want[i].Name)
		}
		schema, _ := tl.InputSchema.(map[string]any)
		props, _ := schema["properties"].(map[string]any)
		if _, ok := props["session_id"]; !ok {
			t.Errorf("tool %s has no session_id argument: %v", tl.Name, schema)
		}
	}
}

func TestStateAndSessions(t *testing.T) {
	s, m := newServer(t)
	a := connect(t, s)

	res, out := a.call("python", map[string]any{"code": "x = 41"})
	id := sessionOf(t, res)
	if res.IsError || !strings.Contains(out, "[session_id: "+id) {
		t.Fatalf("first result does not name its session %s: %q", id, out)
	}
	res, out = a.call("python", map[string]any{"code": "print(x + 1)"})
	if res.IsError || !strings.HasPrefix(out, "42") || strings.Contains(out, "session_id") || sessionOf(t, res) != id {
		t.Fatalf("state not kept, or the session named again: %q", out)
	}

	// Another connection has its own session, and can name the first one.
	b := connect(t, s)
	res, out = b.call("python", map[string]any{"code": "x"})
	if !res.IsError || !strings.Contains(out, "NameError") || sessionOf(t, res) == id {
		t.Fatalf("a second connection shares the first one's session: %q", out)
	}
	res, out = b.call("python", map[string]any{"code": "x", "session_id": id})
	if res.IsError || !strings.Contains(out, "41") || sessionOf(t, res) != id {
		t.Fatalf("session_id not used: %q", out)
	}
	res, out = b.call("shell", map[string]any{"command": "echo hi", "session_id": "0123abc"})
	if !res.IsError || !strings.Contains(out, `no session "0123abc"`) {
		t.Fatalf("unknown session_id: %q", out)
	}

	// A session that ended (here: deleted over REST) is replaced, and the model is told.
	if err := m.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	res, out = a.call("python", map[string]any{"code": "print('again')"})
	if res.IsError || !strings.Contains(out, "earlier session had ended") || sessionOf(t, res) == id {
		t.Fatalf("ended session not replaced: %q", out)
	}
}

func TestErrors(t *testing.T) {
	s, _ := newServer(t)
	c := connect(t, s)
	tests := []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"exception", "python", map[string]any{"code": "1/0"}, "ZeroDivisionError"},
		{"exit code", "shell", map[string]any{"command": "echo out; exit 3"}, "exit code 3"},
		{"missing code", "python", map[string]any{}, `non-empty "code"`},
		{"unknown argument", "python", map[string]any{"code": "1", "cmd": "ls"}, "unknown field"},
		{"wrong type", "shell", map[string]any{"command": 3}, "arguments must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out := c.call(tt.tool, tt.args)
			if !res.IsError || !strings.Contains(out, tt.want) {
				t.Errorf("isError %v, text %q; want isError and %q", res.IsError, out, tt.want)
			}
		})
	}
	t.Run("unknown tool", func(t *testing.T) {
		_, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "rm", Arguments: map[string]any{}})
		if err == nil {
			t.Fatal("a call of an unknown tool is a protocol error, got a result")
		}
	})
}

func TestImage(t *testing.T) {
	s, _ := newServer(t)
	c := connect(t, s)
	res, out := c.call("python", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"})
	if res.IsError {
		t.Fatal(out)
	}
	var imgs []*mcp.ImageContent
	for _, ct := range res.Content {
		if img, ok := ct.(*mcp.ImageContent); ok {
			imgs = append(imgs, img)
		}
	}
	if len(imgs) != 1 || imgs[0].MIMEType != "image/png" || !bytes.HasPrefix(imgs[0].Data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("want one PNG image; text %q, content %v", out, res.Content)
	}
}

func TestProgress(t *testing.T) {
	s, _ := newServer(t)
	c := connect(t, s)
	p := &mcp.CallToolParams{Name: "python", Arguments: map[string]any{"code": "import time\nprint('step 1', flush=True)\ntime.sleep(1.5)\nprint('done')"}}
	p.SetProgressToken("tok")
	res, err := c.cs.CallTool(context.Background(), p)
	if err != nil || res.IsError {
		t.Fatalf("%v %v", err, res)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.progress) == 0 {
		t.Fatal("no progress notification")
	}
	last := 0.0
	for _, n := range c.progress {
		if n.ProgressToken != "tok" || n.Progress <= last || !strings.Contains(n.Message, "running for") {
			t.Errorf("bad notification %+v", n)
		}
		last = n.Progress
	}
	shown := false
	for _, n := range c.progress {
		shown = shown || strings.Contains(n.Message, "last printed: step 1")
	}
	if !shown {
		t.Errorf("no notification shows the output: %+v", c.progress)
	}
}

func TestResources(t *testing.T) {
	s, _ := newServer(t)
	c := connect(t, s)
	ctx := context.Background()

	list, err := c.cs.ListResources(ctx, nil)
	if err != nil || len(list.Resources) != 0 {
		t.Fatalf("before any call: %v, %v", list, err)
	}
	res, out := c.call("python", map[string]any{"code": "import os\nopen('a.csv', 'w').write('x,y\\n1,2\\n')\n" +
		"os.makedirs('sub dir', exist_ok=True)\nopen('sub dir/b.bin', 'wb').write(bytes(range(256)))\nopen('empty.txt', 'w').close()"})
	if res.IsError {
		t.Fatal(out)
	}
	id := sessionOf(t, res)
	list, err = c.cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*mcp.Resource{}
	for _, r := range list.Resources {
		got[r.URI] = r
	}
	csv, bin := FileURI(id, "a.csv"), FileURI(id, "sub dir/b.bin")
	if got[csv] == nil || got[csv].MIMEType != "text/csv" || got[csv].Size != 8 || got[bin] == nil || got[bin].Size != 256 {
		t.Fatalf("resources %v; want %s and %s", got, csv, bin)
	}

	rr, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: csv})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "x,y\n1,2\n" || rr.Contents[0].MIMEType != "text/csv" {
		t.Fatalf("read %s: %+v, %v", csv, rr, err)
	}
	rr, err = c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: bin})
	if err != nil || len(rr.Contents) != 1 || len(rr.Contents[0].Blob) != 256 || rr.Contents[0].Text != "" {
		t.Fatalf("read %s: %+v, %v", bin, rr, err)
	}
	rr, err = c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: FileURI(id, "empty.txt")})
	if err != nil || len(rr.Contents) != 1 || len(rr.Contents[0].Blob) != 0 {
		t.Fatalf("read an empty file: %+v, %v", rr, err)
	}

	templates, err := c.cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(templates.ResourceTemplates) != 1 || templates.ResourceTemplates[0].URITemplate != uriTemplate {
		t.Fatalf("templates %v, %v", templates, err)
	}

	for _, uri := range []string{
		FileURI(id, "missing.csv"),
		FileURI("0123abcd", "a.csv"),
		"cellbox://" + id + "/mnt/data/../../etc/passwd",
		"cellbox://" + id + "/mnt/data/%2e%2e/%2e%2e/etc/passwd",
		"cellbox://" + id + "/mnt/data/sub%20dir%2F..%2F..%2Fetc",
		"cellbox://" + id + "/etc/passwd",
		"cellbox://" + id + "/mnt/data/a.csv%00.png",
		"cellbox://" + id + "/mnt/data/",
		"cellbox://" + id + "/mnt/data/sub%20dir",
		"file:///etc/passwd",
	} {
		if rr, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("read %s: %+v, want an error", uri, rr)
		}
	}
}

func TestResourceReadLimit(t *testing.T) {
	s, _ := newServer(t)
	c := connect(t, s)
	res, out := c.call("python", map[string]any{"code": "open('big.bin', 'wb').truncate(10 * 2**20 + 1)"})
	if res.IsError {
		t.Fatal(out)
	}
	_, err := c.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: FileURI(sessionOf(t, res), "big.bin")})
	if err == nil || !strings.Contains(err.Error(), "over the 10 MiB a resource read returns") {
		t.Fatalf("err = %v, want the limit named", err)
	}
}

func TestConnectionCloseEndsSession(t *testing.T) {
	s, m := newServer(t)
	c := connect(t, s)
	res, _ := c.call("python", map[string]any{"code": "1"})
	id := sessionOf(t, res)
	c.cs.Close()
	testbin.WaitFor(t, 30*time.Second, "the session to end with its connection", func() error {
		if _, err := m.Get(context.Background(), id); !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("session %s still there: %v", id, err)
		}
		return nil
	})
}

func TestServerClose(t *testing.T) {
	s, m := newServer(t)
	c := connect(t, s)
	res, _ := c.call("python", map[string]any{"code": "1"})
	id := sessionOf(t, res)
	s.Close()
	res, out := c.call("python", map[string]any{"code": "2"})
	if !res.IsError || !strings.Contains(out, "closing") {
		t.Fatalf("a call after Close: %q", out)
	}
	// The manager's Shutdown ends the session; Close leaves it alone.
	if _, err := m.Get(context.Background(), id); err != nil {
		t.Fatalf("Close ended the session itself: %v", err)
	}
}

func TestStreamableHTTP(t *testing.T) {
	s, _ := newServer(t)
	hs := httptest.NewServer(s.Handler())
	c := newClient(t, &mcp.StreamableClientTransport{Endpoint: hs.URL})
	tools, err := c.cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 2 {
		t.Fatalf("%v, %v", tools, err)
	}
	c.call("python", map[string]any{"code": "x = 41"})
	res, out := c.call("python", map[string]any{"code": "x + 1"})
	if res.IsError || !strings.Contains(out, "42") {
		t.Fatalf("%q", out)
	}
	// Close ends the connection's open GET stream, or the HTTP server could not shut down.
	s.Close()
	hs.Close()
}

func TestParseURI(t *testing.T) {
	const id = "0123456789abcdef01234567"
	good := map[string]string{
		"cellbox://" + id + "/mnt/data/a.csv":           "a.csv",
		"cellbox://" + id + "/mnt/data/sub%20dir/b.png": "sub dir/b.png",
		"cellbox://" + id + "/mnt/data/%C3%A9t%C3%A9":   "été",
		FileURI(id, "100% sure?.txt"):                   "100% sure?.txt",
	}
	for uri, want := range good {
		gotID, rel, err := parseURI(uri)
		if err != nil || gotID != id || rel != want {
			t.Errorf("parseURI(%q) = %q, %q, %v; want %q", uri, gotID, rel, err, want)
		}
	}
	bad := []string{
		"", "cellbox:", "cellbox://", "cellbox://" + id, "cellbox://" + id + "/mnt/data", "cellbox://" + id + "/mnt/data/",
		"cellbox:///mnt/data/a.csv", "cellbox://" + id + "/a.csv", "cellbox://" + id + "/mnt/database/a",
		"cellbox://" + id + "/mnt/data/../x", "cellbox://" + id + "/mnt/data/a/../../x", "cellbox://" + id + "/mnt/data/%2e%2e/x",
		"cellbox://" + id + "/mnt/data/a%2F%2E%2E%2F%2E%2E/x", "cellbox://" + id + "/mnt/data/./a", "cellbox://" + id + "/mnt/data/a//b",
		"cellbox://" + id + "/mnt/data/a%00b", "cellbox://" + id + "/mnt/data/a%0Ab", "cellbox://" + id + "/mnt/data/a%5Cb",
		"cellbox://" + id + "/mnt/data/a\\b", "cellbox://" + id + "/mnt/data/%ff", "cellbox://" + id + "/mnt/data//etc/passwd",
		"cellbox://" + id + "/mnt/data/a?b=1", "cellbox://" + id + "/mnt/data/a#b", "cellbox://u@" + id + "/mnt/data/a",
		"cellbox://" + id + ":80/mnt/data/a", "cellbox://ABC/mnt/data/a", "cellbox://..%2f/mnt/data/a", "file:///mnt/data/a",
		"http://" + id + "/mnt/data/a", "cellbox:" + id + "/mnt/data/a", "cellbox://" + id + "/mnt/data/" + strings.Repeat("a", maxURI),
	}
	for _, uri := range bad {
		if gotID, rel, err := parseURI(uri); err == nil {
			t.Errorf("parseURI(%q) = %q, %q; want an error", uri, gotID, rel)
		}
	}
}

// FuzzParseURI checks that whatever parseURI accepts names a plain relative workspace path
// that FileURI turns back into the same URI's meaning.
func FuzzParseURI(f *testing.F) {
	for _, s := range []string{"cellbox://abc/mnt/data/a.csv", "cellbox://abc/mnt/data/%2e%2e/x", "cellbox://abc/mnt/data/a%00", "cellbox://abc/mnt/data/a/b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		id, rel, err := parseURI(uri)
		if err != nil {
			return
		}
		if rel == "" || strings.HasPrefix(rel, "/") || strings.ContainsAny(rel, "\x00\\") {
			t.Fatalf("parseURI(%q) accepted path %q", uri, rel)
		}
		for _, c := range strings.Split(rel, "/") {
			if c == "" || c == "." || c == ".." {
				t.Fatalf("parseURI(%q) accepted path %q", uri, rel)
			}
		}
		id2, rel2, err := parseURI(FileURI(id, rel))
		if err != nil || !reflect.DeepEqual([]string{id, rel}, []string{id2, rel2}) {
			t.Fatalf("round trip of %q: %q %q %v", uri, id2, rel2, err)
		}
	})
}

// TestSessionEndClearsConnection: when its session ends, a connection forgets it at once,
// with no call needed to notice: its resources list nothing, and its next call starts a
// new session, telling the model why the earlier one ended.
func TestSessionEndClearsConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes; not in -short mode")
	}
	m := sessiontest.NewTold(sessiontest.New(t, nil))
	s := New(m, Options{})
	t.Cleanup(s.Close)
	a := connect(t, s)
	res, _ := a.call("python", map[string]any{"code": "open('kept.txt', 'w').write('x')"})
	id := sessionOf(t, res)
	if err := m.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	for ev := range m.Handled {
		if ev.Kind == session.SessionEnded && ev.SessionID == id {
			break
		}
	}
	s.mu.Lock()
	for _, c := range s.conns {
		c.mu.Lock()
		if c.own != "" || c.last != "" || c.ended != session.EndDeleted {
			t.Errorf("a connection after its session ended: own %q, last %q, ended %q", c.own, c.last, c.ended)
		}
		c.mu.Unlock()
	}
	s.mu.Unlock()
	if l, err := a.cs.ListResources(context.Background(), nil); err != nil || len(l.Resources) != 0 {
		t.Errorf("resources of an ended session: %v %+v", err, l)
	}
	res, out := a.call("python", map[string]any{"code": "print('again')"})
	if res.IsError || !strings.Contains(out, "earlier session had ended (it was deleted)") || sessionOf(t, res) == id {
		t.Fatalf("the call after: %q", out)
	}
}

// A language's tool (--tool-languages) is listed and runs in its language's kernel of the
// connection's session.
func TestLanguageTools(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes; not in -short mode")
	}
	m := sessiontest.New(t, nil)
	s := New(m, Options{TimeoutS: 60, Languages: []string{"javascript", "r", "bash"}})
	t.Cleanup(s.Close)
	c := connect(t, s)
	res, err := c.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "bash,javascript,python,r,shell" { // the SDK lists them by name
		t.Fatalf("tools: %v", names)
	}
	if _, out := c.call("javascript", map[string]any{"code": "const v = 20; await Promise.resolve(v + 1)"}); !strings.HasPrefix(out, "Out[1]: 21") {
		t.Errorf("javascript: %q", out)
	}
	if _, out := c.call("r", map[string]any{"code": "mean(c(1, 5, 9))"}); !strings.HasPrefix(out, "Out[1]: [1] 5") {
		t.Errorf("r: %q", out)
	}
	c.call("bash", map[string]any{"code": "cd /tmp; n=3"})
	if _, out := c.call("bash", map[string]any{"code": "echo $n $PWD"}); !strings.HasPrefix(out, "3 /tmp") {
		t.Errorf("bash keeps its state: %q", out)
	}
	if res, out := c.call("javascript", map[string]any{"code": "null.x"}); !res.IsError || !strings.Contains(out, "TypeError") {
		t.Errorf("a javascript error: %v %q", res.IsError, out)
	}
}

package mcpserver

// A session's tools over MCP, through the Go SDK's client against a real manager (real
// guest, real IPython, the kernel's cellbox module).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/tool"
)

// toolsCell defines tools of each kind of result.
const toolsCell = `from cellbox import tool

@tool
def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    print("adding", a, b)
    return a + b

@tool
def inverse(x: float) -> float:
    """One over x."""
    return 1 / x

@tool
def opaque() -> object:
    """Something JSON cannot hold."""
    return object()

@tool
def plot(n: int) -> int:
    """Plot n points."""
    import matplotlib.pyplot as plt
    plt.plot(list(range(n)))
    plt.show()
    return n
`

// watcher is an MCP connection that counts the tools/list_changed notifications it gets.
type watcher struct {
	*client
	changed chan struct{}
}

func watch(t *testing.T, tr mcp.Transport) *watcher {
	t.Helper()
	w := &watcher{client: &client{t: t}, changed: make(chan struct{}, 16)}
	mc := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { w.changed <- struct{}{} },
	})
	cs, err := mc.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.cs = cs
	t.Cleanup(func() { cs.Close() })
	return w
}

// listChanged waits for a tools/list_changed notification.
func (w *watcher) listChanged() {
	w.t.Helper()
	select {
	case <-w.changed:
	case <-time.After(30 * time.Second):
		w.t.Fatal("no notifications/tools/list_changed")
	}
}

// tools lists the connection's tools by name.
func (w *watcher) tools() map[string]*mcp.Tool {
	w.t.Helper()
	res, err := w.cs.ListTools(context.Background(), nil)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}

func names(tools map[string]*mcp.Tool) []string {
	var out []string
	for n := range tools {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func TestSessionTools(t *testing.T) {
	s, m := newServer(t)
	ct, st := mcp.NewInMemoryTransports()
	if _, err := s.newMCP(nil).Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	w := watch(t, ct)
	if got := names(w.tools()); !slices.Equal(got, []string{"python", "shell"}) {
		t.Fatalf("before any call: %v", got)
	}

	res, out := w.call("python", map[string]any{"code": toolsCell})
	if res.IsError {
		t.Fatal(out)
	}
	id := sessionOf(t, res)
	w.listChanged()
	tools := w.tools()
	if got := names(tools); !slices.Equal(got, []string{"add", "inverse", "opaque", "plot", "python", "shell"}) {
		t.Fatalf("after the cell: %v", got)
	}
	// Listed as the session reports them.
	want, err := m.Tools(session.WithTenant(context.Background(), ""), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range want {
		got := tools[st.Name]
		gs, _ := json.Marshal(got.InputSchema)
		ws, _ := json.Marshal(st.InputSchema)
		if got.Description != st.Description || string(gs) != string(ws) {
			t.Errorf("tool %s listed as %q %s; the session has %q %s", st.Name, got.Description, gs, st.Description, ws)
		}
	}
	if !strings.HasPrefix(tools["add"].Description, "Add two numbers.") {
		t.Errorf("add's description: %q", tools["add"].Description)
	}

	tests := []struct {
		name    string
		tool    string
		args    map[string]any
		isError bool
		want    []string // in the text blocks, in order
		images  int
	}{
		{"value and prints", "add", map[string]any{"a": 40}, false, []string{"42", "adding 40 2"}, 0},
		{"both arguments", "add", map[string]any{"a": 1, "b": 1}, false, []string{"2", "adding 1 1"}, 0},
		{"a float", "inverse", map[string]any{"x": 4}, false, []string{"0.25"}, 0},
		{"raises", "inverse", map[string]any{"x": 0}, true, []string{"ZeroDivisionError"}, 0},
		{"not JSON", "opaque", nil, false, []string{"a value of type object that JSON cannot hold; its repr: <object object at"}, 0},
		{"plot", "plot", map[string]any{"n": 3}, false, []string{"3", "[image 1: image/png, attached]"}, 1},
		{"wrong type", "add", map[string]any{"a": "forty"}, true, []string{"do not match add's input schema"}, 0},
		{"missing argument", "add", map[string]any{"b": 1}, true, []string{"do not match add's input schema", "a"}, 0},
		{"unknown argument", "add", map[string]any{"a": 1, "c": 1}, true, []string{"do not match add's input schema", "c"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := w.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
			if err != nil {
				t.Fatalf("a protocol error, want a result: %v", err)
			}
			var texts []string
			images := 0
			for _, c := range res.Content {
				switch c := c.(type) {
				case *mcp.TextContent:
					texts = append(texts, c.Text)
				case *mcp.ImageContent:
					if c.MIMEType == "image/png" && strings.HasPrefix(string(c.Data), "\x89PNG") {
						images++
					}
				}
			}
			all := strings.Join(texts, "\n")
			if res.IsError != tt.isError || images != tt.images {
				t.Fatalf("isError %v, %d images; want %v, %d: %q", res.IsError, images, tt.isError, tt.images, all)
			}
			if !tt.isError && (len(texts) == 0 || !strings.HasPrefix(texts[0], tt.want[0])) {
				t.Errorf("first text block %q, want the return value %s", texts, tt.want[0])
			}
			for _, want := range tt.want {
				if !strings.Contains(all, want) {
					t.Errorf("%q lacks %q", all, want)
				}
			}
			if tt.isError {
				return
			}
			if got := sessionOf(t, res); got != id {
				t.Errorf("ran in session %s, want %s", got, id)
			}
		})
	}

	// A tool removed (here by code; a redefinition or a kernel restart does as well).
	if res, out := w.call("python", map[string]any{"code": "import cellbox\ncellbox.remove_tool('opaque')"}); res.IsError {
		t.Fatal(out)
	}
	w.listChanged()
	if got := names(w.tools()); slices.Contains(got, "opaque") || !slices.Contains(got, "add") {
		t.Fatalf("after remove_tool: %v", got)
	}
	if _, err := w.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "opaque"}); err == nil {
		t.Error("a removed tool can still be called")
	}

	// A change made elsewhere (REST, another connection) is told too.
	if _, err := m.Execute(session.WithTenant(context.Background(), ""), id, api.ExecuteRequest{Code: "cellbox.remove_tool('plot')"}, nil); err != nil {
		t.Fatal(err)
	}
	w.listChanged()
	if got := names(w.tools()); slices.Contains(got, "plot") {
		t.Fatalf("after remove_tool over REST: %v", got)
	}

	// The session ends: its tools go with it.
	if err := m.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	w.listChanged()
	if got := names(w.tools()); !slices.Equal(got, []string{"python", "shell"}) {
		t.Fatalf("after the session ended: %v", got)
	}
}

// tenantTransport is a client transport over HTTP whose requests carry key as their API
// key, which the test's handler takes as the tenant (as httpapi does after checking it).
func tenantTransport(url, key string) mcp.Transport {
	return &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: keyed{key}}}
}

type keyed struct{ key string }

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-API-Key", k.key)
	return http.DefaultTransport.RoundTrip(r)
}

// TestSessionToolsOverHTTP: over streamable HTTP, with tenants. A connection lists the
// tools of the session it works in, the one it named last with session_id included; a
// session of another tenant, and so its tools, it cannot reach.
func TestSessionToolsOverHTTP(t *testing.T) {
	s, _ := newServer(t)
	h := s.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(session.WithTenant(r.Context(), r.Header.Get("X-API-Key"))))
	}))
	defer hs.Close()
	defer s.Close()

	alice := watch(t, tenantTransport(hs.URL, "alice"))
	res, out := alice.call("python", map[string]any{"code": "from cellbox import tool\n@tool\ndef secret(x: int) -> int:\n    return x * 2"})
	if res.IsError {
		t.Fatal(out)
	}
	id := sessionOf(t, res)
	alice.listChanged()
	if got := names(alice.tools()); !slices.Contains(got, "secret") {
		t.Fatalf("alice's tools: %v", got)
	}
	if res, out := alice.call("secret", map[string]any{"x": 21}); res.IsError || out != "42" {
		t.Fatalf("secret(21): %v %q", res.IsError, out)
	}

	// Another connection of alice's that names the session works in it, and lists its tools.
	again := watch(t, tenantTransport(hs.URL, "alice"))
	if res, out := again.call("python", map[string]any{"code": "1", "session_id": id}); res.IsError {
		t.Fatal(out)
	}
	if got := names(again.tools()); !slices.Contains(got, "secret") {
		t.Fatalf("a connection working in alice's session lists %v", got)
	}

	// Bob can neither reach the session nor see its tools.
	bob := watch(t, tenantTransport(hs.URL, "bob"))
	res, out = bob.call("python", map[string]any{"code": "1", "session_id": id})
	if !res.IsError || !strings.Contains(out, "no session") {
		t.Fatalf("bob named alice's session: %q", out)
	}
	if got := names(bob.tools()); !slices.Equal(got, []string{"python", "shell"}) {
		t.Fatalf("bob lists %v", got)
	}
	if _, err := bob.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "secret", Arguments: map[string]any{"x": 1}}); err == nil {
		t.Fatal("bob called alice's tool")
	}
}

func TestRenderToolCall(t *testing.T) {
	tests := []struct {
		name string
		res  api.ToolCallResult
		want []string
	}{
		{"null", api.ToolCallResult{Status: api.StatusOK, HasValue: true}, []string{"null"}},
		{"object, no HTML escaping", api.ToolCallResult{Status: api.StatusOK, HasValue: true, Value: map[string]any{"a": "<b>"}}, []string{`{"a":"<b>"}`}},
		{"printed", api.ToolCallResult{Status: api.StatusOK, HasValue: true, Value: 1.5,
			Outputs: []api.Output{{Type: api.OutputStream, Name: "stdout", Text: "hi\n"}}}, []string{"1.5", "hi"}},
		{"repr", api.ToolCallResult{Status: api.StatusOK, Text: "{1, 2}", ValueType: "frozenset"},
			[]string{"a value of type frozenset that JSON cannot hold; its repr: {1, 2}"}},
		{"timeout", api.ToolCallResult{Status: api.StatusTimeout, Message: "the call ran past its 1 s"}, []string{"Status: timeout: the call ran past its 1 s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := renderToolCall(&tt.res, tool.RenderLimits{})
			if !slices.Equal(got.texts, tt.want) {
				t.Errorf("texts %q, want %q", got.texts, tt.want)
			}
			if got.IsError != (tt.res.Status != api.StatusOK) {
				t.Errorf("isError %v for status %s", got.IsError, tt.res.Status)
			}
		})
	}
}

// TestAddToolRefused: a schema the SDK would panic on is refused, and the server lives.
func TestAddToolRefused(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	schema := map[string]any{"type": "object", "properties": map[string]any{"p": map[string]any{"type": "array", "x-mcp-header": "X-P"}}}
	if err := addTool(srv, &mcp.Tool{Name: "t", InputSchema: schema}, nil); err == nil {
		t.Fatal("no error for an x-mcp-header on an array")
	}
	if err := addTool(srv, &mcp.Tool{Name: "t", InputSchema: map[string]any{"type": "object"}}, nil); err != nil {
		t.Fatal(err)
	}
}

// slipped is the manager with tools named like built-in ones added to every session's list
// while on (as if they slipped past its check, which refuses them); it records the calls
// of a session's tools.
type slipped struct {
	*session.Manager
	on     atomic.Bool
	mu     sync.Mutex
	called []string
}

func (s *slipped) Tools(ctx context.Context, id string) ([]api.SessionTool, error) {
	tools, err := s.Manager.Tools(ctx, id)
	if err != nil || !s.on.Load() {
		return tools, err
	}
	for _, name := range []string{"bash", "Bash", "PYTHON", "r", "shell"} {
		tools = append(tools, api.SessionTool{Name: name, Description: "a session's " + name,
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "integer"}}}})
	}
	return tools, nil
}

func (s *slipped) CallTool(ctx context.Context, id, name string, req api.ToolCallRequest, onOutput func(api.Output)) (*api.ToolCallResult, error) {
	s.mu.Lock()
	s.called = append(s.called, name)
	s.mu.Unlock()
	return s.Manager.CallTool(ctx, id, name, req, onOutput)
}

// TestAttackSessionToolNamedLikeBuiltin: over a real MCP client, a session's tool named
// like a built-in one (in any case) never replaces the built-in, is never listed, and its
// going never removes the built-in; a call of the name runs the built-in when it is on.
func TestAttackSessionToolNamedLikeBuiltin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes; not in -short mode")
	}
	m := sessiontest.New(t, nil)
	for _, langs := range [][]string{nil, {"bash", "r"}} {
		t.Run(fmt.Sprintf("languages %v", langs), func(t *testing.T) {
			sl := &slipped{Manager: m}
			sl.on.Store(true)
			s := New(sl, Options{TimeoutS: 60, Languages: langs})
			t.Cleanup(s.Close)
			ct, st := mcp.NewInMemoryTransports()
			if _, err := s.newMCP(nil).Connect(context.Background(), st, nil); err != nil {
				t.Fatal(err)
			}
			w := watch(t, ct)
			builtins := names(w.tools())
			if res, out := w.call("python", map[string]any{"code": "from cellbox import tool\n\n@tool\ndef area(w: float) -> float:\n    return w\n"}); res.IsError {
				t.Fatal(out)
			}
			tools := w.tools()
			if got, want := names(tools), slices.Sorted(slices.Values(append(slices.Clone(builtins), "area"))); !slices.Equal(got, want) {
				t.Errorf("listed %v, want %v", got, want)
			}
			for _, name := range builtins {
				if tl := tools[name]; tl == nil || strings.HasPrefix(tl.Description, "a session's") {
					t.Errorf("the built-in %s was replaced: %+v", name, tl)
				}
			}
			if langs != nil {
				if res, out := w.call("bash", map[string]any{"code": "echo $((40 + 2))"}); res.IsError || !strings.HasPrefix(out, "42") {
					t.Errorf("the built-in bash: %v %q", res.IsError, out)
				}
			} else if res, err := w.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"x": 1}}); err == nil && !res.IsError {
				t.Errorf("bash, with no language tools, ran: %q", text(res))
			}
			// The session's list loses them (and area): every built-in stays.
			sl.on.Store(false)
			if res, out := w.call("python", map[string]any{"code": "import cellbox\ncellbox.remove_tool('area')"}); res.IsError {
				t.Fatal(out)
			}
			if got := names(w.tools()); !slices.Equal(got, builtins) {
				t.Errorf("after the session's tools went: %v, want %v", got, builtins)
			}
			if res, out := w.call("shell", map[string]any{"command": "echo still"}); res.IsError || !strings.Contains(out, "still") {
				t.Errorf("the built-in shell: %v %q", res.IsError, out)
			}
			sl.mu.Lock()
			defer sl.mu.Unlock()
			if len(sl.called) != 0 {
				t.Errorf("the session's tools %v were called", sl.called)
			}
		})
	}
}

// A tenant's MCP connections are capped (each keeps a server until it closes or idles
// out, tool call or not): past the cap a new one is refused with 429, another tenant's is
// not, and one closed makes room.
func TestConnectionsCapped(t *testing.T) {
	m := sessiontest.New(t, nil)
	s := New(m, Options{MaxConnections: 2})
	h := s.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(session.WithTenant(r.Context(), r.Header.Get("X-API-Key"))))
	}))
	defer hs.Close()
	defer s.Close()
	open := func(key string) (*mcp.ClientSession, error) {
		mc := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		return mc.Connect(context.Background(), tenantTransport(hs.URL, key), nil)
	}
	var alice []*mcp.ClientSession
	for range 2 {
		cs, err := open("alice")
		if err != nil {
			t.Fatal(err)
		}
		alice = append(alice, cs)
	}
	if cs, err := open("alice"); err == nil {
		cs.Close()
		t.Fatal("a third connection of alice's opened past the cap of 2")
	} else if !strings.Contains(err.Error(), "Too Many Requests") {
		t.Errorf("the third connection: %v; want 429", err)
	}
	bob, err := open("bob")
	if err != nil {
		t.Fatalf("bob's connection, alice at her cap: %v", err)
	}
	bob.Close()
	alice[0].Close()
	if !testbin.Eventually(10*time.Second, func() bool {
		cs, err := open("alice")
		if err == nil {
			cs.Close()
		}
		return err == nil
	}) {
		t.Error("alice cannot connect after closing one of her connections")
	}
	alice[1].Close()
}

package main

// A cellbox cluster on a real Kubernetes API server: three `cellbox serve --cluster
// kubernetes` nodes on loopback, each with its own state dir, registered through the API
// server with the service account and RBAC of deploy/kubernetes.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/artifacts/artifactstest"
	"github.com/cellbox/cellbox/internal/cluster/clustertest"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/httpapi"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/move"
	"github.com/cellbox/cellbox/internal/testbin"
)

// TestCluster: sessions spread over the nodes and every call on one reaches its node
// through any node (SSE streams and a 64 MiB upload included); a node that crashes answers
// unavailable while the others carry on and new sessions avoid it; restarted nodes (after a
// crash, and after a graceful stop) have their sessions back, state and all.
func TestCluster(t *testing.T) {
	tc := newTestCluster(t, "node-a", "node-b", "node-c")
	names, clients, nodes, start := tc.names, tc.clients, tc.nodes, func(n string) { tc.start(t, n) }
	ctx := t.Context()

	nodeOf := func(id string) string { return tc.nodeOf(t, id) }

	// 60 sessions, all through node-a: they spread.
	var ids []string
	count := map[string]int{}
	for i := range 60 {
		s, err := clients["node-a"].CreateSession(ctx, api.CreateSessionRequest{})
		if err != nil {
			t.Fatalf("create session %d: %v", i, err)
		}
		ids = append(ids, s.ID)
		count[nodeOf(s.ID)]++
	}
	t.Logf("60 sessions created through node-a went to %v", count)
	for _, n := range names {
		if count[n] < 10 {
			t.Errorf("%s got %d of 60 sessions (%v): they should spread", n, count[n], count)
		}
	}

	// Every session, through the two nodes that are not its own: state set on one call is
	// there on the next.
	other := func(id string, k int) *client.Client { // the k-th node (1 or 2) after id's own
		for i, n := range names {
			if n == nodeOf(id) {
				return clients[names[(i+k)%3]]
			}
		}
		panic("unreachable")
	}
	for i, id := range ids {
		mustRun(t, other(id, 1), id, fmt.Sprintf("x = %d", i), "")
		mustRun(t, other(id, 2), id, "print(x)", fmt.Sprintf("%d\n", i))
	}
	list, err := clients["node-b"].SessionList(ctx)
	if err != nil || len(list.Sessions) != 60 || len(list.UnavailableNodes) != 0 {
		t.Fatalf("list through node-b: %d sessions, unavailable %v, %v; want all 60", len(list.Sessions), list.UnavailableNodes, err)
	}
	// Another tenant, through a node that forwards: none of it is there.
	for _, n := range names {
		c := client.New(tc.nodes[n].URL, client.WithAPIKey(tc.otherKey))
		if l, err := c.SessionList(ctx); err != nil || len(l.Sessions) != 0 {
			t.Errorf("the other tenant lists through %s: %+v, %v; want none", n, l, err)
		}
		for _, id := range ids {
			if nodeOf(id) == n {
				continue
			}
			if _, err := c.Execute(ctx, id, api.ExecuteRequest{Code: "print(x)"}); !client.IsNotFound(err) {
				t.Fatalf("the other tenant runs code in session %s through %s: %v; want not found", id, n, err)
			}
			break
		}
	}
	if _, err := client.New(tc.nodes["node-a"].URL, client.WithAPIKey("cbk_wrong")).GetSession(ctx, ids[0]); !client.IsUnauthenticated(err) {
		t.Errorf("a wrong key through node-a: %v; want unauthenticated", err)
	}
	// A body past --max-body-bytes (8 MiB) is refused, whichever node would take the
	// session; the node serves on.
	for _, n := range names {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tc.nodes[n].URL+"/v1/sessions", bytes.NewReader(bytes.Repeat([]byte(" "), 9<<20)))
		req.Header.Set("Authorization", "Bearer "+tc.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("a 9 MiB body to %s: %v", n, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a 9 MiB body to %s: HTTP %d, want 413", n, res.StatusCode)
		}
	}

	// SSE through another node arrives as it is written: the cell waits for a file the test
	// uploads only once the first line has come through.
	id := ids[0]
	got := make(chan error, 1)
	res, err := other(id, 1).ExecuteStream(ctx, id, api.ExecuteRequest{TimeoutS: 60, Code: `import os, time
print("first", flush=True)
while not os.path.exists("/mnt/data/go"):
    time.sleep(0.02)
print("second")`}, func(o api.Output) {
		if strings.Contains(o.Text, "first") {
			go func() {
				_, err := other(id, 2).UploadFile(ctx, id, "go", strings.NewReader("go"))
				got <- err
			}()
		}
	})
	if err != nil || res.Status != api.StatusOK || !strings.Contains(joinText(res), "second") {
		t.Fatalf("streamed cell through another node: %+v, %v", res, err)
	}
	if err := <-got; err != nil {
		t.Fatalf("upload while the cell waits: %v", err)
	}

	// 64 MiB up through one node, down through the other, and checked inside.
	big := randBytes(t, 64<<20)
	sum := sha256.Sum256(big)
	if _, err := other(id, 1).UploadFile(ctx, id, "big.bin", bytes.NewReader(big)); err != nil {
		t.Fatalf("upload 64 MiB through another node: %v", err)
	}
	var down bytes.Buffer
	if n, err := other(id, 2).DownloadFileTo(ctx, id, "big.bin", &down); err != nil || n != int64(len(big)) || sha256.Sum256(down.Bytes()) != sum {
		t.Fatalf("download through another node: %d bytes, %v; want the 64 MiB uploaded", n, err)
	}
	mustRun(t, other(id, 1), id, "import hashlib; print(hashlib.sha256(open('big.bin','rb').read()).hexdigest())", hex.EncodeToString(sum[:])+"\n")

	// node-c crashes: its sessions answer unavailable once its Lease runs out; the others'
	// sessions carry on; new sessions go elsewhere; the list says what is missing.
	crash(t, nodes["node-c"])
	var onC []string
	for _, id := range ids {
		if nodeOf(id) == "node-c" {
			onC = append(onC, id)
		}
	}
	testbin.WaitFor(t, time.Minute, "node-c's sessions answer unavailable", func() error {
		_, err := clients["node-a"].GetSession(ctx, onC[0])
		if !client.IsUnavailable(err) {
			return fmt.Errorf("GetSession through node-a: %v", err)
		}
		if !strings.Contains(err.Error(), "node-c") {
			t.Errorf("the error does not name the node: %v", err)
		}
		return nil
	})
	for i, id := range ids {
		if nodeOf(id) != "node-c" {
			mustRun(t, clients[names[i%2]], id, "print(x)", fmt.Sprintf("%d\n", i))
		}
	}
	for i := range 9 {
		s, err := clients[names[i%2]].CreateSession(ctx, api.CreateSessionRequest{})
		if err != nil {
			t.Fatalf("create a session with node-c down: %v", err)
		}
		if nodeOf(s.ID) == "node-c" {
			t.Fatalf("a new session went to node-c, which is down")
		}
		ids = append(ids, s.ID)
	}
	list, err = clients["node-a"].SessionList(ctx)
	if err != nil || len(list.Sessions) != len(ids)-len(onC) || strings.Join(list.UnavailableNodes, ",") != "node-c" {
		t.Fatalf("list with node-c down: %d sessions (want %d), unavailable %v (want node-c), %v", len(list.Sessions), len(ids)-len(onC), list.UnavailableNodes, err)
	}

	// node-b stops gracefully: the others say at once that it is restarting.
	nodes["node-b"].Cmd.Process.Signal(syscall.SIGTERM)
	<-nodes["node-b"].Exited
	var onB string
	for _, id := range ids {
		if nodeOf(id) == "node-b" {
			onB = id
			break
		}
	}
	testbin.WaitFor(t, time.Minute, "node-b's sessions answer restarting", func() error {
		_, err := clients["node-a"].GetSession(ctx, onB)
		if !client.IsUnavailable(err) || !strings.Contains(err.Error(), "restarting") {
			return fmt.Errorf("GetSession through node-a: %v; want unavailable, restarting", err)
		}
		return nil
	})

	// Both come back on their state dirs: every session is there, with its variables.
	start("node-c")
	start("node-b")
	tc.waitLive(t, names...)
	for i, id := range ids[:60] {
		mustRun(t, clients[names[(i+1)%3]], id, "print(x)", fmt.Sprintf("%d\n", i))
	}
	list, err = clients["node-c"].SessionList(ctx)
	if err != nil || len(list.Sessions) != len(ids) || len(list.UnavailableNodes) != 0 {
		t.Fatalf("list after the restarts: %d sessions (want %d), unavailable %v, %v", len(list.Sessions), len(ids), list.UnavailableNodes, err)
	}
}

// An agent run, a conversation and its messages reach the node of the session they work in
// through any node, the conversation is found through any node by its id, and the list of
// conversations through any node has every node's; an MCP session reaches its node through
// any node; E2B's SDK works with its API on one node and its sandbox's traffic on another. The model is a fake speaking OpenAI's
// wire protocol; it asks for print(x), a variable only the session has.
func TestClusterOtherAPIs(t *testing.T) {
	llm := llmtest.NewOpenAI(t, func(r llmtest.Request) llmtest.Reply {
		if res, ok := lastResult(r); ok {
			return llmtest.Text("x is " + strings.TrimSpace(res.Text))
		}
		return llmtest.CallTool("python", `{"code": "print(x)"}`)
	})
	t.Setenv("OPENAI_BASE_URL", llm.URL)
	t.Setenv("OPENAI_API_KEY", llm.Key)
	// The nodes keep what runs make in one bucket (the Artifacts subtest).
	s3 := artifactstest.StartS3(t, "artifacts")
	t.Setenv("CELLBOX_ARTIFACTS_STORE", "s3://artifacts/cluster")
	tc := newTestCluster(t, "node-a", "node-b")
	ctx := t.Context()
	s, err := tc.clients["node-a"].CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	own := tc.nodeOf(t, s.ID)
	other := map[string]string{"node-a": "node-b", "node-b": "node-a"}[own]
	mustRun(t, tc.clients[own], s.ID, "x = 7", "")
	call := func(node, method, path string, body, out any) int {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, tc.nodes[node].URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+tc.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s through %s: %v", method, path, node, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if out != nil && json.Unmarshal(b, out) != nil {
			t.Fatalf("%s %s through %s: HTTP %d, %s", method, path, node, res.StatusCode, b)
		}
		return res.StatusCode
	}

	var ar api.AgentResponse
	if st := call(other, "POST", "/v1/agent", api.AgentRequest{Input: "what is x?", SessionID: s.ID}, &ar); st != http.StatusOK || ar.Output != "x is 7" {
		t.Errorf("/v1/agent through %s in %s's session: HTTP %d, %+v; want x is 7", other, own, st, ar)
	}
	var conv api.Conversation
	if st := call(other, "POST", "/v1/conversations", api.ConversationRequest{SessionID: s.ID}, &conv); st != http.StatusCreated ||
		!strings.HasPrefix(conv.ID, "conv_"+config.NodeTag(own)) {
		t.Fatalf("a conversation in %s's session through %s: HTTP %d, %+v; want one of %s (conv_%s...)", own, other, st, conv, own, config.NodeTag(own))
	}
	for _, n := range []string{other, own} {
		var turn api.ConversationTurn
		if st := call(n, "POST", "/v1/conversations/"+conv.ID+"/messages", api.MessageRequest{Input: "x?"}, &turn); st != http.StatusOK || turn.Output != "x is 7" {
			t.Errorf("a message through %s: HTTP %d, %+v; want x is 7", n, st, turn)
		}
		var got api.Conversation
		if st := call(n, "GET", "/v1/conversations/"+conv.ID, nil, &got); st != http.StatusOK || got.ID != conv.ID {
			t.Errorf("GET the conversation through %s: HTTP %d, %+v", n, st, got)
		}
	}
	// One conversation on each node: the list through either has both.
	var here api.Conversation
	if st := call(other, "POST", "/v1/conversations", api.ConversationRequest{}, &here); st != http.StatusCreated {
		t.Fatalf("a conversation through %s: HTTP %d", other, st)
	}
	for _, n := range tc.names {
		var list api.ConversationList
		if st := call(n, "GET", "/v1/conversations", nil, &list); st != http.StatusOK || len(list.Conversations) != 2 || len(list.UnavailableNodes) != 0 {
			t.Errorf("the conversations through %s: HTTP %d, %+v; want 2", n, st, list)
		}
	}

	// An MCP client that opens its session through node-a and sends the session's requests
	// through node-b: the MCP session, and the cellbox session its tools run in, are on
	// node-a, and node-b forwards to it.
	hop := &hopper{to: tc.nodes["node-b"].URL, key: tc.key}
	mc := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: tc.nodes["node-a"].URL + "/mcp", HTTPClient: &http.Client{Transport: hop}}, nil)
	if err != nil {
		t.Fatalf("MCP connect through node-a: %v", err)
	}
	defer cs.Close()
	if id := cs.ID(); !strings.HasPrefix(id, config.NodeTag("node-a")) {
		t.Errorf("MCP session id %q: want node-a's tag first", id)
	}
	for i, code := range []string{"y = 6 * 7", "print(y)"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "python", Arguments: map[string]any{"code": code}})
		if err != nil || res.IsError || (i == 1 && !strings.Contains(text(res), "42")) {
			t.Fatalf("MCP python %q through node-b: %+v, %v", code, res, err)
		}
	}
	if hop.forwarded.Load() < 2 {
		t.Errorf("%d MCP requests went through node-b; want the calls to", hop.forwarded.Load())
	}

	// E2B's list of sandboxes through either node is the cluster's sessions, from both.
	rest, err := tc.clients["node-a"].SessionList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range tc.names {
		var sandboxes []struct {
			SandboxID string `json:"sandboxID"`
		}
		if st := call(n, "GET", "/v2/sandboxes", nil, &sandboxes); st != http.StatusOK || len(sandboxes) != len(rest.Sessions) {
			t.Errorf("E2B's sandboxes through %s: HTTP %d, %d of them; want the %d sessions of both nodes", n, st, len(sandboxes), len(rest.Sessions))
		}
		tags := map[string]bool{}
		for _, sb := range sandboxes {
			tags[sb.SandboxID[:8]] = true
		}
		if len(tags) != 2 {
			t.Errorf("E2B's sandboxes through %s are of %d nodes; want 2", n, len(tags))
		}
	}
	// E2B's SDK, unmodified, with its control plane on node-a and the sandbox's traffic on
	// node-b: whichever node the sandbox is on, one of them forwards.
	r := runE2BProgram(t, tc.nodes["node-a"].URL, tc.nodes["node-b"].URL, tc.key)
	if !strings.Contains(r, "8000 rows") || !strings.Contains(r, `"killed":true`) {
		t.Errorf("the E2B program across nodes: %s", r)
	}

	t.Run("OpenAI", func(t *testing.T) { clusterOpenAI(t, tc, call, s.ID, own, other) })
	t.Run("SavedTools", func(t *testing.T) { clusterSavedTools(t, tc, call, s.ID, own, other) })
	t.Run("Links", func(t *testing.T) { clusterLinks(t, tc, call, s.ID, own, other) })
	t.Run("Artifacts", func(t *testing.T) { clusterArtifacts(t, call, s3, s.ID, own, other) })
	t.Run("Jupyter", func(t *testing.T) { clusterJupyter(t, tc, call) })
}

// clusterArtifacts: a cell run through the node without its session has its files kept by
// the session's node, and the result that comes back through the other names the objects,
// their URLs working (links asked: uploaded before the answer).
func clusterArtifacts(t *testing.T, call func(node, method, path string, body, out any) int, s3, sid, own, other string) {
	var res api.ExecuteResult
	if st := call(other, "POST", "/v1/sessions/"+sid+"/execute", api.ExecuteRequest{Code: "open('kept.txt', 'w').write('in the bucket')", Links: true}, &res); st != http.StatusOK ||
		len(res.Files) != 1 || !strings.HasPrefix(res.Files[0].Object, "s3://artifacts/cluster/t-") || !strings.Contains(res.Files[0].Object, "/"+sid+"/") ||
		!strings.HasPrefix(res.Files[0].URL, s3+"/artifacts/cluster/") || res.Message != "" {
		t.Fatalf("a cell through %s in %s's session: HTTP %d, %+v", other, own, st, res)
	}
	if st, body := testbin.Get(t, res.Files[0].URL); st != http.StatusOK || body != "in the bucket" {
		t.Errorf("the object's URL: HTTP %d, %q", st, body)
	}
}

// clusterLinks: a link to a file of a session on one node, signed through the other, works
// without a key through either node (the one without the session forwards it), and a
// rotation through either ends it on both.
func clusterLinks(t *testing.T, tc *testCluster, call func(node, method, path string, body, out any) int, sid, own, other string) {
	mustRun(t, tc.clients[own], sid, "open('linked.txt', 'w').write('across')", "")
	var l api.Link
	if st := call(other, "POST", "/v1/sessions/"+sid+"/links", api.LinkRequest{Path: "linked.txt"}, &l); st != http.StatusOK ||
		!strings.HasPrefix(l.URL, tc.nodes[other].URL+"/v1/sessions/"+sid+"/files/linked.txt?") {
		t.Fatalf("a link signed through %s to a file on %s: HTTP %d, %+v", other, own, st, l)
	}
	fetch := func(node string) (int, string) {
		t.Helper()
		return testbin.Get(t, strings.Replace(l.URL, tc.nodes[other].URL, tc.nodes[node].URL, 1))
	}
	for _, n := range tc.names {
		if st, body := fetch(n); st != http.StatusOK || body != "across" {
			t.Errorf("the link through %s, without a key: HTTP %d, %q", n, st, body)
		}
	}
	if st := call(other, "POST", "/v1/links/rotate", nil, nil); st != http.StatusNoContent {
		t.Fatalf("rotate through %s: HTTP %d", other, st)
	}
	for _, n := range tc.names {
		if st, body := fetch(n); st != http.StatusForbidden {
			t.Errorf("the link through %s after a rotation: HTTP %d, %q", n, st, body)
		}
	}
}

// clusterSavedTools: the key's saved tools are one library across the nodes. A tool saved
// by a session on one node is listed and found through either, loads into a session on the
// other (and again after that kernel restarts), the version saved last is the one seen,
// and a delete through either node deletes it on both.
func clusterSavedTools(t *testing.T, tc *testCluster, call func(node, method, path string, body, out any) int, sid, own, other string) {
	// Defined in a session, proposed by its code, saved by the caller through any node.
	save := func(id, name string) {
		t.Helper()
		var st api.SavedTool
		for _, n := range tc.names {
			if n != tc.nodeOf(t, id) {
				if code := call(n, "POST", "/v1/sessions/"+id+"/tools/"+name+"/save", api.SaveToolRequest{}, &st); code != http.StatusOK || st.Name != name {
					t.Fatalf("save %s through %s: HTTP %d, %+v", name, n, code, st)
				}
				return
			}
		}
	}
	define := func(id, node, body string) {
		t.Helper()
		mustRun(t, tc.clients[node], id, "from cellbox import tool\n\n@tool(save=True)\ndef triple(x: int) -> int:\n    return "+body+"\n", "")
		save(id, "triple")
	}
	define(sid, own, "3 * x")
	for _, n := range tc.names {
		var l api.SavedToolList
		if st := call(n, "GET", "/v1/saved-tools", nil, &l); st != http.StatusOK || len(l.Tools) != 1 || l.Tools[0].Name != "triple" || len(l.UnavailableNodes) != 0 {
			t.Errorf("the saved tools through %s: HTTP %d, %+v; want triple, saved on %s", n, st, l, own)
		}
		var one api.SavedTool
		if st := call(n, "GET", "/v1/saved-tools/triple", nil, &one); st != http.StatusOK || !strings.Contains(one.Source, "return 3 * x") {
			t.Errorf("GET the saved tool through %s: HTTP %d, %+v", n, st, one)
		}
	}
	// A session on the other node: placement gives a new session to the node with room.
	var there api.Session
	for range 4 {
		if st := call(own, "POST", "/v1/sessions", api.CreateSessionRequest{}, &there); st != http.StatusCreated && st != http.StatusOK {
			t.Fatalf("a session: HTTP %d", st)
		}
		if tc.nodeOf(t, there.ID) == other {
			break
		}
	}
	if tc.nodeOf(t, there.ID) != other {
		t.Fatalf("no session was placed on %s", other)
	}
	var tools api.SessionToolList
	if st := call(own, "POST", "/v1/sessions/"+there.ID+"/tools/load", api.LoadToolsRequest{Names: []string{"triple"}}, &tools); st != http.StatusOK ||
		len(tools.Tools) != 1 || tools.Tools[0].Name != "triple" {
		t.Fatalf("load triple, saved on %s, into a session on %s: HTTP %d, %+v", own, other, st, tools)
	}
	triple := func(want float64) {
		t.Helper()
		var r api.ToolCallResult
		if st := call(own, "POST", "/v1/sessions/"+there.ID+"/tools/triple/call", api.ToolCallRequest{Arguments: json.RawMessage(`{"x": 5}`)}, &r); st != http.StatusOK || r.Value != want {
			t.Errorf("triple(5) on %s: HTTP %d, %+v; want %v", other, st, r, want)
		}
	}
	triple(15)
	// Loading all of them brings the ones of every node; the index has no sources.
	mustRun(t, tc.clients[own], sid, "from cellbox import tool\n\n@tool(save=True)\ndef half(x: float) -> float:\n    return x / 2\n", "")
	save(sid, "half")
	var index api.SavedToolList
	if st := call(other, "GET", "/v1/saved-tools?source=false", nil, &index); st != http.StatusOK || len(index.Tools) != 2 || index.Tools[0].Source != "" {
		t.Errorf("the index through %s: HTTP %d, %+v", other, st, index)
	}
	if st := call(other, "POST", "/v1/sessions/"+there.ID+"/tools/load", api.LoadToolsRequest{}, &tools); st != http.StatusOK || len(tools.Tools) != 2 {
		t.Errorf("load all into the session on %s: HTTP %d, %+v", other, st, tools)
	}
	// After a kernel restart there, it is loaded again from that node's own copy.
	if st := call(other, "POST", "/v1/sessions/"+there.ID+"/restart", nil, nil); st != http.StatusOK && st != http.StatusNoContent {
		t.Fatalf("restart: HTTP %d", st)
	}
	triple(15)
	// Saved again on the other node, later: that version is the one seen through both.
	define(there.ID, other, "3 * x + 1")
	for _, n := range tc.names {
		var one api.SavedTool
		if st := call(n, "GET", "/v1/saved-tools/triple", nil, &one); st != http.StatusOK || !strings.Contains(one.Source, "return 3 * x + 1") {
			t.Errorf("GET the saved tool through %s after it was saved again on %s: HTTP %d, %+v", n, other, st, one)
		}
	}
	for _, name := range []string{"triple", "half"} {
		if st := call(other, "DELETE", "/v1/saved-tools/"+name, nil, nil); st != http.StatusNoContent {
			t.Fatalf("delete %s through %s: HTTP %d", name, other, st)
		}
	}
	for _, n := range tc.names {
		var l api.SavedToolList
		if st := call(n, "GET", "/v1/saved-tools", nil, &l); st != http.StatusOK || len(l.Tools) != 0 {
			t.Errorf("the saved tools through %s after the delete: HTTP %d, %+v", n, st, l)
		}
		if st := call(n, "GET", "/v1/saved-tools/triple", nil, nil); st != http.StatusNotFound {
			t.Errorf("GET the deleted tool through %s: HTTP %d", n, st)
		}
	}
}

// clusterOpenAI: OpenAI's APIs across two nodes. Files stay on the node they were uploaded
// to and are found through either; a container takes files of both nodes; calls on a
// container, a file or a response reach its node through the other; the lists have both
// nodes'. Session sid, on node own, has x = 7.
func clusterOpenAI(t *testing.T, tc *testCluster, call func(node, method, path string, body, out any) int, sid, own, other string) {
	type file struct {
		ID       string `json:"id"`
		Filename string `json:"filename"`
	}
	type list struct {
		Data []struct {
			ID   string `json:"id"`
			Path string `json:"path"`
		} `json:"data"`
	}
	upload := func(node, name, content string) file {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		mw.WriteField("purpose", "user_data")
		w, _ := mw.CreateFormFile("file", name)
		io.WriteString(w, content)
		mw.Close()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", tc.nodes[node].URL+"/v1/files", &body)
		req.Header.Set("Authorization", "Bearer "+tc.key)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var f file
		if json.NewDecoder(res.Body).Decode(&f) != nil || res.StatusCode != http.StatusOK || !strings.HasPrefix(f.ID, "file-"+config.NodeTag(node)) {
			t.Fatalf("upload %s through %s: HTTP %d, %+v; want a file of %s", name, node, res.StatusCode, f, node)
		}
		return f
	}
	fa, fb := upload("node-a", "a.txt", "from a"), upload("node-b", "b.txt", "from b")
	for _, n := range tc.names {
		var l list
		if st := call(n, "GET", "/v1/files", nil, &l); st != http.StatusOK || len(l.Data) != 2 {
			t.Errorf("the files through %s: HTTP %d, %+v; want both nodes'", n, st, l)
		}
		for _, f := range []file{fa, fb} {
			var got file
			if st := call(n, "GET", "/v1/files/"+f.ID, nil, &got); st != http.StatusOK || got.Filename != f.Filename {
				t.Errorf("GET file %s through %s: HTTP %d, %+v", f.ID, n, st, got)
			}
		}
	}
	// A container with a file of each node: wherever it is placed, one comes from the other.
	var c struct{ ID string }
	if st := call("node-a", "POST", "/v1/containers", map[string]any{"name": "both", "file_ids": []string{fa.ID, fb.ID}}, &c); st != http.StatusOK {
		t.Fatalf("a container with both nodes' files: HTTP %d", st)
	}
	cnode := tc.nodeOf(t, strings.TrimPrefix(c.ID, "cntr_"))
	for _, n := range tc.names {
		var l list
		if st := call(n, "GET", "/v1/containers/"+c.ID+"/files", nil, &l); st != http.StatusOK || len(l.Data) != 2 {
			t.Fatalf("the container's files through %s (it is on %s): HTTP %d, %+v", n, cnode, st, l)
		}
		for _, cf := range l.Data {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", tc.nodes[n].URL+"/v1/containers/"+c.ID+"/files/"+cf.ID+"/content", nil)
			req.Header.Set("Authorization", "Bearer "+tc.key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if want := "from " + strings.TrimSuffix(path.Base(cf.Path), ".txt"); string(b) != want {
				t.Errorf("%s through %s: %q; want %q", cf.Path, n, b, want)
			}
		}
	}
	// The containers list through either node has both nodes' sessions.
	for _, n := range tc.names {
		var l list
		if st := call(n, "GET", "/v1/containers?limit=100", nil, &l); st != http.StatusOK {
			t.Fatalf("containers through %s: HTTP %d", n, st)
		}
		var ids []string
		for _, d := range l.Data {
			ids = append(ids, d.ID)
		}
		if !slices.Contains(ids, c.ID) || !slices.Contains(ids, "cntr_"+sid) {
			t.Errorf("containers through %s: %v; want %s and cntr_%s", n, ids, c.ID, sid)
		}
	}
	// A response in session sid's container, through the other node, runs on sid's node; it
	// and the one that goes on from it are found through either node.
	type response struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Output []struct {
			Type    string `json:"type"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	text := func(r response) string { // what OpenAI's SDKs call output_text
		var b strings.Builder
		for _, o := range r.Output {
			for _, c := range o.Content {
				if o.Type == "message" {
					b.WriteString(c.Text)
				}
			}
		}
		return b.String()
	}
	var r1 response
	tools := []map[string]any{{"type": "code_interpreter", "container": "cntr_" + sid}}
	if st := call(other, "POST", "/v1/responses", map[string]any{"model": "m", "input": "x?", "tools": tools}, &r1); st != http.StatusOK ||
		text(r1) != "x is 7" || !strings.HasPrefix(r1.ID, "resp_"+config.NodeTag(own)) {
		t.Fatalf("a response in %s's container through %s: HTTP %d, %+v; want x is 7, by %s", own, other, st, r1, own)
	}
	var r2 response
	if st := call(other, "POST", "/v1/responses", map[string]any{"model": "m", "input": "again", "previous_response_id": r1.ID, "tools": []map[string]any{{"type": "code_interpreter"}}}, &r2); st != http.StatusOK ||
		text(r2) != "x is 7" || !strings.HasPrefix(r2.ID, "resp_"+config.NodeTag(own)) {
		t.Errorf("a response after %s through %s: HTTP %d, %+v; want x is 7, by %s", r1.ID, other, st, r2, own)
	}
	for _, n := range tc.names {
		var got response
		if st := call(n, "GET", "/v1/responses/"+r1.ID, nil, &got); st != http.StatusOK || got.ID != r1.ID || got.Status != "completed" {
			t.Errorf("GET %s through %s: HTTP %d, %+v", r1.ID, n, st, got)
		}
	}
	if st := call(other, "DELETE", "/v1/files/"+map[string]file{"node-a": fa, "node-b": fb}[own].ID, nil, nil); st != http.StatusOK {
		t.Errorf("DELETE %s's file through %s: HTTP %d", own, other, st)
	}
	var l list
	if st := call(own, "GET", "/v1/files", nil, &l); st != http.StatusOK || len(l.Data) != 1 {
		t.Errorf("the files after one was deleted: HTTP %d, %+v", st, l)
	}
}

// runE2BProgram runs the E2B test client's unmodified E2B program (internal/e2b) with its API
// at api and its sandboxes' traffic at traffic, and returns its report.
func runE2BProgram(t *testing.T, api, traffic, key string) string {
	t.Helper()
	node := testbin.NeedProgram(t, "node", "nodejs")
	dir, err := filepath.Abs(filepath.Join("..", "..", "internal", "e2b", "testdata", "e2bclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@e2b", "code-interpreter")); err != nil {
		testbin.Missing(t, "needs E2B's SDKs: run npm ci in %s (make test does)", dir)
	}
	csv, err := filepath.Abs(filepath.Join("..", "..", "examples", "data", "traffic_accidents.csv"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), node, "client.mjs", "program", csv)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+api, "E2B_SANDBOX_URL="+traffic, "E2B_API_KEY="+key, "E2B_DOMAIN=", "E2B_DEBUG=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var report map[string]any
	if jerr := json.Unmarshal(out, &report); err != nil || jerr != nil || report["error"] != nil {
		t.Fatalf("the E2B program (API %s, traffic %s): %v, %v\n%s\n%s", api, traffic, err, jerr, out, &stderr)
	}
	return string(out)
}

// hopper sends an MCP client's requests that open a session where they were addressed,
// and those in a session (Mcp-Session-Id) to another node, with an API key.
type hopper struct {
	to, key   string
	forwarded atomic.Int64
}

func (h *hopper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.key)
	if r.Header.Get("Mcp-Session-Id") != "" {
		u, _ := url.Parse(h.to)
		r.URL.Host, r.Host = u.Host, u.Host
		h.forwarded.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// testCluster is a control plane, the manifests' namespace and RBAC applied, and cellbox
// nodes registered with the manifests' service account, sharing one API key.
type testCluster struct {
	cp         *clustertest.ControlPlane
	kubeconfig string // the nodes' (the service account's token)
	key        string
	otherKey   string // another tenant's
	names      []string
	states     map[string]string // node → its state dir
	nodes      map[string]*served
	clients    map[string]*client.Client
}

// newTestCluster starts the control plane and the named nodes, and waits until each sees
// all of them live.
func newTestCluster(t testing.TB, names ...string) *testCluster {
	t.Helper()
	needRunc(t)
	tc := &testCluster{cp: clustertest.Start(t), states: map[string]string{}, nodes: map[string]*served{}, clients: map[string]*client.Client{}}
	// The manifests, as the real API server takes them (namespaced objects need their
	// namespace: docs/kubernetes.md creates it first, for the Secret); then the service
	// account and RBAC the nodes register with.
	tc.cp.Kubectl(t, "create", "namespace", "cellbox")
	for _, dir := range []string{"../../deploy/kubernetes/base", "../../deploy/kubernetes/gvisor"} {
		tc.cp.Kubectl(t, "apply", "--dry-run=server", "-k", dir)
	}
	tc.cp.Kubectl(t, "apply", "-k", "../../deploy/kubernetes/base")
	// Kubernetes Nodes of the nodes' names, which a cordon marks (no kubelet behind them).
	for _, n := range names {
		tc.cp.Apply(t, "apiVersion: v1\nkind: Node\nmetadata:\n  name: "+n+"\n")
	}
	token := strings.TrimSpace(tc.cp.Kubectl(t, "-n", "cellbox", "create", "token", "cellbox"))
	tc.kubeconfig = tc.cp.WriteKubeconfig(t, "cellbox-node", token)
	// The service account may not touch anything but Leases.
	if out, err := exec.Command(tc.cp.Tools+"/kubectl", "--kubeconfig", tc.kubeconfig, "-n", "cellbox", "get", "secrets").CombinedOutput(); err == nil {
		t.Fatalf("the nodes' service account can read secrets:\n%s", out)
	}
	tc.key = "cbk_" + hex.EncodeToString(randBytes(t, 16))
	tc.otherKey = "cbk_" + hex.EncodeToString(randBytes(t, 16))
	t.Setenv("CELLBOX_API_KEYS", tc.key+","+tc.otherKey)
	t.Setenv("CELLBOX_CLUSTER_SECRET", hex.EncodeToString(randBytes(t, 16)))
	t.Cleanup(func() { // sessions live on when a node stops: end them
		for _, n := range tc.names {
			endSessions(t, tc.states[n])
		}
	})
	for _, n := range names {
		tc.start(t, n)
	}
	tc.waitLive(t, tc.names...)
	return tc
}

// start starts node name, on its state dir if it had one.
func (tc *testCluster) start(t testing.TB, name string) {
	t.Helper()
	if tc.states[name] == "" {
		tc.states[name] = t.TempDir()
		tc.names = append(tc.names, name)
	}
	tc.nodes[name] = serve(t, tc.states[name], "--end-sessions-on-exit=false", "--pool-size", "2",
		"--cluster", "kubernetes", "--kubeconfig", tc.kubeconfig, "--cluster-node", name,
		"--cluster-namespace", "cellbox", "--cluster-lease-duration", "5s")
	tc.clients[name] = client.New(tc.nodes[name].URL, client.WithAPIKey(tc.key))
}

// nodeOf is the node a session id names.
func (tc *testCluster) nodeOf(t testing.TB, id string) string {
	t.Helper()
	for _, n := range tc.names {
		if len(id) == 32 && id[:8] == config.NodeTag(n) {
			return n
		}
	}
	t.Fatalf("session id %q carries no node's tag", id)
	return ""
}

// waitLive waits until every node sees the nodes want live.
func (tc *testCluster) waitLive(t testing.TB, want ...string) {
	t.Helper()
	for _, n := range tc.names {
		if tc.nodes[n].Cmd.ProcessState != nil {
			continue
		}
		testbin.WaitFor(t, time.Minute, n+" sees every node live", func() error {
			v, err := tc.clients[n].Cluster(t.Context())
			if err != nil {
				return err
			}
			live := map[string]bool{}
			for _, m := range v.Nodes {
				live[m.Name] = m.Live
			}
			for _, w := range want {
				if !live[w] {
					return fmt.Errorf("%s not live in %+v", w, v.Nodes)
				}
			}
			return nil
		})
	}
}

func mustRun(t testing.TB, c *client.Client, id, code, want string) {
	t.Helper()
	res, err := c.Execute(t.Context(), id, api.ExecuteRequest{Code: code})
	if err != nil || res.Status != api.StatusOK || (want != "" && joinText(res) != want) {
		t.Fatalf("session %s: %q: %+v, %v; want output %q", id, code, res, err, want)
	}
}

func joinText(res *api.ExecuteResult) string {
	var b strings.Builder
	for _, o := range res.Outputs {
		b.WriteString(o.Text)
	}
	return b.String()
}

func crash(t testing.TB, s *served) {
	t.Helper()
	s.Cmd.Process.Kill()
	<-s.Exited
}

func randBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// endSessions ends the sessions a stopped node left on its state dir: a server started with
// --end-sessions-on-exit ends them at start, then stops.
func endSessions(t testing.TB, state string) {
	var out testbin.Buffer
	cmd := exec.Command(testbin.Cellbox(t), "serve", "--addr", "127.0.0.1:0", "--state-dir", state, "--end-sessions-on-exit", "--pool-size", "0", "--no-web")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Errorf("end the sessions on %s: %v", state, err)
		return
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var gone bool
	var exitErr error
	serving := testbin.Poll(2*time.Minute, func() error {
		if strings.Contains(out.String(), "cellbox serving") {
			return nil
		}
		select {
		case exitErr = <-exited:
			gone = true
			return nil
		default:
			return errors.New("not serving yet")
		}
	})
	if gone {
		t.Errorf("end the sessions on %s: the server exited: %v\n%s", state, exitErr, out.String())
		return
	}
	if serving != nil {
		cmd.Process.Kill()
		<-exited
		t.Errorf("end the sessions on %s: the server did not start in 2 minutes:\n%s", state, out.String())
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Errorf("end the sessions on %s: %v\n%s", state, err, out.String())
	}
}

// BenchmarkClusterForward: a trivial cell through the session's own node, and through
// another node, which forwards it (docs/benchmarks.md, "Cluster").
//
//	CELLBOX_KUBE_TOOLS=$(scripts/kube-tools.sh) go test -run '^$' -bench BenchmarkCluster -benchtime 500x ./cmd/cellbox
func BenchmarkClusterForward(b *testing.B) {
	tc := newTestCluster(b, "node-a", "node-b")
	s, err := tc.clients["node-a"].CreateSession(b.Context(), api.CreateSessionRequest{})
	if err != nil {
		b.Fatal(err)
	}
	own := tc.nodeOf(b, s.ID)
	other := "node-a"
	if own == other {
		other = "node-b"
	}
	// Turn about, so that whatever else the machine does (pools refilling, the API
	// server) weighs on both alike; after a warm-up of 100 each.
	direct, forwarded := tc.clients[own], tc.clients[other]
	for range 100 {
		mustRun(b, direct, s.ID, "1", "")
		mustRun(b, forwarded, s.ID, "1", "")
	}
	var dt, ft []time.Duration
	for b.Loop() {
		t0 := time.Now()
		mustRun(b, direct, s.ID, "1", "")
		t1 := time.Now()
		mustRun(b, forwarded, s.ID, "1", "")
		dt, ft = append(dt, t1.Sub(t0)), append(ft, time.Since(t1))
	}
	b.ReportMetric(millis(percentile(dt, 50)), "owner-ms-p50")
	b.ReportMetric(millis(percentile(ft, 50)), "forwarded-ms-p50")
	b.ReportMetric(millis(percentile(dt, 99)), "owner-ms-p99")
	b.ReportMetric(millis(percentile(ft, 99)), "forwarded-ms-p99")
}

func millis(d time.Duration) float64 { return d.Seconds() * 1000 }

// BenchmarkClusterJoin: from a new node's first answer on /healthz to another node seeing
// it live; from then, and from its start, to the first new session another node places on it
// (once it has a warm sandbox: until then, new sessions go to the nodes that have one).
func BenchmarkClusterJoin(b *testing.B) {
	tc := newTestCluster(b, "node-a")
	if _, err := tc.clients["node-a"].CreateSession(b.Context(), api.CreateSessionRequest{}); err != nil {
		b.Fatal(err) // node-a has less room than a new node from here on
	}
	var fromStart, fromReady, seen []time.Duration
	i := 0
	for b.Loop() {
		i++
		name := fmt.Sprintf("node-new%d", i)
		t0 := time.Now()
		tc.start(b, name)
		ready := time.Now()
		for seen := false; !seen; {
			v, err := tc.clients["node-a"].Cluster(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			for _, m := range v.Nodes {
				seen = seen || (m.Name == name && m.Live)
			}
		}
		seenAt := time.Since(ready)
		for {
			s, err := tc.clients["node-a"].CreateSession(b.Context(), api.CreateSessionRequest{})
			if err != nil {
				b.Fatal(err)
			}
			if tc.nodeOf(b, s.ID) == name {
				break
			}
			tc.clients["node-a"].DeleteSession(b.Context(), s.ID)
		}
		fromStart, fromReady = append(fromStart, time.Since(t0)), append(fromReady, time.Since(ready))
		seen = append(seen, seenAt)
		tc.nodes[name].Cmd.Process.Signal(syscall.SIGTERM)
		<-tc.nodes[name].Exited
	}
	b.ReportMetric(millis(percentile(seen, 50)), "ms-seen-live-p50")
	b.ReportMetric(millis(percentile(fromStart, 50)), "ms-from-start-p50")
	b.ReportMetric(millis(percentile(fromReady, 50)), "ms-from-ready-p50")
	b.ReportMetric(millis(percentile(fromReady, 100)), "ms-from-ready-max")
}

func percentile(times []time.Duration, p int) time.Duration {
	if len(times) == 0 {
		return 0
	}
	s := slices.Clone(times)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// TestClusterDrain: `kubectl cordon` of a node's Kubernetes Node moves its sessions to the
// other node, paused with their memory: variables, files and symlinks come through, a
// session paused before stays paused, a session that cannot be paused stays (and works),
// and any node then routes the moved sessions' ids to where they went. The move's
// endpoint takes the cluster's secret only. Uncordoned, the node takes new sessions again.
func TestClusterDrain(t *testing.T) {
	testbin.NeedProgram(t, "criu", "criu (scripts/criu.sh builds it; make deps installs it)")
	tc := newTestCluster(t, "node-a", "node-b")
	ctx := t.Context()
	a, b := tc.clients["node-a"], tc.clients["node-b"]
	// Sessions made on node-a itself: a request a node marks as forwarded is served where it
	// arrives (placing prefers the node with warm sandboxes, which a loaded machine's
	// node-a, refilling its pool, may not have for a while).
	here := client.New(tc.nodes["node-a"].URL, client.WithAPIKey(tc.key), client.WithHeader(httpapi.ForwardedHeader, "test"))
	onA := func(req api.CreateSessionRequest) string {
		t.Helper()
		s, err := here.CreateSession(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if n := tc.nodeOf(t, s.ID); n != "node-a" {
			t.Fatalf("a session made on node-a is on %s", n)
		}
		return s.ID
	}
	pausable := api.CreateSessionRequest{IdleAction: api.IdleActionPause}
	running, paused, stuck := onA(pausable), onA(pausable), onA(api.CreateSessionRequest{})
	mustRun(t, a, running, "import os, threading\nx = 42\nos.makedirs('/mnt/data/sub', exist_ok=True)\n"+
		"open('/mnt/data/sub/notes.txt', 'w').write('kept')\nos.symlink('/etc/hostname', '/mnt/data/link')", "")
	mustRun(t, a, paused, "y = 'slept'", "")
	if _, err := a.Pause(ctx, paused); err != nil {
		t.Fatal(err)
	}
	mustRun(t, a, stuck, "z = 3", "")

	tc.cp.Kubectl(t, "cordon", "node-a")
	// Each node counts them: node-b in, node-a out (once node-b answered and node-a dropped
	// its copy).
	testbin.WaitFor(t, 3*time.Minute, "node-a's two pausable sessions moved to node-b", func() error {
		for node, want := range map[string]string{"node-b": "in", "node-a": "out"} {
			m, err := scrape(ctx, tc.nodes[node].URL, tc.key)
			if err != nil {
				return err
			}
			if !strings.Contains(m, `cellbox_session_moves_total{direction="`+want+`"} 2`) {
				return fmt.Errorf("%s: %s", node, grepLines(m, "cellbox_session_moves_total{"))
			}
		}
		return nil
	})
	v, err := b.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range v.Nodes {
		if n.Name == "node-a" && (!n.Draining || !n.Live) {
			t.Errorf("node-a as node-b sees it: %+v; want live and draining", n)
		}
	}
	// Through either node: the sessions are where they went, as they were.
	for _, c := range []*client.Client{a, b} {
		mustRun(t, c, running, "print(x, open('/mnt/data/sub/notes.txt').read(), os.readlink('/mnt/data/link'))", "42 kept /etc/hostname\n")
		mustRun(t, c, stuck, "print(z)", "3\n")
	}
	if s, err := a.GetSession(ctx, paused); err != nil || s.State != api.StatePaused {
		t.Errorf("the session paused before the drain, after it: %+v, %v; want paused", s, err)
	}
	mustRun(t, a, paused, "print(y)", "slept\n")
	// The other tenant finds none of them, through either node.
	for _, n := range []string{"node-a", "node-b"} {
		c := client.New(tc.nodes[n].URL, client.WithAPIKey(tc.otherKey))
		if _, err := c.Execute(ctx, running, api.ExecuteRequest{Code: "print(x)"}); !client.IsNotFound(err) {
			t.Errorf("the other tenant runs code in the moved session through %s: %v; want not found", n, err)
		}
	}
	// A draining node takes no new sessions: they all go to node-b.
	for range 3 {
		s, err := a.CreateSession(ctx, api.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if n := tc.nodeOf(t, s.ID); n != "node-b" {
			t.Errorf("a session made while node-a drains went to %s", n)
		}
		a.DeleteSession(ctx, s.ID)
	}
	// The move's endpoint takes the cluster's secret, not an API key, nor nothing.
	for _, key := range []string{tc.key, "", "wrong"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, tc.nodes["node-b"].URL+"/v1/cluster/sessions/"+running, strings.NewReader("x"))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("a move with key %q: %s; want 401", key, res.Status)
		}
	}
	// Forged moves, signed with the cluster's secret as a node (or a replay of one) would be:
	// each is refused with its reason, and leaves nothing on node-b (no session, record,
	// checkpoint or workspace).
	forged := forgeMoves(t, tc, running)
	for _, f := range forged {
		f.check(t, f.send(t))
	}

	// A restart of node-b keeps them, and says so in its Lease again.	// A restart of node-b keeps them, and says so in its Lease again.
	tc.nodes["node-b"].Cmd.Process.Signal(syscall.SIGTERM)
	<-tc.nodes["node-b"].Exited
	tc.start(t, "node-b")
	tc.waitLive(t, "node-a", "node-b")
	testbin.WaitFor(t, time.Minute, "the moved session through node-a after node-b restarted", func() error {
		_, err := a.Execute(ctx, running, api.ExecuteRequest{Code: "print(x)"})
		return err
	})
	mustRun(t, a, running, "print(x)", "42\n")
	// A move node-b took before its restart is refused after it: it remembers the nonce.
	for _, f := range forged {
		if f.replay {
			if res := f.send(t); res.status != http.StatusUnauthorized {
				t.Errorf("%s, replayed after node-b restarted: %d %s; want 401", f.name, res.status, res.body)
			}
			f.left(t)
		}
	}

	// Ended where it went, it is not found through either node (nor retried forever).
	if err := a.DeleteSession(ctx, paused); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node-a", "node-b"} {
		testbin.WaitFor(t, 30*time.Second, "the ended moved session not found through "+n, func() error {
			if _, err := tc.clients[n].GetSession(ctx, paused); !client.IsNotFound(err) {
				return fmt.Errorf("%v; want not found", err)
			}
			return nil
		})
	}

	tc.cp.Kubectl(t, "uncordon", "node-a")
	testbin.WaitFor(t, time.Minute, "node-a serving again", func() error {
		v, err := tc.clients["node-b"].Cluster(ctx) // its new address
		if err != nil {
			return err
		}
		for _, n := range v.Nodes {
			if n.Name == "node-a" && n.Draining {
				return errors.New("still draining")
			}
		}
		return nil
	})
}

// scrape GETs a node's /metrics.
// forgedMove is a move to node-b that a test sends with the cluster's secret.
type forgedMove struct {
	name   string
	id     string
	tc     *testCluster
	header http.Header
	signed http.Header // the trailer
	query  string
	body   []byte // as sent
	status int    // the answer it must get
	why    string // in the answer, or else in node-b's log
	replay bool   // node-b took its signature: sent again after a restart, it is refused
}

type moveAnswer struct {
	status int
	body   string
}

// forgeMoves are moves of made-up sessions to node-b, each refused for its own reason;
// like is a session whose record's settings (its image) they copy.
func forgeMoves(t *testing.T, tc *testCluster, like string) []*forgedMove {
	t.Helper()
	ctx := t.Context()
	secret := os.Getenv("CELLBOX_CLUSTER_SECRET")
	sum := sha256.Sum256([]byte(tc.key))
	tenant := "key-" + hex.EncodeToString(sum[:4]) // the key's name, as a keys list without names gives it
	v, err := tc.clients["node-a"].GetSession(ctx, like)
	if err != nil {
		t.Fatal(err)
	}
	stream := func(id, tenant, meta string) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		rec, _ := json.Marshal(map[string]any{"id": id, "tenant": tenant, "image": v.Image, "language": "python",
			"paused_at": time.Now().UTC(), "moves": 1, "checkpoint_bytes": 100})
		for _, f := range []struct{ name, body string }{
			{"record.json", string(rec)},
			{"checkpoint/cellbox.json", meta},
			{"checkpoint/images/", ""},
			{"checkpoint/images/inventory.img", "x"},
			{"workspace/planted.txt", "x"},
		} {
			h := &tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o600, Size: int64(len(f.body))}
			if strings.HasSuffix(f.name, "/") {
				h.Typeflag, h.Mode = tar.TypeDir, 0o700
			}
			tw.WriteHeader(h)
			tw.Write([]byte(f.body))
		}
		tw.Close()
		return b.Bytes()
	}
	nonces := 0
	sign := func(id, query string, body []byte) (header, trailer http.Header, _ []byte) {
		nonces++
		u, _ := url.Parse(tc.nodes["node-b"].URL + move.Path + id)
		u.RawQuery = query
		req, err := move.NewRequest(ctx, secret, "node-b", u, bytes.NewReader(body), time.Now(), fmt.Sprintf("%032x", nonces))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, req.Body) // the trailer signs what was read
		return req.Header, req.Trailer, body
	}
	idOf := func(c byte) string { return config.NodeTag("node-a") + strings.Repeat(string(c), 24) }
	hostRoot := `{"kind":"criu","rootfs":"/","token":"x"}`
	var out []*forgedMove
	add := func(f *forgedMove) { f.tc = tc; out = append(out, f) }

	id := idOf('a')
	h, tr, _ := sign(id, "", stream(id, tenant, `{"kind":"criu","token":"x"}`))
	add(&forgedMove{name: "a body other than the one signed", id: id, header: h, signed: tr, body: stream(id, tenant, hostRoot),
		status: http.StatusUnauthorized, why: "not the one its sender signed"})
	id = idOf('b')
	h, tr, body := sign(id, "", stream(id, tenant, hostRoot))
	add(&forgedMove{name: "a query other than the one signed", id: id, header: h, signed: tr, query: "paused=true", body: body,
		status: http.StatusUnauthorized, why: "signature"})
	id = idOf('c')
	h, tr, body = sign(id, "", stream(id, tenant, hostRoot))
	add(&forgedMove{name: "a checkpoint on the host's root", id: id, header: h, signed: tr, body: body,
		status: http.StatusConflict, why: "names a root filesystem that is none of this server's", replay: true})
	id = idOf('d')
	h, tr, body = sign(id, "", stream(id, tenant, `{"kind":"criu","token":"x","guest_sha256":"`+strings.Repeat("0", 64)+`"}`))
	add(&forgedMove{name: "a checkpoint of a guest node-b has not", id: id, header: h, signed: tr, body: body,
		status: http.StatusConflict, why: "no guest binary of sum"})
	id = idOf('e')
	h, tr, body = sign(id, "", stream(id, "another-tenant", `{"kind":"criu","token":"x"}`))
	add(&forgedMove{name: "a session of a tenant node-b has not", id: id, header: h, signed: tr, body: body,
		status: http.StatusForbidden, why: "has no API key on this node"})
	return out
}

// send sends the move as forged, and checks node-b keeps nothing of it.
func (f *forgedMove) send(t *testing.T) moveAnswer {
	t.Helper()
	u := f.tc.nodes["node-b"].URL + move.Path + f.id
	if f.query != "" {
		u += "?" + f.query
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, u, io.NopCloser(bytes.NewReader(f.body)))
	req.ContentLength = -1 // chunked, for the trailer
	req.Header, req.Trailer = f.header.Clone(), f.signed.Clone()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	f.left(t)
	return moveAnswer{res.StatusCode, string(bytes.TrimSpace(b))}
}

// check checks the first answer: the status and reason of the forgery, and no host path.
func (f *forgedMove) check(t *testing.T, res moveAnswer) {
	t.Helper()
	why := res.body
	if res.status == http.StatusConflict { // the resume failed: its reason is in the log only
		log, _ := os.ReadFile(f.tc.nodes["node-b"].Log)
		why = string(log)
	}
	if res.status != f.status || !strings.Contains(why, f.why) {
		t.Errorf("%s: %d %s; want %d, saying %q", f.name, res.status, res.body, f.status, f.why)
	}
	if strings.Contains(res.body, f.tc.states["node-b"]) {
		t.Errorf("%s: the answer names a host path: %s", f.name, res.body)
	}
}

// left checks that node-b keeps nothing of the move.
func (f *forgedMove) left(t *testing.T) {
	t.Helper()
	for _, p := range []string{"sessions/" + f.id + ".json", "checkpoints/" + f.id, "workspaces/" + f.id, "workspaces/" + f.id + ".img"} {
		if _, err := os.Lstat(filepath.Join(f.tc.states["node-b"], p)); err == nil {
			t.Errorf("%s: a refused move left %s", f.name, p)
		}
	}
	if _, err := f.tc.clients["node-b"].GetSession(t.Context(), f.id); !client.IsNotFound(err) {
		t.Errorf("%s: the session of a refused move: %v; want not found", f.name, err)
	}
}

func scrape(ctx context.Context, url, key string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

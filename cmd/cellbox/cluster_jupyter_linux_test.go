package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// clusterJupyter: a Jupyter kernel started through one node is listed through both, and its
// websocket works through either (the node without its session carries the upgrade to the
// one with it): a variable set through one is read through the other.
func clusterJupyter(t *testing.T, tc *testCluster, call func(node, method, path string, body, out any) int) {
	var k struct {
		ID string `json:"id"`
	}
	if st := call("node-b", "POST", "/api/kernels", map[string]string{"name": "python3"}, &k); st != http.StatusCreated {
		t.Fatalf("a kernel through node-b: HTTP %d", st)
	}
	defer call("node-a", "DELETE", "/api/kernels/"+k.ID, nil, nil)
	for _, n := range tc.names {
		var list []struct {
			ID string `json:"id"`
		}
		found := false
		if st := call(n, "GET", "/api/kernels", nil, &list); st == http.StatusOK {
			for _, l := range list {
				found = found || l.ID == k.ID
			}
		}
		if !found {
			t.Errorf("the kernel is not in the list through %s: %v", n, list)
		}
	}
	run := func(node, code string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		u := "ws" + strings.TrimPrefix(tc.nodes[node].URL, "http") + "/api/kernels/" + k.ID + "/channels"
		ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"token " + tc.key}}})
		if err != nil {
			t.Fatalf("the kernel's websocket through %s: %v", node, err)
		}
		defer ws.CloseNow()
		msg, _ := json.Marshal(map[string]any{"header": map[string]string{"msg_id": "m-" + node, "msg_type": "execute_request", "session": "s", "version": "5.3"},
			"parent_header": map[string]any{}, "metadata": map[string]any{}, "content": map[string]any{"code": code}, "channel": "shell"})
		if err := ws.Write(ctx, websocket.MessageText, msg); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				t.Fatalf("through %s: %v", node, err)
			}
			var m struct {
				Channel string         `json:"channel"`
				MsgType string         `json:"msg_type"`
				Content map[string]any `json:"content"`
			}
			json.Unmarshal(b, &m)
			switch {
			case m.MsgType == "stream":
				out.WriteString(fmt.Sprint(m.Content["text"]))
			case m.Channel == "shell":
				return fmt.Sprint(m.Content["status"]) + " " + out.String()
			}
		}
	}
	if got := run("node-a", "shared = 'set through node-a'"); got != "ok " {
		t.Fatalf("a cell through node-a: %q", got)
	}
	if got := run("node-b", "print(shared)"); got != "ok set through node-a\n" {
		t.Errorf("the cell through node-b: %q", got)
	}
}

package jupyter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// dialStatus is the HTTP status a websocket handshake was refused with (0: it was not).
func dialStatus(g *gw, t *testing.T, kid, key string, inQuery bool) int {
	t.Helper()
	_, resp, err := g.dial(t, kid, key, inQuery, false)
	if err == nil {
		return 0
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", kid, err)
	}
	return resp.StatusCode
}

// TestKernelKeys: keys and tenants on REST and on the websocket, on a server whose
// websockets need a key and on one whose kernel ids are enough (--jupyter-open-channels).
func TestKernelKeys(t *testing.T) {
	g := startGateway(t, false)
	kid := g.kernel(t, aliceKey)

	var e struct{ Message, Reason string }
	if st := g.do(t, "GET", "/api/kernels", "", "", &e); st != http.StatusUnauthorized || !strings.Contains(e.Message, "token") {
		t.Errorf("no key: %d %+v", st, e)
	}
	if st := g.do(t, "GET", "/api/kernels", "cbx_nope0000000000000000000000000000000000", "", &e); st != http.StatusUnauthorized {
		t.Errorf("wrong key: %d %+v", st, e)
	}
	var list []kernelModel
	if st := g.do(t, "GET", "/api/kernels?token="+aliceKey, "", "", &list); st != http.StatusOK || len(list) == 0 {
		t.Errorf("?token=: %d %v", st, list)
	}
	for _, k := range list {
		if _, err := time.Parse("2006-01-02T15:04:05.000000Z", k.LastActivity); err != nil {
			t.Errorf("last_activity %q is not microseconds: %v", k.LastActivity, err)
		}
	}
	if st := g.do(t, "GET", "/api/kernels", bobKey, "", &list); st != http.StatusOK || len(list) != 0 {
		t.Errorf("bob lists alice's kernels: %v", list)
	}
	for _, p := range []string{"/api/kernels/" + kid, "/api/kernels/" + kid + "/interrupt", "/api/kernels/" + kid + "/restart"} {
		method := map[bool]string{true: "GET", false: "POST"}[p == "/api/kernels/"+kid]
		if st := g.do(t, method, p, bobKey, "", &e); st != http.StatusNotFound {
			t.Errorf("bob %s %s: %d", method, p, st)
		}
	}
	if st := g.do(t, "DELETE", "/api/kernels/"+kid, bobKey, "", nil); st != http.StatusNotFound {
		t.Errorf("bob deletes alice's kernel: %d", st)
	}

	// The websocket: a key in the header or the query; none, a wrong one or another
	// tenant's is refused before the upgrade.
	if st := dialStatus(g, t, kid, aliceKey, true); st != 0 {
		t.Errorf("?token= on the websocket: %d", st)
	}
	for name, c := range map[string]struct {
		kid, key string
		want     int
	}{
		"no key":              {kid, "", http.StatusUnauthorized},
		"wrong key":           {kid, "cbx_nope0000000000000000000000000000000000", http.StatusUnauthorized},
		"another tenant":      {kid, bobKey, http.StatusNotFound},
		"no such kernel":      {"00000000-1111-2222-3333-444444444444", aliceKey, http.StatusNotFound},
		"not a kernel id":     {"not-a-kernel-id", aliceKey, http.StatusNotFound},
		"a session id itself": {sessionOf(t, g, kid), aliceKey, http.StatusNotFound},
	} {
		if st := dialStatus(g, t, c.kid, c.key, false); st != c.want {
			t.Errorf("%s: status %d, want %d", name, st, c.want)
		}
	}

	// With open channels: the kernel id alone opens the websocket (the kernel's tenant's);
	// a key, when one is sent, is still checked; REST still needs one.
	o := startGateway(t, true)
	okid := o.kernel(t, aliceKey)
	c := o.mustDial(t, okid, "", false)
	if _, reply := c.request("shell", "execute_request", map[string]any{"code": "print('open')"}); reply.Content["status"] != "ok" {
		t.Errorf("open channel: %+v", reply.Content)
	}
	if st := dialStatus(o, t, okid, "cbx_nope0000000000000000000000000000000000", false); st != http.StatusUnauthorized {
		t.Errorf("open channels, wrong key: %d", st)
	}
	if st := dialStatus(o, t, okid, bobKey, false); st != http.StatusNotFound {
		t.Errorf("open channels, bob's key: %d", st)
	}
	if st := dialStatus(o, t, sessionOf(t, o, okid), "", false); st != http.StatusNotFound {
		t.Errorf("open channels, the session id: %d", st)
	}
	if st := o.do(t, "GET", "/api/kernels", "", "", nil); st != http.StatusUnauthorized {
		t.Errorf("open channels, REST without a key: %d", st)
	}
}

// sessionOf finds kernel kid's session id through the REST API's session list (the
// kernel's is the newest of alice's).
func sessionOf(t *testing.T, g *gw, kid string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", g.url+"/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct {
		Sessions []struct {
			ID        string    `json:"id"`
			CreatedAt time.Time `json:"created_at"`
		} `json:"sessions"`
	}
	json.NewDecoder(resp.Body).Decode(&l)
	if len(l.Sessions) == 0 {
		t.Fatal("no sessions")
	}
	newest := l.Sessions[0]
	for _, s := range l.Sessions {
		if s.CreatedAt.After(newest.CreatedAt) {
			newest = s
		}
	}
	return newest.ID
}

// TestKernelAbuse: a 50 MB output, messages that are none, a flood of requests, a message
// over the cap and too many websockets leave the server and the kernel working.
func TestKernelAbuse(t *testing.T) {
	g := startGateway(t, false)
	kid := g.kernel(t, aliceKey)
	c := g.mustDial(t, kid, aliceKey, false)

	iopub, reply := c.request("shell", "execute_request", map[string]any{"code": "print('x' * 50_000_000)"})
	out := texts(iopub, "stream")
	if reply.Content["status"] != "ok" || len(out) > 2<<20 || !strings.Contains(out, "xxxx") || !strings.Contains(out, "truncated") {
		t.Errorf("50 MB output: %d bytes of stream, reply %+v", len(out), reply.Content)
	}

	// Garbage between messages is skipped; a websocket of nothing but is closed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, junk := range []string{"{nope", `{"header":{}}`, `[]`, `{"header":{"msg_type":5}}`} {
		c.ws.Write(ctx, websocket.MessageText, []byte(junk))
	}
	c.ws.Write(ctx, websocket.MessageBinary, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	if _, reply := c.request("shell", "execute_request", map[string]any{"code": "print(2)"}); reply.Content["status"] != "ok" {
		t.Errorf("after junk: %+v", reply.Content)
	}
	bad := g.mustDial(t, kid, aliceKey, false)
	for range 100 {
		if bad.ws.Write(ctx, websocket.MessageText, []byte("junk")) != nil {
			break
		}
	}
	if _, err := bad.recv(30 * time.Second); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Errorf("a websocket of junk: %v", err)
	}

	// A flood: every request is answered, executed or refused as queue full.
	const n = 600
	ids := map[string]bool{}
	for range n {
		ids[c.send("shell", "execute_request", map[string]any{"code": "pass", "stop_on_error": false})] = true
	}
	statuses := map[string]int{}
	for len(ids) > 0 {
		m, err := c.recv(2 * time.Minute)
		if err != nil {
			t.Fatalf("flood: %d requests unanswered: %v", len(ids), err)
		}
		if m.Channel == "shell" && ids[m.parent()] {
			delete(ids, m.parent())
			s, _ := m.Content["status"].(string)
			if s == "error" {
				s += ":" + m.Content["ename"].(string)
			}
			statuses[s]++
		}
	}
	if statuses["ok"] == 0 || statuses["ok"]+statuses["error:QueueFull"] != n {
		t.Errorf("flood: %v", statuses)
	}

	// A message over the cap (--max-body-bytes, 8 MiB) closes its websocket; the kernel lives on.
	big := g.mustDial(t, kid, aliceKey, false)
	big.ws.Write(ctx, websocket.MessageText, []byte(`{"header":{"msg_type":"execute_request","msg_id":"big"},"content":{"code":"`+strings.Repeat("#", 33<<20)+`"}}`))
	if _, err := big.recv(30 * time.Second); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("a message over the cap: %v", err)
	}
	if _, reply := c.request("shell", "execute_request", map[string]any{"code": "print(3)"}); reply.Content["status"] != "ok" {
		t.Errorf("after the big message: %+v", reply.Content)
	}

	// At most 32 websockets a kernel (c is one).
	refused := 0
	for range 33 {
		if _, resp, err := g.dial(t, kid, aliceKey, false, false); err != nil && resp != nil && resp.StatusCode == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused == 0 {
		t.Error("33 more websockets on one kernel, none refused")
	}
}

// TestKernelLifecycle: interrupt (control and REST), restart (REST and shutdown_request),
// iopub to every websocket of the kernel, and the end of the kernel closing them.
func TestKernelLifecycle(t *testing.T) {
	g := startGateway(t, false)
	kid := g.kernel(t, aliceKey)
	a := g.mustDial(t, kid, aliceKey, false)
	b := g.mustDial(t, kid, aliceKey, true)

	// b sees a's cell: iopub goes to every websocket.
	id := a.send("shell", "execute_request", map[string]any{"code": "x = 5\nprint('shared')"})
	a.until(id)
	seen := false
	for !seen {
		m, err := b.recv(time.Minute)
		if err != nil {
			t.Fatalf("b: %v", err)
		}
		seen = m.parent() == id && m.typ() == "stream" && m.Content["text"] == "shared\n"
		if m.parent() == id && m.Channel == "shell" {
			t.Fatalf("b got a's reply: %+v", m)
		}
	}

	for _, how := range []string{"control", "rest"} {
		id := a.send("shell", "execute_request", map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(120)"})
		for {
			m, err := a.recv(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if m.parent() == id && m.typ() == "stream" {
				break
			}
		}
		if how == "control" {
			a.send("control", "interrupt_request", map[string]any{})
		} else if st := g.do(t, "POST", "/api/kernels/"+kid+"/interrupt", aliceKey, "", nil); st != http.StatusNoContent {
			t.Fatalf("REST interrupt: %d", st)
		}
		_, reply := a.until(id)
		if reply.Content["status"] != "error" || reply.Content["ename"] != "KeyboardInterrupt" {
			t.Errorf("interrupt by %s: %+v", how, reply.Content)
		}
	}
	if _, reply := a.request("shell", "execute_request", map[string]any{"code": "print(x)"}); reply.Content["status"] != "ok" {
		t.Errorf("x after the interrupts: %+v", reply.Content)
	}

	var k kernelModel
	if st := g.do(t, "POST", "/api/kernels/"+kid+"/restart", aliceKey, "", &k); st != http.StatusOK || k.ID != kid {
		t.Fatalf("restart: %d %+v", st, k)
	}
	restarting := false
	for !restarting {
		m, err := b.recv(time.Minute)
		if err != nil {
			t.Fatalf("restart's status: %v", err)
		}
		restarting = m.typ() == "status" && m.Content["execution_state"] == "restarting"
	}
	if _, reply := a.request("shell", "execute_request", map[string]any{"code": "x"}); reply.Content["ename"] != "NameError" {
		t.Errorf("x after a restart: %+v", reply.Content)
	}
	_, reply := a.request("control", "shutdown_request", map[string]any{"restart": true})
	if reply.Content["status"] != "ok" || reply.Content["restart"] != true {
		t.Errorf("shutdown_request with restart: %+v", reply.Content)
	}

	// shutdown_request ends the kernel: the reply, then status dead and the close, on both.
	a.send("control", "shutdown_request", map[string]any{"restart": false})
	for _, c := range []*client{a, b} {
		dead := false
		for {
			m, err := c.recv(time.Minute)
			if err != nil {
				var ce websocket.CloseError
				if !errors.As(err, &ce) || ce.Code != websocket.StatusNormalClosure || !dead {
					t.Errorf("the end: dead %v, %v", dead, err)
				}
				break
			}
			dead = dead || m.typ() == "status" && m.Content["execution_state"] == "dead"
		}
	}
	if st := g.do(t, "GET", "/api/kernels/"+kid, aliceKey, "", nil); st != http.StatusNotFound {
		t.Errorf("the kernel after shutdown: %d", st)
	}
}

// TestKernelHolds: what a kernel holds for its clients is bounded in bytes, not only in
// messages: requests queued behind a running cell past 64 MiB are refused (QueueFull), and
// a websocket that does not read what the kernel sends is closed once 64 MiB wait for it.
func TestKernelHolds(t *testing.T) {
	g := startGateway(t, false)
	kid := g.kernel(t, aliceKey)
	c := g.mustDial(t, kid, aliceKey, true)
	c.ready()

	// A cell that waits, and 80 cells of 1 MiB behind it: those past 64 MiB are refused.
	first := c.send("shell", "execute_request", map[string]any{"code": "import time\nprint('waiting', flush=True)\ntime.sleep(600)"})
	for {
		m, err := c.recv(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if m.parent() == first && m.typ() == "stream" {
			break
		}
	}
	const n = 80
	code := "#" + strings.Repeat("x", 1<<20) + "\npass"
	ids := map[string]bool{}
	for range n {
		ids[c.send("shell", "execute_request", map[string]any{"code": code})] = true
	}
	c.send("control", "interrupt_request", map[string]any{}) // the queued cells are then aborted
	statuses := map[string]int{}
	for len(ids) > 0 {
		m, err := c.recv(2 * time.Minute)
		if err != nil {
			t.Fatalf("%d requests unanswered: %v", len(ids), err)
		}
		if m.Channel == "shell" && ids[m.parent()] {
			delete(ids, m.parent())
			s, _ := m.Content["status"].(string)
			if s == "error" {
				s += ":" + fmt.Sprint(m.Content["ename"])
			}
			statuses[s]++
		}
	}
	if statuses["error:QueueFull"] == 0 || statuses["aborted"] > 64 || statuses["aborted"]+statuses["error:QueueFull"] != n {
		t.Errorf("80 cells of 1 MiB behind a running one: %v", statuses)
	}

	// A websocket that reads nothing while 8 cells each show 12 MB: it is closed before the
	// last cell's messages are queued for it.
	u := "ws" + strings.TrimPrefix(g.url, "http") + "/api/kernels/" + kid + "/channels"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	slow, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"token " + aliceKey}}})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow()
	slow.SetReadLimit(64 << 20)
	var last string
	for range 8 {
		last = c.send("shell", "execute_request", map[string]any{"code": "from IPython.display import HTML, display\ndisplay(HTML('x' * 12_000_000))"})
		if _, reply := c.until(last); reply.Content["status"] != "ok" {
			t.Fatalf("a cell showing 12 MB: %+v", reply.Content)
		}
	}
	for {
		_, b, err := slow.Read(ctx)
		if err != nil {
			// The server's close for not reading, with its reason: not the test's deadline,
			// nor a connection that merely dropped.
			var ce websocket.CloseError
			if ctx.Err() != nil || !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "does not read") {
				t.Fatalf("the websocket that read nothing ended with %v (the test's deadline: %v); want the server's close for not reading", err, ctx.Err())
			}
			break
		}
		var m msg
		json.Unmarshal(b, &m)
		if m.parent() == last && m.typ() == "status" && m.Content["execution_state"] == "idle" {
			t.Fatal("a websocket that read nothing was sent 96 MB")
		}
	}
}

package jupyter_test

// The kernel API through a real server (runc, IPython) with API keys, spoken by a websocket
// client written here from Jupyter's messaging spec: both framings, the message types,
// keys and tenants, and what an attacker or a broken client sends.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/jupyter"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testserver"
)

const (
	aliceKey = "cbx_a11ce00000000000000000000000000000000a"
	bobKey   = "cbx_b0b0000000000000000000000000000000000b"
)

// gw is a server for these tests: its URL, and whether kernel websockets may come without
// a key (--jupyter-open-channels).
type gw struct {
	url  string
	open bool
}

// The servers of these tests, with alice's and bob's keys: kernel websockets need a key on
// closed, and may come without one on open.
var closed, open = sharedGateway(false), sharedGateway(true)

func sharedGateway(openChannels bool) *testserver.Shared {
	return &testserver.Shared{Prefix: "jupyter", Prepare: func(dir string, cfg *config.Config, opts *server.Options) error {
		keys := filepath.Join(dir, "keys")
		if err := os.WriteFile(keys, []byte(aliceKey+" alice\n"+bobKey+" bob\n"), 0o600); err != nil {
			return err
		}
		k, err := auth.Load("", keys)
		if err != nil {
			return err
		}
		cfg.JupyterOpenChannels = openChannels
		cfg.MaxOutputBytes = 1 << 20
		opts.Keys, opts.Quiet = k, true
		return nil
	}}
}

func TestMain(m *testing.M) { testserver.Main(m, closed, open) }

// startGateway returns the server whose kernel websockets may come without a key (open) or
// not.
func startGateway(t *testing.T, openChannels bool) *gw {
	t.Helper()
	if openChannels {
		return &gw{url: open.Start(t).URL, open: true}
	}
	return &gw{url: closed.Start(t).URL}
}

// do sends a REST request with key ("" for none) and decodes the answer into out.
func (g *gw) do(t *testing.T, method, path, key string, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, g.url+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "token "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

type kernelModel struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	LastActivity   string `json:"last_activity"`
	ExecutionState string `json:"execution_state"`
	Connections    int    `json:"connections"`
}

func (g *gw) kernel(t *testing.T, key string) string {
	t.Helper()
	var k kernelModel
	if st := g.do(t, "POST", "/api/kernels", key, `{"name":"python3"}`, &k); st != http.StatusCreated {
		t.Fatalf("start kernel: %d", st)
	}
	t.Cleanup(func() { g.do(t, "DELETE", "/api/kernels/"+k.ID, key, "", nil) })
	return k.ID
}

// msg is a kernel message as the client reads it.
type msg struct {
	Channel      string         `json:"channel"`
	Header       map[string]any `json:"header"`
	ParentHeader map[string]any `json:"parent_header"`
	Content      map[string]any `json:"content"`
}

func (m msg) typ() string    { s, _ := m.Header["msg_type"].(string); return s }
func (m msg) parent() string { s, _ := m.ParentHeader["msg_id"].(string); return s }

// client is a websocket to a kernel. One goroutine reads it (a read whose context ends
// closes a websocket of coder/websocket): recv waits for what it read.
type client struct {
	t   *testing.T
	ws  *websocket.Conn
	v1  bool
	n   int
	in  chan msg
	err error // why in was closed
}

// dial opens kernel kid's websocket with key ("" for none; in the query with inQuery) in
// the v1 framing or the older one.
func (g *gw) dial(t *testing.T, kid, key string, inQuery, v1 bool) (*client, *http.Response, error) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(g.url, "http") + "/api/kernels/" + kid + "/channels"
	opts := &websocket.DialOptions{HTTPHeader: http.Header{}}
	if key != "" && inQuery {
		u += "?token=" + key
	} else if key != "" {
		opts.HTTPHeader.Set("Authorization", "token "+key)
	}
	if v1 {
		opts.Subprotocols = []string{"v1.kernel.websocket.jupyter.org"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, u, opts)
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(64 << 20)
	c := &client{t: t, ws: ws, v1: v1, in: make(chan msg, 1<<16)}
	if v1 && ws.Subprotocol() != "v1.kernel.websocket.jupyter.org" {
		t.Fatalf("subprotocol %q", ws.Subprotocol())
	}
	go c.read()
	t.Cleanup(func() { ws.CloseNow() })
	return c, resp, nil
}

func (g *gw) mustDial(t *testing.T, kid, key string, v1 bool) *client {
	t.Helper()
	c, resp, err := g.dial(t, kid, key, false, v1)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	return c
}

// send sends a request; it returns its msg_id.
func (c *client) send(channel, msgType string, content any) string {
	c.t.Helper()
	c.n++
	id := fmt.Sprintf("req-%d-%d", time.Now().UnixNano(), c.n)
	hdr, _ := json.Marshal(map[string]any{"msg_id": id, "msg_type": msgType, "session": "test-session", "username": "tester",
		"date": time.Now().UTC().Format(time.RFC3339Nano), "version": "5.3"})
	body, _ := json.Marshal(content)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if c.v1 {
		err = c.ws.Write(ctx, websocket.MessageBinary, jupyter.V1Frame(channel, string(hdr), "{}", "{}", string(body)))
	} else {
		b, _ := json.Marshal(map[string]any{"header": json.RawMessage(hdr), "parent_header": map[string]any{}, "metadata": map[string]any{},
			"content": json.RawMessage(body), "channel": channel, "buffers": []any{}})
		err = c.ws.Write(ctx, websocket.MessageText, b)
	}
	if err != nil {
		c.t.Fatalf("send %s: %v", msgType, err)
	}
	return id
}

func (c *client) read() {
	defer close(c.in)
	for {
		typ, b, err := c.ws.Read(context.Background())
		if err != nil {
			c.err = err
			return
		}
		var m msg
		if c.v1 {
			if typ != websocket.MessageBinary {
				c.err = fmt.Errorf("a v1 message as text")
				return
			}
			channel, parts := v1Split(b)
			m.Channel = channel
			json.Unmarshal(parts[0], &m.Header)
			json.Unmarshal(parts[1], &m.ParentHeader)
			json.Unmarshal(parts[3], &m.Content)
		} else if err := json.Unmarshal(b, &m); err != nil {
			c.err = err
			return
		}
		c.in <- m
	}
}

// recv returns the next message, or an error after d or when the websocket closed.
func (c *client) recv(d time.Duration) (msg, error) {
	select {
	case m, ok := <-c.in:
		if !ok {
			return msg{}, c.err
		}
		return m, nil
	case <-time.After(d):
		return msg{}, fmt.Errorf("no message within %s", d)
	}
}

// ready sends kernel_info_request until one is answered, as jupyter_client's
// wait_for_ready does: jupyter_server 1.23 and Notebook 6, as gateway clients, drop a
// message that comes before their own websocket to the gateway is up.
func (c *client) ready() {
	c.t.Helper()
	for range 30 {
		id := c.send("shell", "kernel_info_request", map[string]any{})
		for {
			m, err := c.recv(2 * time.Second)
			if err != nil {
				break // not answered: again
			}
			if m.parent() == id && m.typ() == "kernel_info_reply" {
				return
			}
		}
	}
	c.t.Fatal("no kernel_info_reply in 30 tries")
}

// reply sends a request and collects what answers it until its status idle: the iopub
// messages and the reply.
func (c *client) request(channel, msgType string, content any) (iopub []msg, reply msg) {
	c.t.Helper()
	id := c.send(channel, msgType, content)
	return c.until(id)
}

func (c *client) until(id string) (iopub []msg, reply msg) {
	c.t.Helper()
	for {
		m, err := c.recv(2 * time.Minute)
		if err != nil {
			c.t.Fatalf("waiting for the answers to %s: %v", id, err)
		}
		if m.parent() != id {
			continue
		}
		if m.Channel != "iopub" {
			reply = m
			continue
		}
		if m.typ() == "status" && m.Content["execution_state"] == "idle" {
			if reply.Header == nil {
				c.t.Fatalf("idle before the reply to %s: %v", id, iopub)
			}
			return iopub, reply
		}
		iopub = append(iopub, m)
	}
}

// v1Split reads a message as deserialize_msg_from_ws_v1.
func v1Split(b []byte) (string, [][]byte) {
	n := binary.LittleEndian.Uint64(b)
	offs := make([]uint64, n)
	for i := range offs {
		offs[i] = binary.LittleEndian.Uint64(b[8*(i+1):])
	}
	var parts [][]byte
	for i := 1; i+1 < len(offs); i++ {
		parts = append(parts, b[offs[i]:offs[i+1]])
	}
	return string(b[offs[0]:offs[1]]), parts
}

func texts(ms []msg, typ string) string {
	var b strings.Builder
	for _, m := range ms {
		if m.typ() == typ {
			switch typ {
			case "stream":
				b.WriteString(m.Content["text"].(string))
			case "execute_result", "display_data", "update_display_data":
				b.WriteString(m.Content["data"].(map[string]any)["text/plain"].(string) + "\n")
			case "error":
				b.WriteString(m.Content["ename"].(string) + "\n")
			}
		}
	}
	return b.String()
}

func types(ms []msg) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.typ())
	}
	return out
}

// TestKernelProtocol: the messages of the protocol, in both framings: kernel_info, execute
// with its outputs, counts, user expressions, silent and history-less runs, display
// updates, errors and stop_on_error, complete, inspect, is_complete, history, comm_info.
func TestKernelProtocol(t *testing.T) {
	g := startGateway(t, false)
	for _, v1 := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "v1"}[v1], func(t *testing.T) {
			kid := g.kernel(t, aliceKey)
			c := g.mustDial(t, kid, aliceKey, v1)

			iopub, reply := c.request("shell", "kernel_info_request", map[string]any{})
			li, _ := reply.Content["language_info"].(map[string]any)
			if reply.typ() != "kernel_info_reply" || reply.Channel != "shell" || reply.Content["protocol_version"] != "5.3" ||
				li["name"] != "python" || !strings.HasPrefix(li["version"].(string), "3.") || len(iopub) != 1 || iopub[0].Content["execution_state"] != "busy" {
				t.Fatalf("kernel_info: %+v, %v", reply, iopub)
			}
			if reply.Header["session"] == "" || reply.Header["msg_id"] == "" || reply.ParentHeader["username"] != "tester" {
				t.Errorf("reply header %v, parent %v", reply.Header, reply.ParentHeader)
			}
			if d, _ := reply.Header["date"].(string); len(d) != len("2006-01-02T15:04:05.000000Z") {
				t.Errorf("date %q: not microseconds", d)
			}

			iopub, reply = c.request("shell", "execute_request", map[string]any{"code": "x = 41\nprint('hi')\nx + 1", "silent": false,
				"store_history": true, "user_expressions": map[string]string{"double": "x * 2", "bad": "nope"}, "allow_stdin": false})
			if got := types(iopub); strings.Join(got, ",") != "status,execute_input,stream,execute_result" {
				t.Errorf("execute's iopub: %v", got)
			}
			ux, _ := reply.Content["user_expressions"].(map[string]any)
			if reply.Content["status"] != "ok" || reply.Content["execution_count"] != 1.0 || texts(iopub, "execute_result") != "42\n" ||
				iopub[1].Content["execution_count"] != 1.0 || ux["double"].(map[string]any)["data"].(map[string]any)["text/plain"] != "82" ||
				ux["bad"].(map[string]any)["ename"] != "NameError" {
				t.Errorf("execute: %+v %v", reply.Content, iopub)
			}

			// silent: no outputs, no count; store_history false: outputs, no count.
			iopub, reply = c.request("shell", "execute_request", map[string]any{"code": "print('quiet')\ny = 1", "silent": true})
			if len(iopub) != 1 || reply.Content["status"] != "ok" {
				t.Errorf("silent: %v %+v", types(iopub), reply.Content)
			}
			iopub, reply = c.request("shell", "execute_request", map[string]any{"code": "print(y)", "store_history": false})
			if texts(iopub, "stream") != "1\n" || reply.Content["execution_count"] != 1.0 {
				t.Errorf("store_history false: %v %+v", texts(iopub, "stream"), reply.Content)
			}

			// Display ids and their updates, and clear_output, as a live front-end shows them.
			iopub, _ = c.request("shell", "execute_request", map[string]any{"code": "from IPython.display import display, clear_output\n" +
				"h = display('a', display_id='d')\nh.update('b')\nclear_output(wait=True)"})
			var upd, clear bool
			for _, m := range iopub {
				if m.typ() == "update_display_data" && m.Content["transient"].(map[string]any)["display_id"] == "d" {
					upd = true
				}
				if m.typ() == "clear_output" && m.Content["wait"] == true {
					clear = true
				}
			}
			if !upd || !clear || !strings.Contains(texts(iopub, "display_data"), "'a'") {
				t.Errorf("display updates: %v", types(iopub))
			}

			// An error, and stop_on_error: the cell queued behind it is aborted.
			id1 := c.send("shell", "execute_request", map[string]any{"code": "1/0"})
			id2 := c.send("shell", "execute_request", map[string]any{"code": "print('after')"})
			iopub, reply = c.until(id1)
			if reply.Content["status"] != "error" || reply.Content["ename"] != "ZeroDivisionError" || texts(iopub, "error") != "ZeroDivisionError\n" {
				t.Errorf("error: %+v", reply.Content)
			}
			iopub, reply = c.until(id2)
			if reply.Content["status"] != "aborted" || texts(iopub, "stream") != "" {
				t.Errorf("after an error: %+v %v", reply.Content, types(iopub))
			}
			_, reply = c.request("shell", "execute_request", map[string]any{"code": "1/0", "stop_on_error": false})
			if reply.Content["status"] != "error" {
				t.Errorf("second error: %+v", reply.Content)
			}

			_, reply = c.request("shell", "complete_request", map[string]any{"code": "import json\njson.du", "cursor_pos": 19})
			if m, _ := reply.Content["matches"].([]any); reply.Content["status"] != "ok" || !slices.Contains(m, any("dumps")) ||
				reply.Content["cursor_start"] != 17.0 || reply.Content["cursor_end"] != 19.0 {
				t.Errorf("complete: %+v", reply.Content)
			}
			_, reply = c.request("shell", "inspect_request", map[string]any{"code": "len(", "cursor_pos": 2, "detail_level": 0})
			if d, _ := reply.Content["data"].(map[string]any); reply.Content["found"] != true || !strings.Contains(fmt.Sprint(d["text/plain"]), "Return the number of items") {
				t.Errorf("inspect: %+v", reply.Content)
			}
			_, reply = c.request("shell", "is_complete_request", map[string]any{"code": "def f():"})
			if reply.Content["status"] != "incomplete" || reply.Content["indent"] != "    " {
				t.Errorf("is_complete: %+v", reply.Content)
			}
			_, reply = c.request("shell", "history_request", map[string]any{"hist_access_type": "tail", "n": 10})
			if reply.typ() != "history_reply" || reply.Content["status"] != "ok" {
				t.Errorf("history: %+v", reply)
			}
			_, reply = c.request("shell", "comm_info_request", map[string]any{})
			if reply.typ() != "comm_info_reply" || reply.Content["comms"] == nil {
				t.Errorf("comm_info: %+v", reply)
			}
			_, reply = c.request("control", "kernel_info_request", map[string]any{})
			if reply.Channel != "control" || reply.typ() != "kernel_info_reply" {
				t.Errorf("kernel_info on control: %+v", reply)
			}
			// input() asks the client that ran the cell, over stdin, when it allows stdin;
			// else it says that nobody can type into it.
			_, reply = c.request("shell", "execute_request", map[string]any{"code": "input('name? ')", "allow_stdin": false})
			if reply.Content["ename"] != "StdinNotImplementedError" {
				t.Errorf("input() without stdin: %+v", reply.Content)
			}
			id := c.send("shell", "execute_request", map[string]any{"code": "import getpass\nname = input('name? ')\npw = getpass.getpass()\nprint('hello', name, len(pw))",
				"allow_stdin": true})
			var asked []string
			for len(asked) < 2 {
				m, err := c.recv(time.Minute)
				if err != nil {
					t.Fatalf("waiting for input_request: %v", err)
				}
				if m.Channel == "stdin" && m.typ() == "input_request" && m.parent() == id {
					asked = append(asked, fmt.Sprint(m.Content["prompt"], "|", m.Content["password"]))
					c.send("stdin", "input_reply", map[string]any{"value": map[bool]string{false: "ada", true: "secret"}[m.Content["password"] == true]})
				}
			}
			iopub, reply = c.until(id)
			if reply.Content["status"] != "ok" || texts(iopub, "stream") != "hello ada 6\n" || asked[0] != "name? |false" || asked[1] != "Password: |true" {
				t.Errorf("input() over stdin: asked %q, %+v %q", asked, reply.Content, texts(iopub, "stream"))
			}
		})
	}
}

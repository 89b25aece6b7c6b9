package jupyter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
)

const (
	// maxConns caps the websockets of one kernel.
	maxConns = 32
	// maxQueued caps the shell requests waiting for one kernel, and maxQueuedBytes their
	// size as they came; past either a request is answered at once with an error (but
	// for one alone in the queue, whatever its size).
	maxQueued      = 256
	maxQueuedBytes = 64 << 20
	// maxOut caps the messages waiting to be written to one websocket, and maxOutBytes
	// their size (but for one alone, whatever its size); a client that falls that far
	// behind is disconnected.
	maxOut      = 4096
	maxOutBytes = 64 << 20
	// maxMalformed closes a websocket after that many messages in a row that are none.
	maxMalformed = 100
)

// writeTimeout is how long one message may take to write (a variable for the tests).
var writeTimeout = 30 * time.Second

// kernel is the gateway's side of one session's kernel while it has websockets: the
// websockets (each gets every iopub message, as from a Jupyter kernel), and the queue of
// shell requests, which one worker serves in order, as a kernel does.
type kernel struct {
	h       *Handler
	sid     string
	tenant  string
	image   string      // its session's, for kernel_info's language_info
	spec    *kernelSpec // its session's language's
	session string      // header.session of what the kernel sends

	mu      sync.Mutex
	conns   map[*conn]struct{}
	held    int // places for websockets being accepted (attach)
	queue   []request
	qbytes  int // the size of the requests in queue, as they came
	working bool
	count   int  // the execution count, as last seen
	ended   bool // its session ended: no more websockets
}

type request struct {
	c    *conn
	m    *message
	size int // of the websocket message it came in, which m may hold
}

// conn is one websocket of a kernel.
type conn struct {
	k      *kernel
	ws     *websocket.Conn
	v1     bool
	out    chan []byte
	held   atomic.Int64  // the bytes queued in out, and the one being written
	stdin  chan *message // input_reply messages, for a cell's input()
	closed chan struct{}
	once   sync.Once
	why    string // the close reason, set before closed is closed
	status websocket.StatusCode
}

// channels serves GET /api/kernels/{id}/channels: the kernel's websocket.
func (h *Handler) channels(w http.ResponseWriter, r *http.Request) {
	kid := r.PathValue("id")
	ctx := r.Context()
	if _, keyed := h.PresentedKey(r); !keyed && h.opts.OpenChannels {
		// The kernel id alone (Options.OpenChannels): the session's own tenant.
		sid, _ := h.ids.session(kid)
		owner, ok := h.s.Owner(sid)
		if !ok {
			h.WriteError(w, r, noKernel(kid))
			return
		}
		ctx = session.WithTenant(ctx, owner)
	}
	s, err := h.lookup(ctx, kid)
	if err != nil {
		h.WriteError(w, r, err)
		return
	}
	k, err := h.attach(s, session.Tenant(ctx))
	if err != nil {
		h.WriteError(w, r, err)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{protocolV1}})
	if err != nil {
		k.mu.Lock()
		k.held--
		k.mu.Unlock()
		k.detach(nil)
		return // Accept answered
	}
	ws.SetReadLimit(h.opts.MaxMessageBytes)
	c := &conn{k: k, ws: ws, v1: ws.Subprotocol() == protocolV1, out: make(chan []byte, maxOut), stdin: make(chan *message, 1), closed: make(chan struct{})}
	if !k.add(c) {
		ws.Close(websocket.StatusGoingAway, "the kernel's session ended")
		k.detach(nil)
		return
	}
	h.log.Debug("jupyter websocket open", "session_id", s.ID, "v1", c.v1)
	go c.write()
	c.read(ctx)
	k.detach(c)
}

// attach returns session s's kernel, made if it has none, counting a websocket to come;
// past maxConns it refuses.
func (h *Handler) attach(s *api.Session, tenant string) (*kernel, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := h.kernels[s.ID]
	if k == nil {
		k = &kernel{h: h, sid: s.ID, tenant: tenant, image: s.Image, spec: specOf(s.Language), session: newMsgID(), conns: map[*conn]struct{}{}, count: s.ExecutionCount}
		h.kernels[s.ID] = k
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.conns)+k.held >= maxConns {
		return nil, fmt.Errorf("this kernel has %d websockets open, the most it takes: close one: %w", maxConns, errdefs.ErrResourceExhausted)
	}
	k.held++
	return k, nil
}

// existing is session sid's kernel, if it has one now.
func (h *Handler) existing(sid string) *kernel {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kernels[sid]
}

func (k *kernel) add(c *conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held--
	if k.ended {
		return false
	}
	k.conns[c] = struct{}{}
	return true
}

// detach drops c (nil: none) and forgets the kernel once it has no websocket and no work.
func (k *kernel) detach(c *conn) {
	h := k.h
	h.mu.Lock()
	defer h.mu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	if c != nil {
		delete(k.conns, c)
		c.close(websocket.StatusNormalClosure, "")
	}
	if len(k.conns) == 0 && k.held == 0 && !k.working && h.kernels[k.sid] == k {
		delete(h.kernels, k.sid)
	}
}

// onEvent ends a kernel whose session ended: its websockets are told (status dead) and
// closed.
func (h *Handler) onEvent(e session.Event) {
	if e.Kind != session.SessionEnded {
		return
	}
	if k := h.existing(e.SessionID); k != nil {
		k.end("the kernel's session ended")
	}
}

func (k *kernel) end(why string) {
	k.publish("status", nil, map[string]string{"execution_state": "dead"})
	k.closeAll(websocket.StatusNormalClosure, why)
}

// closeAll closes the kernel's websockets; it takes no more.
func (k *kernel) closeAll(status websocket.StatusCode, why string) {
	k.mu.Lock()
	k.ended = true
	k.queue, k.qbytes = nil, 0
	k.mu.Unlock()
	for _, c := range k.websockets() {
		c.close(status, why)
	}
}

// websockets are the kernel's websockets now.
func (k *kernel) websockets() []*conn {
	k.mu.Lock()
	defer k.mu.Unlock()
	conns := make([]*conn, 0, len(k.conns))
	for c := range k.conns {
		conns = append(conns, c)
	}
	return conns
}

// ctx is the context of the kernel's work: its tenant's, not any websocket's (a client
// that goes away does not interrupt the cell it sent, as with a Jupyter kernel).
func (k *kernel) ctx() context.Context {
	return session.WithTenant(context.Background(), k.tenant)
}

// read reads the client's messages until the websocket closes.
func (c *conn) read(ctx context.Context) {
	bad := 0
	for {
		typ, b, err := c.ws.Read(ctx)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				c.close(websocket.StatusMessageTooBig, fmt.Sprintf("a message is larger than this server's limit of %d bytes", c.k.h.opts.MaxMessageBytes))
			}
			return
		}
		m, err := decode(c.v1, typ == websocket.MessageBinary, b)
		if err != nil {
			if bad++; bad >= maxMalformed {
				c.close(websocket.StatusPolicyViolation, "too many messages that are not Jupyter kernel messages")
				return
			}
			continue
		}
		bad = 0
		c.k.h.log.Debug("jupyter message", "session_id", c.k.sid, "channel", m.Channel, "msg_type", m.Header.MsgType)
		switch m.Channel {
		case "shell":
			c.k.enqueue(request{c, m, len(b)})
		case "control":
			c.k.control(c, m)
		case "stdin":
			if m.Header.MsgType == "input_reply" {
				select {
				case c.stdin <- m:
				default: // one is asked for at a time: a reply nobody asked for is dropped
				}
			}
		default: // iopub and hb: nothing to do
		}
	}
}

// write writes the queued messages until the websocket closes; after close, what is
// queued still goes (a shutdown's reply) within one writeTimeout in all, then the close
// frame: a closed websocket's client, which no longer counts towards maxConns, cannot keep
// it and what it holds by reading slowly.
func (c *conn) write() {
	for {
		select {
		case b := <-c.out:
			if !c.send(context.Background(), b) {
				return
			}
		case <-c.closed:
			ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
			defer cancel()
			for {
				select {
				case b := <-c.out:
					if !c.send(ctx, b) {
						return
					}
				default:
					c.ws.Close(c.status, c.why)
					return
				}
			}
		}
	}
}

func (c *conn) send(ctx context.Context, b []byte) bool {
	defer c.held.Add(-int64(len(b)))
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	typ := websocket.MessageText
	if c.v1 {
		typ = websocket.MessageBinary
	}
	if err := c.ws.Write(ctx, typ, b); err != nil {
		c.ws.CloseNow()
		return false
	}
	return true
}

func (c *conn) close(status websocket.StatusCode, why string) {
	c.once.Do(func() {
		c.status, c.why = status, why
		close(c.closed)
	})
}

// post queues m for c.
func (c *conn) post(m *message) {
	b, err := encode(c.v1, m)
	if err != nil {
		return
	}
	c.postBytes(b)
}

// postBytes queues m encoded for c's framing; a client that has fallen maxOut messages or
// maxOutBytes behind is closed.
func (c *conn) postBytes(b []byte) {
	select {
	case <-c.closed:
		return
	default:
	}
	n := int64(len(b))
	if held := c.held.Add(n); held > maxOutBytes && held != n {
		c.held.Add(-n)
		c.close(websocket.StatusPolicyViolation, "the client does not read its messages")
		return
	}
	select {
	case c.out <- b:
	default:
		c.held.Add(-n)
		c.close(websocket.StatusPolicyViolation, "the client does not read its messages")
	}
}

// message makes a message of the kernel on channel, in answer to parent (nil: none).
func (k *kernel) message(channel, msgType string, parent *message, content any) *message {
	body, err := marshal(content)
	if err != nil {
		body = []byte("{}")
	}
	m := &message{Channel: channel, Header: header{MsgID: newMsgID(), MsgType: msgType, Session: k.session,
		Username: "cellbox", Date: timestamp(time.Now()), Version: protocolVersion}, Content: body}
	if parent != nil {
		m.ParentHeader = parent.RawHeader
		if parent.Header.Username != "" {
			m.Header.Username = parent.Header.Username
		}
	}
	return m
}

// publish sends an iopub message to every websocket of the kernel, encoded once for each
// framing: the websockets share the bytes.
func (k *kernel) publish(msgType string, parent *message, content any) {
	m := k.message("iopub", msgType, parent, content)
	var framed [2][]byte // older framing, v1
	for _, c := range k.websockets() {
		i := 0
		if c.v1 {
			i = 1
		}
		if framed[i] == nil {
			b, err := encode(c.v1, m)
			if err != nil {
				return
			}
			framed[i] = b
		}
		c.postBytes(framed[i])
	}
}

// input asks r's websocket for a cell's input() (input_request on stdin) and waits for its
// input_reply, until ctx ends (the cell ended or was interrupted) or the websocket closes.
func (k *kernel) input(ctx context.Context, r request, prompt string, password bool) (string, error) {
	select { // a reply left from an earlier cell is no answer to this one
	case <-r.c.stdin:
	default:
	}
	r.c.post(k.message("stdin", "input_request", r.m, map[string]any{"prompt": prompt, "password": password}))
	select {
	case m := <-r.c.stdin:
		var c struct {
			Value string `json:"value"`
		}
		json.Unmarshal(m.Content, &c)
		return c.Value, nil
	case <-r.c.closed:
		return "", errors.New("the client that ran the cell went away")
	case <-ctx.Done():
		return "", errors.New("the cell was interrupted, or ran out of time, while input() waited")
	}
}

// reply answers request r on its own channel and websocket.
func (k *kernel) reply(r request, content any) {
	t := strings.TrimSuffix(r.m.Header.MsgType, "_request") + "_reply"
	r.c.post(k.message(r.m.Channel, t, r.m, content))
}

// errorContent is a reply's content for a failure.
func errorContent(ename, evalue string) map[string]any {
	return map[string]any{"status": "error", "ename": ename, "evalue": evalue, "traceback": []string{}}
}

// enqueue queues a shell request; the kernel's worker serves the queue in order.
func (k *kernel) enqueue(r request) {
	k.mu.Lock()
	if k.ended {
		k.mu.Unlock()
		return
	}
	if n, size := len(k.queue), k.qbytes; n >= maxQueued || n > 0 && size+r.size > maxQueuedBytes {
		k.mu.Unlock()
		k.reply(r, errorContent("QueueFull", fmt.Sprintf("this kernel has %d requests (%d MiB) waiting, the most it keeps: wait for their replies",
			n, size>>20)))
		return
	}
	k.queue = append(k.queue, r)
	k.qbytes += r.size
	start := !k.working
	k.working = true
	k.mu.Unlock()
	if start {
		go k.work()
	}
}

func (k *kernel) work() {
	for {
		k.mu.Lock()
		if len(k.queue) == 0 || k.ended {
			k.queue, k.qbytes = nil, 0
			k.working = false
			k.mu.Unlock()
			k.detach(nil)
			return
		}
		r := k.queue[0]
		k.queue[0] = request{}
		k.queue = k.queue[1:]
		k.qbytes -= r.size
		k.mu.Unlock()
		if k.shell(r) {
			k.abortQueued()
		}
	}
}

// shell serves one shell request: status busy, the reply, status idle, as a kernel does.
// It reports whether the execute requests queued behind it are to be aborted (a cell failed
// with stop_on_error).
func (k *kernel) shell(r request) (abort bool) {
	t := r.m.Header.MsgType
	switch t {
	case "shutdown_request":
		k.control(r.c, r.m) // older clients send it on shell
		return false
	case "comm_msg", "comm_close":
		k.publish("status", r.m, map[string]string{"execution_state": "busy"})
		k.publish("status", r.m, map[string]string{"execution_state": "idle"})
		return false
	}
	if !strings.HasSuffix(t, "_request") && t != "comm_open" {
		return false
	}
	k.publish("status", r.m, map[string]string{"execution_state": "busy"})
	defer k.publish("status", r.m, map[string]string{"execution_state": "idle"})
	ctx := k.ctx()
	switch t {
	case "execute_request":
		failed, stop := k.execute(ctx, r)
		return failed && stop
	case "kernel_info_request":
		k.reply(r, k.kernelInfo(ctx, true))
	case "complete_request":
		var c struct {
			Code      string `json:"code"`
			CursorPos *int   `json:"cursor_pos"`
		}
		json.Unmarshal(r.m.Content, &c)
		if k.spec.lang != api.LanguagePython {
			// Python's completer alone: none for the other languages.
			pos := utf8.RuneCountInString(c.Code)
			if c.CursorPos != nil && *c.CursorPos >= 0 && *c.CursorPos < pos {
				pos = *c.CursorPos
			}
			k.reply(r, map[string]any{"status": "ok", "matches": []string{}, "cursor_start": pos, "cursor_end": pos, "metadata": map[string]any{}})
			return
		}
		res, err := k.h.s.Complete(ctx, k.sid, api.CompleteRequest{Code: c.Code, CursorPos: c.CursorPos})
		if err != nil {
			k.reply(r, k.errorReply(err))
			return
		}
		types := make([]map[string]any, 0, len(res.Types))
		for i, typ := range res.Types {
			types = append(types, map[string]any{"start": res.CursorStart, "end": res.CursorEnd, "text": res.Matches[i], "type": typ})
		}
		k.reply(r, map[string]any{"status": "ok", "matches": res.Matches, "cursor_start": res.CursorStart, "cursor_end": res.CursorEnd,
			"metadata": map[string]any{"_jupyter_types_experimental": types}})
	case "inspect_request":
		if k.spec.lang != api.LanguagePython {
			k.reply(r, map[string]any{"status": "ok", "found": false, "data": map[string]any{}, "metadata": map[string]any{}})
			return
		}
		var c struct {
			Code        string `json:"code"`
			CursorPos   *int   `json:"cursor_pos"`
			DetailLevel int    `json:"detail_level"`
		}
		json.Unmarshal(r.m.Content, &c)
		res, err := k.h.s.Inspect(ctx, k.sid, api.InspectRequest{Code: c.Code, CursorPos: c.CursorPos, DetailLevel: c.DetailLevel})
		if err != nil {
			k.reply(r, k.errorReply(err))
			return
		}
		data := res.Data
		if data == nil {
			data = map[string]any{}
		}
		k.reply(r, map[string]any{"status": "ok", "found": res.Found, "data": data, "metadata": map[string]any{}})
	case "is_complete_request":
		if k.spec.lang != api.LanguagePython {
			// As kernels without a parser of their own answer: the client decides.
			k.reply(r, map[string]any{"status": "unknown"})
			return
		}
		var c struct {
			Code string `json:"code"`
		}
		json.Unmarshal(r.m.Content, &c)
		res, err := k.h.s.IsComplete(ctx, k.sid, c.Code)
		if err != nil {
			k.reply(r, map[string]any{"status": "unknown"})
			return
		}
		k.reply(r, map[string]any{"status": res.Status, "indent": res.Indent})
	case "history_request":
		k.reply(r, map[string]any{"status": "ok", "history": []any{}})
	case "comm_info_request":
		k.reply(r, map[string]any{"status": "ok", "comms": map[string]any{}})
	case "comm_open":
		// No comm targets here (no widgets): the comm is closed, as ipykernel closes one
		// whose target it lacks.
		var c struct {
			CommID string `json:"comm_id"`
		}
		json.Unmarshal(r.m.Content, &c)
		k.publish("comm_close", r.m, map[string]any{"comm_id": c.CommID, "data": map[string]any{}})
	default:
		k.reply(r, errorContent("UnknownMessageType", fmt.Sprintf("this kernel does not answer %s", t)))
	}
	return false
}

// errorReply is a reply's content for err, worded for the client.
func (k *kernel) errorReply(err error) map[string]any {
	return errorContent("CellboxError", errdefs.Public(k.h.log, err, "session_id", k.sid))
}

// abortQueued answers the execute requests queued when one failed with status aborted,
// as a kernel does for a cell that failed with stop_on_error.
func (k *kernel) abortQueued() {
	k.mu.Lock()
	var aborted, kept []request
	for _, r := range k.queue {
		if r.m.Header.MsgType == "execute_request" {
			aborted = append(aborted, r)
			k.qbytes -= r.size
		} else {
			kept = append(kept, r)
		}
	}
	k.queue = kept
	k.mu.Unlock()
	for _, r := range aborted {
		k.publish("status", r.m, map[string]string{"execution_state": "busy"})
		k.reply(r, map[string]any{"status": "aborted"})
		k.publish("status", r.m, map[string]string{"execution_state": "idle"})
	}
}

// control serves a control request at once, whatever the shell runs, between status busy
// and idle as ipykernel does.
func (k *kernel) control(c *conn, m *message) {
	r := request{c: c, m: m}
	ctx := k.ctx()
	k.publish("status", m, map[string]string{"execution_state": "busy"})
	defer k.publish("status", m, map[string]string{"execution_state": "idle"})
	switch m.Header.MsgType {
	case "interrupt_request":
		if err := k.h.s.Interrupt(ctx, k.sid); err != nil {
			k.reply(r, k.errorReply(err))
			return
		}
		k.reply(r, map[string]any{"status": "ok"})
	case "shutdown_request":
		var body struct {
			Restart bool `json:"restart"`
		}
		json.Unmarshal(m.Content, &body)
		if body.Restart {
			if err := k.h.restart(ctx, k.sid); err != nil {
				k.reply(r, k.errorReply(err))
				return
			}
			k.reply(r, map[string]any{"status": "ok", "restart": true})
			return
		}
		// The reply first: the session's end closes the websockets.
		k.reply(r, map[string]any{"status": "ok", "restart": false})
		if err := k.h.s.Delete(ctx, k.sid); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			k.h.log.Warn("jupyter shutdown", "session_id", k.sid, "error", err)
		}
	case "kernel_info_request":
		k.reply(r, k.kernelInfo(ctx, false))
	default:
		k.reply(r, errorContent("UnknownMessageType", fmt.Sprintf("this kernel does not answer %s", m.Header.MsgType)))
	}
}

// kernelInfo is kernel_info_reply's content; ask: find the language's version if not known
// yet (on shell, in the kernel's turn).
func (k *kernel) kernelInfo(ctx context.Context, ask bool) map[string]any {
	impl := "cellbox"
	if k.spec.lang != api.LanguagePython {
		impl = "cellbox-" + k.spec.lang
	}
	return map[string]any{
		"status": "ok", "protocol_version": protocolVersion, "implementation": impl,
		"implementation_version": k.h.opts.Version, "language_info": k.h.language(ctx, k.sid, k.image, k.spec, ask),
		"banner": k.spec.title + " in a cellbox sandbox", "help_links": []any{}, "debugger": false,
	}
}

// marshal is json.Marshal without HTML's escapes: code and outputs are full of < > &, which
// json.Marshal writes as six bytes each.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
)

// Execute runs code in a session and returns the whole result when the cell ends. An
// execution that is already running there finishes first.
func (c *Client) Execute(ctx context.Context, id string, req api.ExecuteRequest) (*api.ExecuteResult, error) {
	return call[api.ExecuteResult](ctx, c, http.MethodPost, sessionPath(id, "/execute"), req)
}

// ExecuteStream is Execute with Server-Sent Events: onOutput gets each output as the code
// produces it, in order, on the calling goroutine; the returned result holds them all again.
// Canceling ctx drops the stream, and the server then interrupts the cell.
func (c *Client) ExecuteStream(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	return stream(ctx, c, sessionPath(id, "/execute"), req, "output", onOutput, executeOutputs)
}

// ExecuteOnce runs code once in a fresh sandbox that the server discards afterwards.
func (c *Client) ExecuteOnce(ctx context.Context, req api.OneShotRequest) (*api.ExecuteResult, error) {
	return call[api.ExecuteResult](ctx, c, http.MethodPost, "/v1/execute", req)
}

// ExecuteOnceStream is ExecuteOnce with outputs streamed to onOutput, as in ExecuteStream.
func (c *Client) ExecuteOnceStream(ctx context.Context, req api.OneShotRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	return stream(ctx, c, "/v1/execute", req, "output", onOutput, executeOutputs)
}

// ExecuteNotebook runs a Jupyter notebook (nbformat 4) and returns it executed (see
// api.NotebookRequest): in req.SessionID's session, else in a new one. A cell that fails
// is the result's Status (with FailedCell), not an error; the result holds the notebook as
// far as it ran.
func (c *Client) ExecuteNotebook(ctx context.Context, req api.NotebookRequest) (*api.NotebookResult, error) {
	return call[api.NotebookResult](ctx, c, http.MethodPost, "/v1/notebooks/execute", req)
}

// ExecuteNotebookStream is ExecuteNotebook with Server-Sent Events: onCell gets each code
// cell as it finishes, in order, on the calling goroutine. Canceling ctx drops the stream,
// and the server then interrupts the running cell and stops.
func (c *Client) ExecuteNotebookStream(ctx context.Context, req api.NotebookRequest, onCell func(api.NotebookCell)) (*api.NotebookResult, error) {
	return stream[api.NotebookResult](ctx, c, "/v1/notebooks/execute", req, "cell", onCell, nil)
}

// maxEventLine bounds one line of an event stream: an output may carry a large image, a
// notebook's result the whole notebook.
const maxEventLine = 256 << 20

func executeOutputs(r *api.ExecuteResult) []api.Output { return r.Outputs }

// stream POSTs in to path asking for Server-Sent Events: onEvent gets each event named
// event, and the "result" event is the T returned. A server that answers with the whole
// result at once is read as well: onEvent then gets whole(result) (none for a nil whole),
// in order.
func stream[T, E any](ctx context.Context, c *Client, path string, in any, event string, onEvent func(E), whole func(*T) []E) (*T, error) {
	if onEvent == nil {
		onEvent = func(E) {}
	}
	req, err := c.newRequest(ctx, http.MethodPost, path, in)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		// A server (or proxy) that answered with the whole result at once.
		var res T
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			return nil, fmt.Errorf("decode the response of POST %s: %w", path, err)
		}
		if whole != nil {
			for _, e := range whole(&res) {
				onEvent(e)
			}
		}
		return &res, nil
	}
	var res *T
	err = readEvents(resp.Body, maxEventLine, func(name string, data []byte) error {
		switch name {
		case event:
			var e E
			if err := json.Unmarshal(data, &e); err != nil {
				return fmt.Errorf("decode %s event: %w", event, err)
			}
			onEvent(e)
		case "result":
			res = new(T)
			if err := json.Unmarshal(data, res); err != nil {
				return fmt.Errorf("decode result event: %w", err)
			}
			return io.EOF
		case "error":
			var e api.ErrorBody
			if err := json.Unmarshal(data, &e); err != nil {
				return fmt.Errorf("decode error event: %w", err)
			}
			return streamError(e.Error)
		}
		return nil // an event of a later API version
	})
	if err == io.EOF && res != nil {
		return res, nil
	}
	if err == nil || err == io.EOF {
		err = fmt.Errorf("the event stream ended before the result: %w", io.ErrUnexpectedEOF)
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	if _, ok := err.(*Error); ok {
		return nil, err
	}
	return nil, fmt.Errorf("POST %s: %w", path, err)
}

// readEvents parses a Server-Sent Events stream of lines of at most max bytes, calling fn
// for each event until fn returns an error (returned as is) or the stream ends (nil). Comment lines (":...") are skipped;
// several data lines of one event are joined with "\n", as the SSE standard says.
func readEvents(r io.Reader, max int, fn func(event string, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), max)
	var event string
	var data []byte
	var hasData bool
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if hasData {
				if event == "" {
					event = "message"
				}
				if err := fn(event, data); err != nil {
					return err
				}
			}
			event, data, hasData = "", data[:0], false
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			event = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		}
	}
	return sc.Err()
}

// Timing is one entry of a Server-Timing header: a span of the server's work, by name (see
// api.TraceHeader for an execution's).
type Timing struct {
	Name string
	Dur  time.Duration
	Desc string
}

// ExecuteTraced is Execute that asks the server where the cell's time went
// (api.TraceHeader): it returns the entries of the answer's Server-Timing header too, in
// their order (none from a server that does not trace).
func (c *Client) ExecuteTraced(ctx context.Context, id string, req api.ExecuteRequest) (*api.ExecuteResult, []Timing, error) {
	hr, err := c.newRequest(ctx, http.MethodPost, sessionPath(id, "/execute"), req)
	if err != nil {
		return nil, nil, err
	}
	hr.Header.Set(api.TraceHeader, "1")
	resp, err := c.send(hr)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	res, err := decodeBody[api.ExecuteResult](resp, hr)
	if err != nil {
		return nil, nil, err
	}
	return res, ParseServerTiming(resp.Header.Values("Server-Timing")), nil
}

// ParseServerTiming parses Server-Timing header values (W3C Server Timing): each entry's
// name, dur (milliseconds) and desc; other parameters are ignored, and so is an entry
// without a name.
func ParseServerTiming(values []string) []Timing {
	var out []Timing
	for _, v := range values {
		for _, entry := range splitQuoted(v, ',') {
			params := splitQuoted(entry, ';')
			t := Timing{Name: strings.TrimSpace(params[0])}
			if t.Name == "" {
				continue
			}
			for _, p := range params[1:] {
				k, val, _ := strings.Cut(p, "=")
				val = strings.TrimSpace(val)
				if u, err := strconv.Unquote(val); err == nil && strings.HasPrefix(val, `"`) {
					val = u
				}
				switch strings.ToLower(strings.TrimSpace(k)) {
				case "dur":
					// A server's number: only a finite one from 0 to a day is a duration.
					if ms, err := strconv.ParseFloat(val, 64); err == nil && ms >= 0 && ms <= 24*3600*1000 {
						t.Dur = time.Duration(ms * float64(time.Millisecond))
					}
				case "desc":
					t.Desc = val
				}
			}
			out = append(out, t)
		}
	}
	return out
}

// splitQuoted splits s at sep outside double-quoted strings (a backslash escapes in them).
func splitQuoted(s string, sep byte) []string {
	var parts []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

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
	return stream(ctx, c, sessionPath(id, "/execute"), req, onOutput, executeOutputs)
}

// ExecuteOnce runs code once in a fresh sandbox that the server discards afterwards.
func (c *Client) ExecuteOnce(ctx context.Context, req api.OneShotRequest) (*api.ExecuteResult, error) {
	return call[api.ExecuteResult](ctx, c, http.MethodPost, "/v1/execute", req)
}

// ExecuteOnceStream is ExecuteOnce with outputs streamed to onOutput, as in ExecuteStream.
func (c *Client) ExecuteOnceStream(ctx context.Context, req api.OneShotRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	return stream(ctx, c, "/v1/execute", req, onOutput, executeOutputs)
}

// maxEventLine bounds one line of an event stream: an output may carry a large image.
const maxEventLine = 64 << 20

func executeOutputs(r *api.ExecuteResult) []api.Output { return r.Outputs }

// stream POSTs in to path asking for Server-Sent Events: onOutput gets each "output" event,
// and the "result" event is the T returned. A server that answers with the whole result at
// once is read as well: onOutput then gets outputs(result), in order.
func stream[T any](ctx context.Context, c *Client, path string, in any, onOutput func(api.Output), outputs func(*T) []api.Output) (*T, error) {
	if onOutput == nil {
		onOutput = func(api.Output) {}
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
		for _, o := range outputs(&res) {
			onOutput(o)
		}
		return &res, nil
	}
	var res *T
	err = readEvents(resp.Body, func(event string, data []byte) error {
		switch event {
		case "output":
			var o api.Output
			if err := json.Unmarshal(data, &o); err != nil {
				return fmt.Errorf("decode output event: %w", err)
			}
			onOutput(o)
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

// readEvents parses a Server-Sent Events stream, calling fn for each event until fn returns
// an error (returned as is) or the stream ends (nil). Comment lines (":...") are skipped;
// several data lines of one event are joined with "\n", as the SSE standard says.
func readEvents(r io.Reader, fn func(event string, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
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

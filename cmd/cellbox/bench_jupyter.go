package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// kernelCells times n trivial cells over Jupyter's kernel API, after warm untimed ones: a
// kernel started with POST /api/kernels, its websocket (the JSON text framing), and per
// cell the time from sending its execute_request to reading its execute_reply, and to
// reading its status idle (which follows the reply).
func (b *bench) kernelCells(ctx context.Context, n, warm int) (reply, idle []time.Duration, err error) {
	kid, err := b.startKernel(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer b.deleteKernel(context.WithoutCancel(ctx), kid)
	u := "ws" + strings.TrimPrefix(b.url, "http") + "/api/kernels/" + kid + "/channels"
	ws, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("the kernel's websocket: %w", err)
	}
	defer ws.CloseNow()
	for i := -warm; i < n; i++ {
		t := time.Now()
		id := fmt.Sprintf("bench-%d", i+warm)
		if err := ws.Write(ctx, websocket.MessageText, executeRequest(id, trivialCell)); err != nil {
			return nil, nil, fmt.Errorf("send an execute_request: %w", err)
		}
		var tr time.Duration
		for {
			m, err := readKernelMessage(ctx, ws)
			if err != nil {
				return nil, nil, err
			}
			if m.ParentHeader.MsgID != id {
				continue
			}
			if m.Header.MsgType == "execute_reply" {
				tr = time.Since(t)
				if m.Content.Status != "ok" {
					return nil, nil, fmt.Errorf("execute_reply: status %q", m.Content.Status)
				}
			}
			if m.Header.MsgType == "status" && m.Content.ExecutionState == "idle" {
				if tr == 0 {
					return nil, nil, errors.New("status idle before the execute_reply")
				}
				if i >= 0 {
					reply, idle = append(reply, tr), append(idle, time.Since(t))
				}
				break
			}
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")
	return reply, idle, nil
}

// executeRequest is an execute_request of code in the JSON text framing.
func executeRequest(id, code string) []byte {
	b, _ := json.Marshal(map[string]any{
		"header": map[string]string{"msg_id": id, "msg_type": "execute_request", "session": "cellbox-bench", "username": "bench",
			"date": time.Now().UTC().Format(time.RFC3339Nano), "version": "5.3"},
		"parent_header": map[string]any{}, "metadata": map[string]any{}, "channel": "shell", "buffers": []any{},
		"content": map[string]any{"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{},
			"allow_stdin": false, "stop_on_error": true},
	})
	return b
}

// kernelMessage is what the bench reads of a message from a kernel's websocket.
type kernelMessage struct {
	Header struct {
		MsgType string `json:"msg_type"`
	} `json:"header"`
	ParentHeader struct {
		MsgID string `json:"msg_id"`
	} `json:"parent_header"`
	Content struct {
		Status         string `json:"status"`
		ExecutionState string `json:"execution_state"`
	} `json:"content"`
}

func readKernelMessage(ctx context.Context, ws *websocket.Conn) (*kernelMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, b, err := ws.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the kernel's websocket: %w", err)
	}
	var m kernelMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("a kernel message: %w", err)
	}
	return &m, nil
}

// startKernel starts a kernel with POST /api/kernels; it returns its id.
func (b *bench) startKernel(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url+"/api/kernels", strings.NewReader(`{"name":"python3"}`))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("start a kernel: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	var k struct{ ID string }
	if res.StatusCode != http.StatusCreated || json.Unmarshal(body, &k) != nil || k.ID == "" {
		return "", fmt.Errorf("start a kernel: %s: %.200s", res.Status, body)
	}
	return k.ID, nil
}

func (b *bench) deleteKernel(ctx context.Context, id string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, b.url+"/api/kernels/"+id, nil)
	if err != nil {
		return
	}
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
	}
}

// jupyterClientScript drives a local ipykernel with jupyter_client: the reference for
// kernelCells, the same measure without cellbox.
//
//go:embed bench_jupyter.py
var jupyterClientScript string

// errNoIPykernel: python lacks jupyter_client or ipykernel.
var errNoIPykernel = errors.New("python lacks jupyter_client or ipykernel")

// jupyterClientCells times n trivial cells, after warm untimed ones, in a local ipykernel
// (no sandbox) that python starts and drives with jupyter_client: from kc.execute to the
// execute_reply, and to the status idle.
func jupyterClientCells(ctx context.Context, python string, n, warm int) (reply, idle []time.Duration, err error) {
	runtime, err := os.MkdirTemp("", "cellbox-bench-jupyter-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(runtime)
	cmd := exec.CommandContext(ctx, python, "-c", jupyterClientScript, strconv.Itoa(n), strconv.Itoa(warm), trivialCell)
	// Its connection files in a folder of its own; ipykernel's debugger quiet about
	// Python's frozen modules.
	cmd.Env = append(os.Environ(), "JUPYTER_RUNTIME_DIR="+runtime, "PYDEVD_DISABLE_FILE_VALIDATION=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
			return nil, nil, fmt.Errorf("%w (%s)", errNoIPykernel, msg)
		}
		return nil, nil, fmt.Errorf("%s: %w: %s", python, err, msg)
	}
	var r struct {
		Reply []int64 `json:"reply_ns"`
		Idle  []int64 `json:"idle_ns"`
	}
	if err := json.Unmarshal(out, &r); err != nil || len(r.Reply) != n || len(r.Idle) != n {
		return nil, nil, fmt.Errorf("%s: not the script's figures: %.200s", python, out)
	}
	for i := range n {
		reply, idle = append(reply, time.Duration(r.Reply[i])), append(idle, time.Duration(r.Idle[i]))
	}
	return reply, idle, nil
}

// jupyterClientRefs are the reference cells of the websocket's two rows: the figures, or
// why there are none.
func jupyterClientRefs(ctx context.Context, python string, n int) (reply, idle string) {
	const what = "jupyter_client + a local ipykernel (no sandbox), the same measure"
	r, i, err := jupyterClientCells(ctx, python, n, 20)
	switch {
	case errors.Is(err, errNoIPykernel):
		msg := fmt.Sprintf("%s: not measured, %v: apt-get install python3-jupyter-client python3-ipykernel", what, err)
		return msg, msg
	case err != nil:
		msg := fmt.Sprintf("%s: not measured: %v", what, err)
		return msg, msg
	}
	return fmt.Sprintf("%s (n=%d): %s", what, n, stat(r)), fmt.Sprintf("%s: %s", what, stat(i))
}

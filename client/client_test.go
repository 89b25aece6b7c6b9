package client_test

// The SDK against a real server in this process: runc sandboxes, the real guest, IPython.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testserver"
)

// shared is the server of this package's tests (runc on the host's root).
var shared = &testserver.Shared{Prefix: "client", Prepare: func(_ string, cfg *config.Config, _ *server.Options) error {
	cfg.PoolSize, cfg.PoolMax = 1, 0
	return nil
}}

func TestMain(m *testing.M) { testserver.Main(m, shared) }

// newClient returns a client of a server shared by this package's tests, skipping when this
// machine cannot run it. `make test` runs as root with runc and IPython: nothing is skipped.
func newClient(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	return client.New(shared.Start(t).URL, opts...)
}

func newSession(t *testing.T, c *client.Client) string {
	t.Helper()
	s, err := c.CreateSession(t.Context(), api.CreateSessionRequest{})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	t.Cleanup(func() { c.DeleteSession(context.Background(), s.ID) })
	return s.ID
}

func stdout(r *api.ExecuteResult) string {
	var b strings.Builder
	for _, o := range r.Outputs {
		if o.Type == api.OutputStream && o.Name == "stdout" {
			b.WriteString(o.Text)
		}
	}
	return b.String()
}

func result(r *api.ExecuteResult) string {
	for _, o := range r.Outputs {
		if o.Type == api.OutputExecuteResult {
			s, _ := o.Data["text/plain"].(string)
			return s
		}
	}
	return ""
}

func TestSessionsAndErrors(t *testing.T) {
	c := newClient(t, client.WithHeader("X-Test", "1"), client.WithHTTPClient(&http.Client{}))
	ctx := t.Context()
	h, err := c.Health(ctx)
	if err != nil || h.Status != "ok" || h.Backend != "runc" {
		t.Fatalf("health %+v, %v", h, err)
	}
	s, err := c.CreateSession(ctx, api.CreateSessionRequest{Limits: &api.Limits{MemoryMB: 512}})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID == "" || s.Language != "python" || s.Limits.MemoryMB != 512 {
		t.Errorf("session %+v", s)
	}
	got, err := c.GetSession(ctx, s.ID)
	if err != nil || got.ID != s.ID || got.State != "idle" {
		t.Errorf("get: %+v, %v", got, err)
	}
	list, err := c.ListSessions(ctx)
	if err != nil || !containsSession(list, s.ID) {
		t.Errorf("list: %+v, %v", list, err)
	}
	if err := c.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetSession(ctx, s.ID)
	var e *client.Error
	if !client.IsNotFound(err) || !errors.As(err, &e) || e.StatusCode != http.StatusNotFound || !strings.Contains(e.Message, s.ID) {
		t.Errorf("get after delete: %#v", err)
	}
	if err := c.DeleteSession(ctx, s.ID); !client.IsNotFound(err) {
		t.Errorf("delete twice: %v", err)
	}
	if _, err := c.Execute(ctx, "nope", api.ExecuteRequest{Code: "1"}); !client.IsNotFound(err) {
		t.Errorf("execute in unknown session: %v", err)
	}
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{Language: "cobol"}); !client.IsInvalidArgument(err) {
		t.Errorf("bad language: %v", err)
	}
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{Limits: &api.Limits{MemoryMB: 1 << 30}}); client.Code(err) != api.CodeInvalidArgument {
		t.Errorf("limit above max: %v", err)
	}
}

// TestUpdateSession: metadata and a lifetime round-trip, UpdateSession sets a new deadline
// from now, and the server's refusals come back classified.
func TestUpdateSession(t *testing.T) {
	c := newClient(t)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, api.CreateSessionRequest{LifetimeS: 600, Metadata: map[string]string{"owner": "sdk"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSession(context.Background(), s.ID) })
	if s.ExpiresAt == nil || s.ExpiresAt.Sub(s.CreatedAt) != 10*time.Minute || s.Metadata["owner"] != "sdk" {
		t.Errorf("created: %+v", s)
	}
	before := time.Now()
	u, err := c.UpdateSession(ctx, s.ID, api.UpdateSessionRequest{LifetimeS: 3600})
	if err != nil || u.ExpiresAt == nil || u.ExpiresAt.Before(before.Add(time.Hour)) || u.Metadata["owner"] != "sdk" {
		t.Fatalf("update: %+v, %v", u, err)
	}
	if got, err := c.GetSession(ctx, s.ID); err != nil || !got.ExpiresAt.Equal(*u.ExpiresAt) {
		t.Errorf("get after update: %+v, %v", got, err)
	}
	if _, err := c.UpdateSession(ctx, s.ID, api.UpdateSessionRequest{}); !client.IsInvalidArgument(err) {
		t.Errorf("no lifetime: %v", err)
	}
	if _, err := c.UpdateSession(ctx, "nope", api.UpdateSessionRequest{LifetimeS: 60}); !client.IsNotFound(err) {
		t.Errorf("unknown session: %v", err)
	}
}

func TestContexts(t *testing.T) {
	c := newClient(t)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSession(context.WithoutCancel(ctx), s.ID)
	if _, err := c.Execute(ctx, s.ID, api.ExecuteRequest{Code: "x = 1", Context: "my.ctx-1"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Execute(ctx, s.ID, api.ExecuteRequest{Code: "print('x' in globals())"})
	if err != nil || stdout(r) != "False\n" {
		t.Errorf("the default context sees another's variable: %+v, %v", r, err)
	}
	if err := c.DeleteContext(ctx, s.ID, "my.ctx-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteContext(ctx, s.ID, "my.ctx-1"); !client.IsNotFound(err) {
		t.Errorf("delete twice: %v", err)
	}
	if err := c.DeleteContext(ctx, s.ID, "a/b"); !client.IsInvalidArgument(err) {
		t.Errorf("a name with a slash: %v", err)
	}
}

func containsSession(list []api.Session, id string) bool {
	for _, s := range list {
		if s.ID == id {
			return true
		}
	}
	return false
}

func TestExecute(t *testing.T) {
	c := newClient(t)
	id := newSession(t, c)
	ctx := t.Context()
	r, err := c.Execute(ctx, id, api.ExecuteRequest{Code: "x = 41\nprint('hi')"})
	if err != nil || r.Status != api.StatusOK || stdout(r) != "hi\n" {
		t.Fatalf("first cell: %+v, %v", r, err)
	}
	r, err = c.Execute(ctx, id, api.ExecuteRequest{Code: "x + 1"})
	if err != nil || result(r) != "42" {
		t.Fatalf("state: %+v, %v", r, err)
	}
	r, err = c.Execute(ctx, id, api.ExecuteRequest{Code: "1/0"})
	if err != nil || r.Status != api.StatusError || r.Outputs[len(r.Outputs)-1].EName != "ZeroDivisionError" {
		t.Fatalf("1/0: %+v, %v", r, err)
	}
	r, err = c.Execute(ctx, id, api.ExecuteRequest{Code: "import time; time.sleep(30)", TimeoutS: 1})
	if err != nil || r.Status != api.StatusTimeout {
		t.Fatalf("timeout: %+v, %v", r, err)
	}
	r, err = c.ExecuteOnce(ctx, api.OneShotRequest{Code: "print(open('in.txt').read() + '!')",
		Files: []api.InputFile{{Path: "in.txt", Content: "once"}}})
	if err != nil || stdout(r) != "once!\n" {
		t.Fatalf("one-shot: %+v, %v", r, err)
	}
}

// TestExecuteStream proves outputs arrive in order and while the cell runs: the cell
// prints, then waits for a file the test uploads only after it has seen that print.
func TestExecuteStream(t *testing.T) {
	c := newClient(t)
	id := newSession(t, c)
	ctx := t.Context()
	code := "import os, sys, time\nprint('first', flush=True)\n" +
		"while not os.path.exists('/mnt/data/go'): time.sleep(0.02)\n" +
		"print('err', file=sys.stderr, flush=True)\n" +
		"from IPython.display import display, HTML\ndisplay(HTML('<b>x</b>'))\nprint('last')\n'done'"
	var got []api.Output
	r, err := c.ExecuteStream(ctx, id, api.ExecuteRequest{Code: code, TimeoutS: 30}, func(o api.Output) {
		got = append(got, o)
		if len(got) == 1 {
			if _, err := c.UploadFile(ctx, id, "go", strings.NewReader("")); err != nil {
				t.Errorf("upload go: %v", err)
			}
		}
	})
	if err != nil || r.Status != api.StatusOK {
		t.Fatalf("stream: %+v, %v", r, err)
	}
	var kinds []string
	for _, o := range got {
		kinds = append(kinds, o.Type+":"+o.Name)
	}
	want := "stream:stdout stream:stderr display_data: stream:stdout execute_result:"
	if strings.Join(kinds, " ") != want {
		t.Errorf("streamed %q, want %q", kinds, want)
	}
	if len(r.Outputs) != len(got) || result(r) != "'done'" {
		t.Errorf("result outputs %+v, streamed %d", r.Outputs, len(got))
	}

	var n int
	r, err = c.ExecuteOnceStream(ctx, api.OneShotRequest{Code: "print(1+1)"}, func(o api.Output) { n++ })
	if err != nil || stdout(r) != "2\n" || n != 1 {
		t.Errorf("one-shot stream: %+v, %d outputs, %v", r, n, err)
	}
	if _, err := c.ExecuteStream(ctx, "nope", api.ExecuteRequest{Code: "1"}, nil); !client.IsNotFound(err) {
		t.Errorf("stream in unknown session: %v", err)
	}
}

// TestStreamErrorEvent ends a session while its cell streams: the stream ends with an
// "error" event, which the client returns as an *Error.
func TestStreamErrorEvent(t *testing.T) {
	c := newClient(t)
	s, err := c.CreateSession(t.Context(), api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var outputs int
	_, err = c.ExecuteStream(t.Context(), s.ID, api.ExecuteRequest{Code: "import time\nprint('up', flush=True)\ntime.sleep(60)"},
		func(o api.Output) {
			outputs++
			go c.DeleteSession(context.Background(), s.ID)
		})
	if outputs != 1 || !client.IsNotFound(err) {
		t.Fatalf("stream of an ended session: %d outputs, %v; want 1 and not_found", outputs, err)
	}
}

func TestInterruptRestartCommand(t *testing.T) {
	c := newClient(t)
	id := newSession(t, c)
	ctx := t.Context()
	if _, err := c.Execute(ctx, id, api.ExecuteRequest{Code: "kept = 'yes'"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan *api.ExecuteResult, 1)
	go func() {
		r, err := c.ExecuteStream(ctx, id, api.ExecuteRequest{Code: "import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.05)"},
			func(o api.Output) {
				if _, err := c.Interrupt(ctx, id); err != nil {
					t.Errorf("interrupt: %v", err)
				}
			})
		if err != nil {
			t.Errorf("interrupted stream: %v", err)
		}
		done <- r
	}()
	if r := <-done; r == nil || r.Status != api.StatusInterrupted {
		t.Fatalf("interrupted cell: %+v", r)
	}
	if r, _ := c.Execute(ctx, id, api.ExecuteRequest{Code: "kept"}); result(r) != "'yes'" {
		t.Fatalf("state lost after interrupt: %+v", r)
	}
	s, err := c.Restart(ctx, id)
	if err != nil || s.ID != id {
		t.Fatalf("restart: %+v, %v", s, err)
	}
	if r, _ := c.Execute(ctx, id, api.ExecuteRequest{Code: "kept"}); r.Status != api.StatusError {
		t.Fatalf("state kept after restart: %+v", r)
	}
	cr, err := c.Command(ctx, id, api.CommandRequest{Cmd: []string{"sh", "-c", "cat; echo made > f.txt; exit 3"}, Stdin: "in"})
	if err != nil || cr.Status != api.StatusError || cr.ExitCode != 3 || cr.Stdout != "in" || len(cr.Files) != 1 {
		t.Fatalf("command: %+v, %v", cr, err)
	}
}

func TestFiles(t *testing.T) {
	c := newClient(t)
	id := newSession(t, c)
	ctx := t.Context()
	const odd = "a b/ü#?.txt"
	info, err := c.UploadFile(ctx, id, odd, strings.NewReader("hello"))
	if err != nil || info.Path != "/mnt/data/"+odd || info.Size != 5 {
		t.Fatalf("upload: %+v, %v", info, err)
	}
	r, err := c.Execute(ctx, id, api.ExecuteRequest{Code: fmt.Sprintf("print(open(%q).read())", "/mnt/data/"+odd)})
	if err != nil || stdout(r) != "hello\n" {
		t.Fatalf("read in sandbox: %+v, %v", r, err)
	}
	list, err := c.ListFiles(ctx, id, "a b")
	if err != nil || len(list.Files) != 1 || list.Files[0].Name != "ü#?.txt" || list.Files[0].Type != "file" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if list, err := c.ListFiles(ctx, id, ""); err != nil || len(list.Files) != 1 || list.Files[0].Name != "a b" {
		t.Fatalf("list workspace: %+v, %v", list, err)
	}
	f, err := c.DownloadFile(ctx, id, "/mnt/data/"+odd) // absolute form
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(b) != "hello" || f.Name != "ü#?.txt" || f.Size != 5 || f.ModTime.IsZero() {
		t.Fatalf("download: %q %+v, %v", b, f, err)
	}
	var buf bytes.Buffer
	if n, err := c.DownloadFileTo(ctx, id, odd, &buf); err != nil || n != 5 || buf.String() != "hello" {
		t.Fatalf("download to: %d %q, %v", n, buf.String(), err)
	}
	if _, err := c.UploadFile(ctx, id, "../x", strings.NewReader("x")); !client.IsInvalidArgument(err) {
		t.Errorf("upload to ../x: %v", err)
	}
	if _, err := c.DownloadFile(ctx, id, "/etc/passwd"); !client.IsInvalidArgument(err) {
		t.Errorf("download /etc/passwd: %v", err)
	}
	if err := c.DeleteFile(ctx, id, odd); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DownloadFile(ctx, id, odd); !client.IsNotFound(err) {
		t.Errorf("download after delete: %v", err)
	}
	if err := c.DeleteFile(ctx, id, odd); !client.IsNotFound(err) {
		t.Errorf("delete twice: %v", err)
	}
}

// TestLargeFilesStream checks that an upload of unknown length and a download are both
// streamed: DownloadFile returns with most of the file still on the wire.
func TestLargeFilesStream(t *testing.T) {
	var wire atomic.Int64
	c := newClient(t, client.WithHTTPClient(&http.Client{Transport: countingTransport{&wire}}))
	id := newSession(t, c)
	ctx := t.Context()
	const size = 64 << 20
	pr, pw := io.Pipe()
	go func() {
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for i := 0; i < size/len(chunk); i++ {
			pw.Write(chunk)
		}
		pw.Close()
	}()
	info, err := c.UploadFile(ctx, id, "big.bin", pr) // no length known: chunked
	if err != nil || info.Size != size {
		t.Fatalf("upload: %+v, %v", info, err)
	}
	f, err := c.DownloadFile(ctx, id, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Size != size {
		t.Errorf("size %d", f.Size)
	}
	if n := wire.Load(); n > size/4 {
		t.Fatalf("DownloadFile read %d bytes before returning: not streamed", n)
	}
	n, err := io.Copy(io.Discard, f)
	if err != nil || n != size {
		t.Fatalf("read %d bytes, %v", n, err)
	}
}

// countingTransport counts the response body bytes read from the network.
type countingTransport struct{ n *atomic.Int64 }

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = countingBody{resp.Body, t.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// notebook is an nbformat 4.5 notebook of code cells.
func notebook(sources ...string) json.RawMessage {
	var cells []map[string]any
	for i, src := range sources {
		cells = append(cells, map[string]any{"cell_type": "code", "id": fmt.Sprint("c", i), "metadata": map[string]any{},
			"source": src, "outputs": []any{}, "execution_count": nil})
	}
	b, _ := json.Marshal(map[string]any{"nbformat": 4, "nbformat_minor": 5, "metadata": map[string]any{}, "cells": cells})
	return b
}

// TestExecuteNotebook: a notebook with parameters, whole and streamed a cell at a time; a
// bad one is an invalid argument; canceling the stream interrupts the running cell and
// nothing after it runs.
func TestExecuteNotebook(t *testing.T) {
	c := newClient(t)
	ctx := t.Context()
	nb := notebook("print(who, type(n).__name__)", "n * 2")
	var cells []api.NotebookCell
	res, err := c.ExecuteNotebookStream(ctx, api.NotebookRequest{Notebook: nb, Parameters: map[string]any{"who": "sdk", "n": json.Number("1.0")}},
		func(cell api.NotebookCell) { cells = append(cells, cell) })
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("stream: %+v, %v", res, err)
	}
	if len(cells) != 3 || cells[1].Outputs[0]["text"] != "sdk float\n" || cells[2].Outputs[0]["data"].(map[string]any)["text/plain"] != "2.0" {
		t.Errorf("cells %+v", cells)
	}
	whole, err := c.ExecuteNotebook(ctx, api.NotebookRequest{Notebook: nb, Parameters: map[string]any{"who": "again", "n": 2}})
	if err != nil || whole.Status != api.StatusOK || !bytes.Contains(whole.Notebook, []byte(`"again int\n"`)) {
		t.Errorf("whole: %+v, %v", whole, err)
	}
	if _, err := c.ExecuteNotebook(ctx, api.NotebookRequest{Notebook: json.RawMessage(`{"nbformat": 3}`)}); !client.IsInvalidArgument(err) {
		t.Errorf("nbformat 3: %v", err)
	}

	id := newSession(t, c)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = c.ExecuteNotebookStream(sctx, api.NotebookRequest{Notebook: notebook("print('up')", "import time\ntime.sleep(60)", "after = True"), SessionID: id},
		func(api.NotebookCell) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled stream: %v", err)
	}
	// The session's turn comes once the sleeping cell is interrupted; the last cell never ran.
	r, err := c.Execute(ctx, id, api.ExecuteRequest{Code: "print('after' in dir())"})
	if err != nil || stdout(r) != "False\n" {
		t.Errorf("after the canceled notebook: %+v, %v", r, err)
	}
}

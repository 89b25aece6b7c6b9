package httpapi_test

// POST /v1/notebooks/execute end to end: the shared server (real runc sandboxes, real
// IPython), notebooks checked afterwards by Debian's nbformat.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/httpapi"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
	"github.com/cellbox/cellbox/internal/testbin"
)

// ipynb is an nbformat 4.5 notebook of cells: "# ..." a markdown cell, "tag:NAME\n..." a
// code cell with that tag, anything else a code cell.
func ipynb(cells ...string) json.RawMessage {
	var cs []map[string]any
	for i, c := range cells {
		cell := map[string]any{"id": fmt.Sprintf("cell-%d", i), "metadata": map[string]any{}, "source": c}
		switch {
		case strings.HasPrefix(c, "# "):
			cell["cell_type"] = "markdown"
		default:
			if tag, src, ok := strings.Cut(strings.TrimPrefix(c, "tag:"), "\n"); ok && strings.HasPrefix(c, "tag:") {
				cell["metadata"] = map[string]any{"tags": []string{tag}}
				cell["source"] = src
			}
			cell["cell_type"], cell["outputs"], cell["execution_count"] = "code", []any{}, nil
		}
		cs = append(cs, cell)
	}
	b, _ := json.Marshal(map[string]any{"nbformat": 4, "nbformat_minor": 5, "cells": cs,
		"metadata": map[string]any{"kernelspec": map[string]any{"name": "python3", "display_name": "Python 3", "language": "python"}}})
	return b
}

// nbCell is a cell of an executed notebook.
type nbCell struct {
	CellType       string           `json:"cell_type"`
	Source         any              `json:"source"`
	Metadata       map[string]any   `json:"metadata"`
	Outputs        []map[string]any `json:"outputs"`
	ExecutionCount *int             `json:"execution_count"`
}

func cellsIn(t *testing.T, nb json.RawMessage) []nbCell {
	t.Helper()
	var doc struct{ Cells []nbCell }
	if err := json.Unmarshal(nb, &doc); err != nil {
		t.Fatalf("the notebook: %v: %s", err, nb)
	}
	return doc.Cells
}

// text is what a cell printed to stdout.
func (c nbCell) text() string {
	var b strings.Builder
	for _, o := range c.Outputs {
		if o["output_type"] == "stream" && o["name"] == "stdout" {
			b.WriteString(o["text"].(string))
		}
	}
	return b.String()
}

// validNotebook fails t unless Debian's python3-nbformat takes nb.
func validNotebook(t *testing.T, nb json.RawMessage) {
	t.Helper()
	testbin.NeedIPython(t, "nbformat")
	cmd := exec.Command("/usr/bin/python3", "-c", "import nbformat, sys; nbformat.validate(nbformat.reads(sys.stdin.read(), 4))")
	cmd.Stdin = bytes.NewReader(nb)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nbformat refuses the notebook: %v\n%s", err, out)
	}
}

func (c *client) notebook(req api.NotebookRequest) api.NotebookResult {
	c.t.Helper()
	var res api.NotebookResult
	if st := c.do("POST", "/v1/notebooks/execute", req, &res); st != http.StatusOK {
		c.t.Fatalf("execute the notebook: status %d %+v", st, res)
	}
	validNotebook(c.t, res.Notebook)
	return res
}

// TestNotebookPlotAndParameters: a notebook with a plot and papermill's parameters runs in
// a session of its own, which then ends; the parameters are exactly what was sent.
func TestNotebookPlotAndParameters(t *testing.T) {
	c := newClient(t)
	hostile := "it's \"quoted\"\n'''; import os; os.system('touch /mnt/data/pwned') #\u2028🙂"
	res := c.notebook(api.NotebookRequest{
		Notebook: ipynb("# Accidents by hour", "tag:parameters\nn = 3\ntitle = 'default'",
			"import matplotlib.pyplot as plt\nplt.plot(range(n))\nplt.title(title)\nplt.show()",
			"print(repr(n), title == "+pyString(hostile)+", __import__('os').path.exists('/mnt/data/pwned'))",
			"h = display('first', display_id=True)\nh.update('second')", "n * 2"),
		Parameters: map[string]any{"n": 5, "title": hostile},
	})
	if res.Status != api.StatusOK || res.FailedCell != nil {
		t.Fatalf("status %s at %v: %s %s", res.Status, res.FailedCell, res.EName, res.EValue)
	}
	cells := cellsIn(t, res.Notebook)
	if len(cells) != 7 || cells[0].CellType != "markdown" || cells[2].Metadata["tags"].([]any)[0] != "injected-parameters" {
		t.Fatalf("cells %+v", cells)
	}
	if got := cells[4].text(); got != "5 True False\n" {
		t.Errorf("the parameters, as the notebook sees them: %q", got)
	}
	var png []byte
	for _, o := range cells[3].Outputs {
		if data, _ := o["data"].(map[string]any); o["output_type"] == "display_data" && data["image/png"] != nil {
			png, _ = base64.StdEncoding.DecodeString(strings.TrimSpace(data["image/png"].(string)))
		}
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("no PNG plot in %+v", cells[3].Outputs)
	}
	// Display updates: applied when the server gets them, else the display as first shown.
	if d := cells[5].Outputs; len(d) != 1 || !strings.Contains(fmt.Sprint(d[0]["data"]), "first") && !strings.Contains(fmt.Sprint(d[0]["data"]), "second") {
		t.Errorf("the display's outputs %+v", d)
	}
	last := cells[6]
	if last.ExecutionCount == nil || last.Outputs[0]["output_type"] != "execute_result" || last.Outputs[0]["data"].(map[string]any)["text/plain"] != "10" {
		t.Errorf("the last cell %+v", last)
	}
	for i, cell := range cells[1:] {
		if cell.ExecutionCount == nil || *cell.ExecutionCount != i+1 {
			t.Errorf("cell %d: execution_count %v", i+1, cell.ExecutionCount)
		}
	}
	if st := c.do("GET", "/v1/sessions/"+res.SessionID, nil, nil); st != http.StatusNotFound {
		t.Errorf("the notebook's session after the run: %d, want 404 (ended)", st)
	}
}

// pyString is Python that makes s (from base64, which nothing in s can break).
func pyString(s string) string {
	return "__import__('base64').b64decode('" + base64.StdEncoding.EncodeToString([]byte(s)) + "').decode()"
}

// TestNotebookErrors: a cell that raises stops the run (later cells left unrun) unless
// allow_errors; either way the answer is 200 with the notebook and the failed cell.
func TestNotebookErrors(t *testing.T) {
	c := newClient(t)
	nb := ipynb("x = 1", "1/0", "# notes", "print('after')")
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprint("allow_errors=", allow), func(t *testing.T) {
			res := c.notebook(api.NotebookRequest{Notebook: nb, AllowErrors: allow})
			if res.Status != api.StatusError || res.FailedCell == nil || *res.FailedCell != 1 || res.EName != "ZeroDivisionError" || res.EValue != "division by zero" {
				t.Fatalf("result %+v", res)
			}
			cells := cellsIn(t, res.Notebook)
			if o := cells[1].Outputs; len(o) != 1 || o[0]["output_type"] != "error" || len(o[0]["traceback"].([]any)) == 0 {
				t.Errorf("the failed cell's outputs %+v", o)
			}
			after := cells[3]
			if allow && (after.text() != "after\n" || after.ExecutionCount == nil) {
				t.Errorf("allowing errors, the cell after: %+v", after)
			}
			if !allow && (len(after.Outputs) != 0 || after.ExecutionCount != nil) {
				t.Errorf("stopped, the cell after: %+v", after)
			}
		})
	}
}

// TestNotebookCellTimeout: a cell past cell_timeout_s is interrupted; the run stops there
// with status timeout, and the session's kernel lives on for the next notebook.
func TestNotebookCellTimeout(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	res := c.notebook(api.NotebookRequest{Notebook: ipynb("y = 'kept'", "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", "print('never')"),
		SessionID: id, CellTimeoutS: 1})
	if res.Status != api.StatusTimeout || res.FailedCell == nil || *res.FailedCell != 1 || res.Message == "" {
		t.Fatalf("result %+v", res)
	}
	cells := cellsIn(t, res.Notebook)
	if cells[1].text() != "sleeping\n" || cells[2].ExecutionCount != nil {
		t.Errorf("cells %+v", cells)
	}
	if r := c.exec(id, "print(y)", 0); stdout(r) != "kept\n" {
		t.Errorf("after the timeout: %q", stdout(r))
	}
}

// TestNotebookInSession: in an existing session the notebook sees and leaves its state,
// and the session lives on; keep_session keeps a new one.
func TestNotebookInSession(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	c.exec(id, "x = 41", 0)
	res := c.notebook(api.NotebookRequest{Notebook: ipynb("x += 1\nx"), SessionID: id})
	if res.Status != api.StatusOK || res.SessionID != id {
		t.Fatalf("result %+v", res)
	}
	if out := cellsIn(t, res.Notebook)[0].Outputs; len(out) != 1 || out[0]["data"].(map[string]any)["text/plain"] != "42" {
		t.Errorf("outputs %+v", out)
	}
	if r := c.exec(id, "print(x)", 0); stdout(r) != "42\n" {
		t.Errorf("the session after the notebook: %q", stdout(r))
	}

	kept := c.notebook(api.NotebookRequest{Notebook: ipynb("z = 'kept'"), KeepSession: true, Session: &api.CreateSessionRequest{Metadata: map[string]string{"from": "notebook"}}})
	t.Cleanup(func() { c.do("DELETE", "/v1/sessions/"+kept.SessionID, nil, nil) })
	var s api.Session
	if st := c.do("GET", "/v1/sessions/"+kept.SessionID, nil, &s); st != http.StatusOK || s.Metadata["from"] != "notebook" {
		t.Fatalf("the kept session: %d %+v", st, s)
	}
	if r := c.exec(kept.SessionID, "print(z)", 0); stdout(r) != "kept\n" {
		t.Errorf("the kept session: %q", stdout(r))
	}
}

// TestNotebookStream: with SSE a cell's event comes as the cell ends, before the next one
// has finished: the second cell waits for a file the test uploads only once it has read
// the first cell's event. Then the result, with the whole notebook.
func TestNotebookStream(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	nb := ipynb("# Waiting", "print('first')", "import os, time\nwhile not os.path.exists('/mnt/data/go'): time.sleep(0.02)\nprint('second')")
	body, _ := json.Marshal(api.NotebookRequest{Notebook: nb, SessionID: id, CellTimeoutS: 60})
	events, _ := c.postSSE("/v1/notebooks/execute", body)
	var cell api.NotebookCell
	if ev := <-events; ev.name != "cell" || json.Unmarshal([]byte(ev.data), &cell) != nil || cell.Index != 1 || cell.Cells != 3 ||
		cell.Status != api.StatusOK || len(cell.Outputs) != 1 || cell.Outputs[0]["text"] != "first\n" {
		t.Fatalf("first event %+v", ev)
	}
	if st := c.do("PUT", "/v1/sessions/"+id+"/files/go", "", nil); st != http.StatusCreated {
		t.Fatalf("upload go: %d", st)
	}
	var names []string
	var res api.NotebookResult
	for ev := range events {
		names = append(names, ev.name)
		switch ev.name {
		case "cell":
			json.Unmarshal([]byte(ev.data), &cell)
		case "result":
			json.Unmarshal([]byte(ev.data), &res)
		}
	}
	if strings.Join(names, " ") != "cell result" || cell.Index != 2 {
		t.Fatalf("events after the first: %v (last cell %d)", names, cell.Index)
	}
	if res.Status != api.StatusOK || cellsIn(t, res.Notebook)[2].text() != "second\n" {
		t.Errorf("result %+v", res)
	}
	validNotebook(t, res.Notebook)
}

// TestNotebookRefused: what cannot run is 400 with what to change, before the stream
// starts and before any session is made; a session that is not there is 404.
func TestNotebookRefused(t *testing.T) {
	c := newClient(t)
	before := c.sessions()
	tests := []struct {
		name, body string
		status     int
		msg        string
	}{
		{"nbformat 3", `{"notebook": {"nbformat": 3, "nbformat_minor": 0, "worksheets": []}}`, 400, "nbformat is 3"},
		{"not a notebook", `{"notebook": [1, 2]}`, 400, "not a JSON object"},
		{"source a number", `{"notebook": {"nbformat": 4, "cells": [{"cell_type": "code", "source": 7}]}}`, 400, "cell 0: source is a number"},
		{"parameter name", `{"notebook": ` + string(ipynb("1")) + `, "parameters": {"os.system": 1}}`, 400, "not a Python identifier"},
		{"keyword", `{"notebook": ` + string(ipynb("1")) + `, "parameters": {"lambda": 1}}`, 400, "Python keyword"},
		{"unknown field", `{"notebook": ` + string(ipynb("1")) + `, "allow_error": true}`, 400, "allow_error"},
		{"no notebook", `{}`, 400, `send {"notebook"`},
		{"a session that is not there", `{"notebook": ` + string(ipynb("1")) + `, "session_id": "nope"}`, 404, "nope"},
	}
	for _, tt := range tests {
		for _, accept := range []string{"application/json", "text/event-stream"} {
			t.Run(tt.name+"/"+accept, func(t *testing.T) {
				req, _ := http.NewRequest("POST", c.url+"/v1/notebooks/execute", strings.NewReader(tt.body))
				req.Header.Set("Accept", accept)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var e api.ErrorBody
				json.NewDecoder(resp.Body).Decode(&e)
				if resp.StatusCode != tt.status || !strings.Contains(e.Error.Message, tt.msg) {
					t.Errorf("%d %+v, want %d with %q", resp.StatusCode, e.Error, tt.status, tt.msg)
				}
			})
		}
	}
	if after := c.sessions(); after != before {
		t.Errorf("sessions %d before, %d after refusals", before, after)
	}
}

func (c *client) sessions() int {
	var l api.SessionList
	c.do("GET", "/v1/sessions", nil, &l)
	return len(l.Sessions)
}

// TestNotebookBodyLimitAndCluster: a notebook may be larger than a JSON body, up to an
// upload's limit; in a cluster, a notebook for a session goes to the session's node, and
// one for a new session to the node with the most room, large ones too.
func TestNotebookBodyLimitAndCluster(t *testing.T) {
	opts := httpapi.Options{MaxBodyBytes: 4 << 10, MaxUploadBytes: 16 << 10, Logger: slog.New(slog.DiscardHandler)}
	owner := sessiontest.New(t, nil)
	ownerSrv := httptest.NewServer(httpapi.New(owner, opts))
	defer ownerSrv.Close()
	st, body := post(t, ownerSrv.URL, "/v1/sessions", `{}`)
	var s api.Session
	if st != http.StatusCreated || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("create a session: %d %s", st, body)
	}
	big := "# " + strings.Repeat("x", 8<<10) // above MaxBodyBytes, below MaxUploadBytes
	nb := func(extra string) string {
		return string(ipynb(big+extra, "v = globals().get('v', 0) + 1\nprint(v)"))
	}

	o := opts
	o.Cluster = ownedBy{nodes{node(t, "owner", ownerSrv.URL)}}
	front := httptest.NewServer(httpapi.New(sessiontest.New(t, nil), o))
	defer front.Close()
	for range 2 {
		st, body = post(t, front.URL, "/v1/notebooks/execute", `{"session_id": "`+s.ID+`", "notebook": `+nb("")+`}`)
		if st != http.StatusOK {
			t.Fatalf("a notebook for the owner's session through the front: %d %s", st, body)
		}
	}
	var res api.NotebookResult
	json.Unmarshal([]byte(body), &res)
	if got := cellsIn(t, res.Notebook)[1].text(); got != "2\n" {
		t.Errorf("the second run in the owner's session printed %q, want 2", got)
	}
	if st, body = post(t, front.URL, "/v1/notebooks/execute", `{"keep_session": true, "notebook": `+nb("")+`}`); st != http.StatusOK {
		t.Fatalf("a notebook for a new session: %d %s", st, body)
	}
	json.Unmarshal([]byte(body), &res)
	if !owner.Has(res.SessionID) {
		t.Errorf("the new session %s is not on the node with room", res.SessionID)
	}
	if st, body = post(t, front.URL, "/v1/notebooks/execute", `{"notebook": `+nb(strings.Repeat("y", 16<<10))+`}`); st != http.StatusRequestEntityTooLarge || !strings.Contains(body, "too_large") {
		t.Errorf("a notebook above the upload limit: %d %s", st, body)
	}
}

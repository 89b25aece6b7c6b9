package notebook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// fakeSessions runs "code" by answering what results holds for it, else ok with the
// output "ran: " and the code.
type fakeSessions struct {
	results map[string]api.ExecuteResult
	execute func(ctx context.Context, code string) // called first, if set
	live    []string                               // sessions that exist (made or given)
	created []api.CreateSessionRequest
	deleted []string
	reqs    []api.ExecuteRequest
	count   int
}

func (f *fakeSessions) Create(_ context.Context, req api.CreateSessionRequest) (*api.Session, error) {
	f.created = append(f.created, req)
	id := fmt.Sprintf("s%d", len(f.created))
	f.live = append(f.live, id)
	return &api.Session{ID: id}, nil
}

func (f *fakeSessions) Get(_ context.Context, id string) (*api.Session, error) {
	if !slices.Contains(f.live, id) {
		return nil, fmt.Errorf("session %s not found: %w", id, errdefs.ErrNotFound)
	}
	return &api.Session{ID: id}, nil
}

func (f *fakeSessions) Execute(ctx context.Context, id string, req api.ExecuteRequest, _ func(api.Output)) (*api.ExecuteResult, error) {
	if _, err := f.Get(ctx, id); err != nil {
		return nil, err
	}
	f.reqs = append(f.reqs, req)
	if f.execute != nil {
		f.execute(ctx, req.Code)
	}
	res, ok := f.results[req.Code]
	if !ok {
		res = api.ExecuteResult{Status: api.StatusOK, Outputs: []api.Output{{Type: api.OutputStream, Name: "stdout", Text: "ran: " + req.Code}}}
	}
	if res.Status == "" {
		res.Status = api.StatusOK
	}
	f.count++
	res.ExecutionCount = f.count
	return &res, nil
}

func (f *fakeSessions) Delete(_ context.Context, id string) error {
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *fakeSessions) ran() []string {
	var codes []string
	for _, r := range f.reqs {
		codes = append(codes, r.Code)
	}
	return codes
}

// run prepares and runs req.
func run(t *testing.T, f *fakeSessions, req api.NotebookRequest, onCell func(api.NotebookCell)) (*api.NotebookResult, error) {
	t.Helper()
	job, err := New(f, nil).Prepare(t.Context(), req)
	if err != nil {
		return nil, err
	}
	return job.Run(t.Context(), onCell)
}

func raised(ename string) api.ExecuteResult {
	return api.ExecuteResult{Status: api.StatusError, Outputs: []api.Output{
		{Type: api.OutputStream, Name: "stdout", Text: "before\n"},
		{Type: api.OutputError, EName: ename, EValue: "boom", Traceback: []string{ename + ": boom"}},
	}}
}

// TestRunStatuses: a failed cell stops the run unless allow_errors (and then only what
// leaves the kernel as it was goes on); cells not run have no outputs and a null count;
// the result names the first failure; skipped and empty cells are not run.
func TestRunStatuses(t *testing.T) {
	results := map[string]api.ExecuteResult{
		"raise()":    raised("ValueError"),
		"expected":   raised("KeyError"),
		"sleep()":    {Status: api.StatusTimeout, Message: "the cell ran past its 1 s timeout and was interrupted"},
		"allocate()": {Status: api.StatusOOM, Message: "out of memory", KernelRestarted: true},
	}
	cells := func(codes ...string) []byte {
		var cs []string
		for _, c := range codes {
			switch c {
			case "expected":
				cs = append(cs, tagged(codeCell(c), TagRaisesException))
			case "skipped":
				cs = append(cs, tagged(codeCell(c), TagSkipExecution))
			default:
				cs = append(cs, codeCell(c))
			}
		}
		return notebook(5, cs...)
	}
	tests := []struct {
		name        string
		nb          []byte
		allowErrors bool
		ran         []string
		status      string
		failed      int // -1: none
		ename       string
	}{
		{"all ok", cells("a", "b"), false, []string{"a", "b"}, api.StatusOK, -1, ""},
		{"stops at an error", cells("a", "raise()", "c"), false, []string{"a", "raise()"}, api.StatusError, 1, "ValueError"},
		{"allow errors", cells("raise()", "b", "raise()"), true, []string{"raise()", "b", "raise()"}, api.StatusError, 0, "ValueError"},
		{"raises-exception", cells("expected", "b"), false, []string{"expected", "b"}, api.StatusOK, -1, ""},
		{"stops at a timeout", cells("sleep()", "b"), false, []string{"sleep()"}, api.StatusTimeout, 0, ""},
		{"allow errors past a timeout", cells("sleep()", "b"), true, []string{"sleep()", "b"}, api.StatusTimeout, 0, ""},
		{"stops at oom even allowing errors", cells("a", "allocate()", "c"), true, []string{"a", "allocate()"}, api.StatusOOM, 1, ""},
		{"skips empty and tagged cells", cells("", " \n", "skipped", "d"), false, []string{"d"}, api.StatusOK, -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeSessions{results: results}
			var events []api.NotebookCell
			res, err := run(t, f, api.NotebookRequest{Notebook: tt.nb, AllowErrors: tt.allowErrors, CellTimeoutS: 7},
				func(c api.NotebookCell) { events = append(events, c) })
			if err != nil {
				t.Fatal(err)
			}
			if got := f.ran(); !slices.Equal(got, tt.ran) {
				t.Errorf("ran %q, want %q", got, tt.ran)
			}
			for _, r := range f.reqs {
				if r.TimeoutS != 7 || !r.DisplayUpdates {
					t.Errorf("execute request %+v", r)
				}
			}
			if res.Status != tt.status || res.EName != tt.ename {
				t.Errorf("status %q %q, want %q %q", res.Status, res.EName, tt.status, tt.ename)
			}
			if tt.failed < 0 && res.FailedCell != nil || tt.failed >= 0 && (res.FailedCell == nil || *res.FailedCell != tt.failed) {
				t.Errorf("failed cell %v, want %d", res.FailedCell, tt.failed)
			}
			if res.SessionID != "s1" || len(f.created) != 1 || !slices.Equal(f.deleted, []string{"s1"}) {
				t.Errorf("session %q; created %v, deleted %v", res.SessionID, f.created, f.deleted)
			}
			// Each cell that ran has its outputs and count, and an event; the others none.
			var doc struct{ Cells []map[string]any }
			json.Unmarshal(res.Notebook, &doc)
			n := 0
			for i, c := range doc.Cells {
				src := c["source"].(string)
				outs := c["outputs"].([]any)
				ran := n < len(tt.ran) && src == tt.ran[n]
				switch {
				case ran && (c["execution_count"] != float64(n+1) || len(outs) == 0 && results[src].Status != api.StatusTimeout && results[src].Status != api.StatusOOM):
					t.Errorf("cell %d ran: count %v, outputs %v", i, c["execution_count"], outs)
				case !ran && (c["execution_count"] != nil || len(outs) != 0):
					t.Errorf("cell %d did not run: count %v, outputs %v", i, c["execution_count"], outs)
				}
				if ran {
					if n >= len(events) || events[n].Index != i || events[n].Cells != len(doc.Cells) || events[n].ExecutionCount != n+1 {
						t.Errorf("events %+v: none for cell %d", events, i)
					}
					n++
				}
			}
			if len(events) != len(tt.ran) {
				t.Errorf("%d events, %d cells ran", len(events), len(tt.ran))
			}
			validate(t, res.Notebook)
		})
	}
}

// TestRunSessions: a run makes its session with the request's settings and ends it, or
// keeps it; in a session it names it neither makes nor ends one, and a session that does
// not exist is not found before anything runs.
func TestRunSessions(t *testing.T) {
	nb := notebook(5, codeCell("x = 1"))
	t.Run("new with settings", func(t *testing.T) {
		f := &fakeSessions{}
		settings := &api.CreateSessionRequest{Image: "graphs", Limits: &api.Limits{MemoryMB: 512}}
		if _, err := run(t, f, api.NotebookRequest{Notebook: nb, Session: settings}, nil); err != nil {
			t.Fatal(err)
		}
		if len(f.created) != 1 || !reflect.DeepEqual(f.created[0], *settings) || len(f.deleted) != 1 {
			t.Errorf("created %+v, deleted %v", f.created, f.deleted)
		}
	})
	t.Run("kept", func(t *testing.T) {
		f := &fakeSessions{}
		res, err := run(t, f, api.NotebookRequest{Notebook: nb, KeepSession: true}, nil)
		if err != nil || res.SessionID != "s1" || len(f.deleted) != 0 {
			t.Errorf("%v: %+v, deleted %v", err, res, f.deleted)
		}
	})
	t.Run("existing", func(t *testing.T) {
		f := &fakeSessions{live: []string{"mine"}}
		res, err := run(t, f, api.NotebookRequest{Notebook: nb, SessionID: "mine"}, nil)
		if err != nil || res.SessionID != "mine" || len(f.created) != 0 || len(f.deleted) != 0 || len(f.reqs) != 1 {
			t.Errorf("%v: %+v, created %v, deleted %v", err, res, f.created, f.deleted)
		}
	})
	for _, tt := range []struct {
		name string
		req  api.NotebookRequest
		is   error
		msg  string
	}{
		{"not found", api.NotebookRequest{Notebook: nb, SessionID: "theirs"}, errdefs.ErrNotFound, "not found"},
		{"both", api.NotebookRequest{Notebook: nb, SessionID: "mine", Session: &api.CreateSessionRequest{}}, errdefs.ErrInvalidArgument, "not both"},
		{"no notebook", api.NotebookRequest{}, errdefs.ErrInvalidArgument, `send {"notebook"`},
		{"bad notebook", api.NotebookRequest{Notebook: []byte(`{"nbformat": 3}`)}, errdefs.ErrInvalidArgument, "nbformat is 3"},
		{"bad parameter", api.NotebookRequest{Notebook: nb, Parameters: map[string]any{"import": 1}}, errdefs.ErrInvalidArgument, "keyword"},
		{"negative timeout", api.NotebookRequest{Notebook: nb, CellTimeoutS: -1}, errdefs.ErrInvalidArgument, "cell_timeout_s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeSessions{live: []string{"mine"}}
			_, err := run(t, f, tt.req, nil)
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want %v with %q", err, tt.is, tt.msg)
			}
			if len(f.created)+len(f.reqs) != 0 {
				t.Errorf("created %v, ran %v", f.created, f.ran())
			}
		})
	}
}

// TestRunEndsWithItsCaller: when the caller goes between two cells, the next one does not
// run, the result says interrupted at it, and the session made for the run still ends.
func TestRunEndsWithItsCaller(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	f := &fakeSessions{execute: func(context.Context, string) { cancel() }}
	job, err := New(f, nil).Prepare(ctx, api.NotebookRequest{Notebook: notebook(5, codeCell("a"), mdCell("m"), codeCell("b"))})
	if err != nil {
		t.Fatal(err)
	}
	res, err := job.Run(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.ran(), []string{"a"}) || res.Status != api.StatusInterrupted || res.FailedCell == nil || *res.FailedCell != 2 {
		t.Errorf("ran %v; %+v", f.ran(), res)
	}
	if !slices.Equal(f.deleted, []string{"s1"}) {
		t.Errorf("deleted %v", f.deleted)
	}
}

// TestOutputs: outputs become nbformat's, as nbclient applies them.
func TestOutputs(t *testing.T) {
	text := func(s string) map[string]any { return map[string]any{"text/plain": s} }
	disp := func(id, s string) api.Output {
		return api.Output{Type: api.OutputDisplayData, Data: text(s), DisplayID: id}
	}
	update := func(id, s string) api.Output {
		return api.Output{Type: api.OutputUpdateDisplay, Data: text(s), Metadata: map[string]any{"v": s}, DisplayID: id}
	}
	out := func(s string) api.Output { return api.Output{Type: api.OutputStream, Name: "stdout", Text: s} }
	clear := api.Output{Type: api.OutputClear}
	clearWait := api.Output{Type: api.OutputClear, Wait: true}
	nbStream := func(name, s string) map[string]any {
		return map[string]any{"output_type": "stream", "name": name, "text": s}
	}
	nbDisp := func(s string, md map[string]any) map[string]any {
		if md == nil {
			md = map[string]any{}
		}
		return map[string]any{"output_type": "display_data", "data": text(s), "metadata": md}
	}
	tests := []struct {
		name  string
		cells [][]api.Output
		want  [][]map[string]any
	}{
		{"each type", [][]api.Output{{
			out("a"), out("b"), {Type: api.OutputStream, Name: "stderr", Text: "e"}, out("c"),
			{Type: api.OutputDisplayData, Data: map[string]any{"image/png": "iVBO", "application/json": map[string]any{"k": []any{1.0}}}, Metadata: map[string]any{"image/png": map[string]any{"width": 10.0}}},
			{Type: api.OutputExecuteResult, Data: text("42"), ExecutionCount: 3},
			{Type: api.OutputError, EName: "E", EValue: "v"},
			{Type: "a_later_type", Text: "x"},
		}}, [][]map[string]any{{
			nbStream("stdout", "ab"), nbStream("stderr", "e"), nbStream("stdout", "c"),
			{"output_type": "display_data", "data": map[string]any{"image/png": "iVBO", "application/json": map[string]any{"k": []any{1.0}}}, "metadata": map[string]any{"image/png": map[string]any{"width": 10.0}}},
			{"output_type": "execute_result", "data": text("42"), "metadata": map[string]any{}, "execution_count": 3},
			{"output_type": "error", "ename": "E", "evalue": "v", "traceback": []string{}},
		}}},
		{"update in a later cell", [][]api.Output{{disp("x", "0"), disp("y", "y0")}, {update("x", "1"), out("o")}},
			[][]map[string]any{{nbDisp("1", map[string]any{"v": "1"}), nbDisp("y0", nil)}, {nbStream("stdout", "o")}}},
		{"same id shown again", [][]api.Output{{disp("x", "0")}, {disp("x", "1")}, {update("x", "2")}},
			[][]map[string]any{{nbDisp("2", map[string]any{"v": "2"})}, {nbDisp("2", map[string]any{"v": "2"})}, {}}},
		{"update of an unknown id", [][]api.Output{{update("nope", "1"), out("o")}}, [][]map[string]any{{nbStream("stdout", "o")}}},
		{"clear", [][]api.Output{{out("a"), disp("x", "0"), clear, out("b")}, {update("x", "1")}},
			[][]map[string]any{{nbStream("stdout", "b")}, {}}},
		{"clear, then a display at the same place", [][]api.Output{{disp("x", "0"), clear, disp("x", "1"), update("x", "2")}},
			[][]map[string]any{{nbDisp("2", map[string]any{"v": "2"})}}},
		{"clear with wait", [][]api.Output{{out("a"), clearWait, update("nope", "u"), out("b"), out("c")}},
			[][]map[string]any{{nbStream("stdout", "bc")}}},
		{"clear with wait at a cell's end", [][]api.Output{{out("a"), clearWait}, {out("b")}},
			[][]map[string]any{{nbStream("stdout", "a")}, {nbStream("stdout", "b")}}},
		{"progress bar", [][]api.Output{{clearWait, disp("", "10%"), clearWait, disp("", "50%"), clearWait, disp("", "100%")}},
			[][]map[string]any{{nbDisp("100%", nil)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d displays
			cells := make([]*cell, len(tt.cells))
			for i, outs := range tt.cells {
				cells[i] = &cell{kind: "code", outputs: []map[string]any{}}
				d.clearNext = false
				d.add(cells[i], outs)
			}
			for i, c := range cells {
				got, _ := json.Marshal(c.outputs)
				want, _ := json.Marshal(tt.want[i])
				if string(got) != string(want) {
					t.Errorf("cell %d:\n got %s\nwant %s", i, got, want)
				}
			}
		})
	}
}

// TestOutputsValidate: a notebook with every kind of output, display updates applied, is
// one nbformat takes.
func TestOutputsValidate(t *testing.T) {
	f := &fakeSessions{results: map[string]api.ExecuteResult{
		"a": {Outputs: []api.Output{
			{Type: api.OutputStream, Name: "stdout", Text: "x\n"},
			{Type: api.OutputDisplayData, Data: map[string]any{"text/plain": "<Figure>", "image/png": "iVBORw0KGgo=\n"}, Metadata: map[string]any{"needs_background": "light"}, DisplayID: "d"},
			{Type: api.OutputExecuteResult, Data: map[string]any{"text/plain": "1", "text/html": "<b>1</b>", "application/vnd.custom+json": map[string]any{"a": 1.0}}, ExecutionCount: 1},
		}},
		"b": {Status: api.StatusError, Outputs: []api.Output{
			{Type: api.OutputUpdateDisplay, Data: map[string]any{"text/plain": "updated"}, DisplayID: "d"},
			{Type: api.OutputClear, Wait: true},
			{Type: api.OutputError, EName: "ValueError", EValue: "v", Traceback: []string{"\x1b[31mValueError\x1b[0m: v"}},
		}},
	}}
	res, err := run(t, f, api.NotebookRequest{Notebook: notebook(4, codeCell("a"), codeCell("b"), codeCell("c"))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	validate(t, res.Notebook)
	if !strings.Contains(string(res.Notebook), `"updated"`) || strings.Contains(string(res.Notebook), "display_id") {
		t.Errorf("notebook %s", res.Notebook)
	}
}

// TestOutputBudget: outputs past the run's budget are dropped for a note, in the cell that
// reached it and in every later one.
func TestOutputBudget(t *testing.T) {
	out := func(s string) api.Output { return api.Output{Type: api.OutputStream, Name: "stdout", Text: s} }
	left := 200
	kept, cut := keep([]api.Output{out("a"), {Type: api.OutputDisplayData, Data: map[string]any{"image/png": strings.Repeat("A", 300)}}, out("b")}, &left)
	if !cut || len(kept) != 2 || kept[0].Text != "a" || !strings.Contains(kept[1].Text, "outputs reached the limit of 64 MiB") || left != 0 {
		t.Errorf("kept %+v, cut %v, left %d", kept, cut, left)
	}
	if kept, cut := keep([]api.Output{out("c")}, &left); !cut || len(kept) != 1 || kept[0].Name != "stderr" {
		t.Errorf("after: kept %+v, cut %v", kept, cut)
	}
	left = 1000
	if kept, cut := keep([]api.Output{out("a"), out("b")}, &left); cut || len(kept) != 2 || left >= 1000 {
		t.Errorf("within: kept %+v, cut %v, left %d", kept, cut, left)
	}
}

// The notebook's language is its cells' (IRkernel's "R" here); a cell may name its own, as
// the web page writes it; parameters are Python's only.
func TestRunLanguages(t *testing.T) {
	in := `{"nbformat": 4, "nbformat_minor": 4, "metadata": {"kernelspec": {"name": "ir", "language": "R"}}, "cells": [
		{"cell_type": "code", "source": "x <- 1", "metadata": {}},
		{"cell_type": "code", "source": "echo hi", "metadata": {"cellbox": {"language": "bash"}}},
		{"cell_type": "code", "source": "1 + 1", "metadata": {"cellbox": {"language": "js"}}}]}`
	f := &fakeSessions{}
	if _, err := run(t, f, api.NotebookRequest{Notebook: []byte(in)}, nil); err != nil {
		t.Fatal(err)
	}
	var langs []string
	for _, r := range f.reqs {
		langs = append(langs, r.Language)
	}
	if strings.Join(langs, ",") != "r,bash,javascript" {
		t.Errorf("languages run: %v", langs)
	}
	_, err := run(t, &fakeSessions{}, api.NotebookRequest{Notebook: []byte(in), Parameters: map[string]any{"a": 1}}, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "written in r") {
		t.Errorf("parameters of an R notebook: %v", err)
	}
}

package main

// cellbox run NOTEBOOK.ipynb: the notebook runs through POST /v1/notebooks/execute in the
// command's session (embedded server or --server alike), a line on stderr per cell, and the
// executed notebook is written beside it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellbox/cellbox/api"
)

// isNotebook says whether a FILE of cellbox run is a notebook.
func isNotebook(path string) bool { return strings.EqualFold(filepath.Ext(path), ".ipynb") }

// notebookOut is where the executed notebook goes: out, else beside the notebook with
// .out.ipynb for .ipynb. Never the notebook itself.
func notebookOut(path, out string) (string, error) {
	if out == "" {
		out = strings.TrimSuffix(path, filepath.Ext(path)) + ".out.ipynb"
	}
	a, err1 := filepath.Abs(path)
	b, err2 := filepath.Abs(out)
	same := err1 == nil && err2 == nil && a == b
	if fi, err := os.Stat(path); err == nil {
		if fo, err := os.Stat(out); err == nil && os.SameFile(fi, fo) {
			same = true
		}
	}
	if same {
		return "", fmt.Errorf("-o %s is the notebook itself, which cellbox run never overwrites: name another file", out)
	}
	return out, nil
}

// cutParams takes papermill's parameters, -p NAME VALUE (or --p, -parameters,
// --parameters), out of args, up to a "--". A VALUE that is a JSON number, true, false,
// null or a quoted JSON string is that value; anything else is the string as written.
func cutParams(args []string) (rest []string, params map[string]any, err error) {
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--":
			return append(rest, args[i:]...), params, nil
		case "-p", "--p", "-parameters", "--parameters":
			if i+2 >= len(args) {
				return nil, nil, errors.New("-p takes a name and a value: -p NAME VALUE")
			}
			if params == nil {
				params = map[string]any{}
			}
			params[args[i+1]] = paramValue(args[i+2])
			i += 2
		default:
			rest = append(rest, args[i])
		}
	}
	return rest, params, nil
}

func paramValue(s string) any {
	t := strings.TrimSpace(s)
	if t == "" || t[0] == '{' || t[0] == '[' || !json.Valid([]byte(t)) {
		return s
	}
	dec := json.NewDecoder(strings.NewReader(t))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return s
	}
	return v
}

// runNotebook runs the notebook at path in the command's session and writes it executed
// to out, also when a cell failed. The first Ctrl-C interrupts the running cell, which
// ends the run (the notebook is still written); a second abandons it.
func runNotebook(ctx context.Context, f *cliFlags, sig *signals, path, out string, req api.NotebookRequest) int {
	nb, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cellbox run: %v\n", err)
		return exitUsage
	}
	if !json.Valid(nb) {
		fmt.Fprintf(os.Stderr, "cellbox run: %s is not JSON: a notebook (.ipynb) is a JSON document\n", path)
		return exitUsage
	}
	req.Notebook = nb
	s, end, err := f.start(ctx, sig)
	if err != nil {
		return failed(ctx, err)
	}
	defer end()
	req.SessionID = s.id

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	interrupted := false
	restore := sig.handle(func() {
		if interrupted {
			cancel()
			return
		}
		interrupted = true
		fmt.Fprintln(os.Stderr, "\ncellbox: interrupting the cell (Ctrl-C again to abandon the notebook)")
		go s.c.Interrupt(rctx, s.id)
	})
	res, err := s.c.ExecuteNotebookStream(rctx, req, func(c api.NotebookCell) { s.showCell(rctx, c) })
	restore()
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			err = errAbandoned
		}
		return failed(ctx, err)
	}
	if err := writeNotebook(out, res.Notebook); err != nil {
		fmt.Fprintf(os.Stderr, "cellbox: %v\n", err)
		return exitService
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", termSafe(out, false))
	if res.Truncated {
		fmt.Fprintln(os.Stderr, "cellbox: some output was too long and was cut")
	}
	if res.FailedCell != nil {
		fmt.Fprintf(os.Stderr, "cellbox: the notebook failed at cell %d (status %s)\n", *res.FailedCell+1, res.Status)
	}
	return exitCode(res.Status)
}

// showCell prints a line for a finished cell (the traceback of one that failed) and saves
// the files it made under the out folder.
func (x *session) showCell(ctx context.Context, c api.NotebookCell) {
	line := fmt.Sprintf("cell %d of %d: %s (%.1f s)", c.Index+1, c.Cells, c.Status, float64(c.DurationMS)/1000)
	if c.EName != "" {
		line += ": " + c.EName + ": " + c.EValue
	} else if c.Message != "" {
		line += ": " + c.Message
	}
	fmt.Fprintln(x.stderr, termSafe(line, false))
	if c.Status != api.StatusOK {
		for _, o := range c.Outputs {
			if o["output_type"] == api.OutputError {
				if tb, ok := o["traceback"].([]any); ok {
					for _, l := range tb {
						s, _ := l.(string)
						fmt.Fprintln(x.stderr, strings.TrimRight(s, "\n"))
					}
				}
			}
		}
	}
	for _, f := range c.Files {
		if f.Change != api.ChangeDeleted {
			x.download(ctx, f.Path)
		}
	}
}

// writeNotebook writes nb as Jupyter does (one space of indent, keys sorted, no escaping of
// <, > and &), whole or not at all.
func writeNotebook(path string, nb json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(nb))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("the server's notebook: %w", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/testbin"
)

// writeIpynb writes an nbformat 4.5 notebook (a markdown cell, then code cells, the first
// tagged parameters) into a folder of its own and returns its path.
func writeIpynb(t *testing.T, sources ...string) string {
	t.Helper()
	cells := []map[string]any{{"cell_type": "markdown", "id": "title", "metadata": map[string]any{}, "source": "# A notebook"}}
	for i, src := range sources {
		md := map[string]any{}
		if i == 0 {
			md["tags"] = []string{"parameters"}
		}
		cells = append(cells, map[string]any{"cell_type": "code", "id": "c" + string(rune('a'+i)), "metadata": md,
			"source": src, "outputs": []any{}, "execution_count": nil})
	}
	b, _ := json.Marshal(map[string]any{"nbformat": 4, "nbformat_minor": 5, "cells": cells,
		"metadata": map[string]any{"kernelspec": map[string]any{"name": "python3", "display_name": "Python 3", "language": "python"}}})
	p := filepath.Join(t.TempDir(), "analysis.ipynb")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type ipynbCell struct {
	Source         string           `json:"source"`
	Outputs        []map[string]any `json:"outputs"`
	ExecutionCount *int             `json:"execution_count"`
}

// readIpynb reads an executed notebook, after Debian's nbformat has validated it.
func readIpynb(t *testing.T, path string) []ipynbCell {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the executed notebook: %v", err)
	}
	testbin.NeedIPython(t, "nbformat")
	cmd := exec.Command("/usr/bin/python3", "-c", "import nbformat, sys; nbformat.validate(nbformat.reads(sys.stdin.read(), 4))")
	cmd.Stdin = bytes.NewReader(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nbformat refuses %s: %v\n%s", path, err, out)
	}
	var nb struct{ Cells []ipynbCell }
	if err := json.Unmarshal(b, &nb); err != nil {
		t.Fatal(err)
	}
	return nb.Cells
}

// TestRunNotebook: cellbox run NOTEBOOK.ipynb -p ... writes the executed notebook beside
// it (the input untouched), a line per cell on stderr, the files cells made under the out
// folder; -p values are papermill's.
func TestRunNotebook(t *testing.T) {
	nb := writeIpynb(t, "n = 0\nf = 0.5\ns = q = raw = flag = none = None",
		"print(repr(n), repr(f), repr(s), repr(q), repr(raw), repr(flag), repr(none))",
		"import matplotlib.pyplot as plt\nplt.plot(range(n))\nplt.show()\nopen('made.csv', 'w').write('a,b\\n')")
	before, _ := os.ReadFile(nb)
	r := cellbox(t, "", "run", nb, "-p", "n", "-3", "-p", "f", "1.0", "-p", "s", "'; import os #\n", "-p", "q", `"5"`,
		"-p", "raw", "[1, 2]", "--p", "flag", "true", "-p", "none", "null")
	r.want(t, exitOK)
	for _, want := range []string{"cell 2 of 5: ok", "cell 5 of 5: ok", "saved " + filepath.Join("cellbox-out", "made.csv"), "wrote " + strings.TrimSuffix(nb, ".ipynb") + ".out.ipynb"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if after, _ := os.ReadFile(nb); !bytes.Equal(after, before) {
		t.Error("the input notebook changed")
	}
	cells := readIpynb(t, strings.TrimSuffix(nb, ".ipynb")+".out.ipynb")
	if len(cells) != 5 || !strings.HasPrefix(cells[2].Source, "# Parameters\n") {
		t.Fatalf("cells %+v", cells)
	}
	if got := cells[3].Outputs[0]["text"]; got != `-3 1.0 "'; import os #\n" '5' '[1, 2]' True None`+"\n" {
		t.Errorf("the parameters as the notebook sees them: %q", got)
	}
	var png []byte
	for _, o := range cells[4].Outputs {
		if data, ok := o["data"].(map[string]any); ok && data["image/png"] != nil {
			png, _ = base64.StdEncoding.DecodeString(strings.TrimSpace(data["image/png"].(string)))
		}
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("no plot in %+v", cells[4].Outputs)
	}
	if b, err := os.ReadFile(filepath.Join(r.dir, "cellbox-out", "made.csv")); string(b) != "a,b\n" {
		t.Errorf("made.csv: %q, %v", b, err)
	}
}

// TestRunNotebookFails: a cell that raises stops the notebook, which is still written
// (-o), with an exit status of 1 and the traceback on stderr; --allow-errors goes on. A
// notebook is never written over itself.
func TestRunNotebookFails(t *testing.T) {
	nb := writeIpynb(t, "x = 1", "x / 0", "print('after')")
	r := cellbox(t, "", "run", "-o", "out.ipynb", nb)
	r.want(t, exitError)
	for _, want := range []string{"cell 3 of 4: error", "ZeroDivisionError: division by zero", "failed at cell 3 (status error)", "wrote out.ipynb"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	cells := readIpynb(t, filepath.Join(r.dir, "out.ipynb"))
	if last := cells[3]; last.ExecutionCount != nil || len(last.Outputs) != 0 {
		t.Errorf("the cell after the error: %+v", last)
	}

	r = cellbox(t, "", "run", "--allow-errors", "-o", "out.ipynb", nb)
	r.want(t, exitError)
	if cells := readIpynb(t, filepath.Join(r.dir, "out.ipynb")); cells[3].ExecutionCount == nil || cells[3].Outputs[0]["text"] != "after\n" {
		t.Errorf("allowing errors, the cell after: %+v", cells[3])
	}

	for _, args := range [][]string{{"-o", nb, nb}, {"-p", "a", "1", "-c", "1"}, {nb, "-p", "a"}} {
		if r := cellbox(t, "", append([]string{"run"}, args...)...); r.code != exitUsage {
			t.Errorf("run %q: exit %d, want %d; stderr %s", args, r.code, exitUsage, r.stderr)
		}
	}
}

func TestParamValue(t *testing.T) {
	for in, want := range map[string]any{
		"5": json.Number("5"), "-1.5e3": json.Number("-1.5e3"), "true": true, "false": false, "null": nil,
		`"quoted"`: "quoted", `"5"`: "5", "hello": "hello", "True": "True", "[1]": "[1]", `{"a": 1}`: `{"a": 1}`,
		"": "", "5 6": "5 6", `"a" "b"`: `"a" "b"`, "0x10": "0x10", " 7 ": json.Number("7"),
	} {
		if got := paramValue(in); got != want {
			t.Errorf("%q: %#v, want %#v", in, got, want)
		}
	}
}

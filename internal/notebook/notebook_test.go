package notebook

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

// notebook is an nbformat 4.minor notebook of cells (JSON objects), without their ids
// before 4.5.
func notebook(minor int, cells ...string) []byte {
	if minor < 5 {
		for i, c := range cells {
			cells[i] = cellID.ReplaceAllString(c, "")
		}
	}
	return fmt.Appendf(nil, `{"nbformat": 4, "nbformat_minor": %d, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}, "cells": [%s]}`,
		minor, strings.Join(cells, ", "))
}

var (
	cellIDs int
	cellID  = regexp.MustCompile(`"id": "[^"]*", `)
)

func codeCell(src string) string {
	cellIDs++
	s, _ := json.Marshal(src)
	return fmt.Sprintf(`{"cell_type": "code", "id": "c%d", "metadata": {}, "source": %s, "outputs": [], "execution_count": null}`, cellIDs, s)
}

func mdCell(src string) string {
	cellIDs++
	s, _ := json.Marshal(src)
	return fmt.Sprintf(`{"cell_type": "markdown", "id": "m%d", "metadata": {}, "source": %s}`, cellIDs, s)
}

// tagged gives a cell made by codeCell or mdCell the tag.
func tagged(cell, tag string) string {
	return strings.Replace(cell, `"metadata": {}`, `"metadata": {"tags": ["`+tag+`"]}`, 1)
}

func withID(cell, id string) string {
	i := strings.Index(cell, `"id": "`)
	j := strings.Index(cell[i+7:], `"`)
	return cell[:i+7] + id + cell[i+7+j:]
}

func parse(t *testing.T, b []byte) *Notebook {
	t.Helper()
	nb, err := Parse(b)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, b)
	}
	return nb
}

// cellsOf is nb's cells as its JSON has them.
func cellsOf(t *testing.T, nb *Notebook) []map[string]any {
	t.Helper()
	b, err := json.Marshal(nb)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Cells []map[string]any }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Cells
}

// validate checks nb (a *Notebook, or JSON) against nbformat's schema with Debian's
// python3-nbformat.
func validate(t *testing.T, nb any) {
	t.Helper()
	b, ok := nb.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(nb); err != nil {
			t.Fatal(err)
		}
	}
	if exec.Command("/usr/bin/python3", "-c", "import nbformat").Run() != nil {
		testbin.Missing(t, "needs /usr/bin/python3 with nbformat (apt-get install python3-nbformat; make test installs it)")
	}
	cmd := exec.Command("/usr/bin/python3", "-c", "import nbformat, sys; nbformat.validate(nbformat.reads(sys.stdin.read(), 4))")
	cmd.Stdin = strings.NewReader(string(b))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nbformat refuses the notebook: %v\n%s\n%s", err, lastLines(string(out), 8), b)
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// TestParseRefuses: what cannot be run is an invalid argument whose message says what
// and where.
func TestParseRefuses(t *testing.T) {
	many := make([]string, MaxCells+1)
	for i := range many {
		many[i] = `{"cell_type": "raw", "metadata": {}, "source": ""}`
	}
	tests := []struct{ name, nb, msg string }{
		{"not JSON", `{"nbformat": 4,`, "not a JSON object"},
		{"a list", `[]`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"no nbformat", `{"cells": []}`, "no nbformat field"},
		{"nbformat 3", `{"nbformat": 3, "worksheets": []}`, "nbformat is 3; this server runs nbformat 4"},
		{"nbformat as a string", `{"nbformat": "4", "cells": []}`, `nbformat is "4"`},
		{"minor not a number", `{"nbformat": 4, "nbformat_minor": "x", "cells": []}`, "nbformat_minor"},
		{"no cells", `{"nbformat": 4, "nbformat_minor": 5}`, "cells must be a list"},
		{"cells an object", `{"nbformat": 4, "cells": {}}`, "cells must be a list"},
		{"too many cells", `{"nbformat": 4, "cells": [` + strings.Join(many, ",") + `]}`, "1001 cells; this server runs at most 1000"},
		{"cell not an object", `{"nbformat": 4, "cells": [1]}`, "cell 0: not a JSON object"},
		{"no cell_type", `{"nbformat": 4, "cells": [{"source": ""}]}`, "cell 0: cell_type must be a string"},
		{"source a number", `{"nbformat": 4, "cells": [{"cell_type": "markdown", "source": ""}, {"cell_type": "code", "source": 1}]}`, "cell 1: source is a number; it must be a string or a list of strings"},
		{"source null", `{"nbformat": 4, "cells": [{"cell_type": "code", "source": null}]}`, "cell 0: source is null"},
		{"source a list of lists", `{"nbformat": 4, "cells": [{"cell_type": "code", "source": ["a", ["b"]]}]}`, "cell 0: source is a list with a list in it"},
		{"no source", `{"nbformat": 4, "cells": [{"cell_type": "code"}]}`, "cell 0: source is missing"},
		{"tags not strings", `{"nbformat": 4, "cells": [{"cell_type": "code", "source": "", "metadata": {"tags": [1]}}]}`, "cell 0: metadata must be an object, and its tags a list of strings"},
		{"another language", `{"nbformat": 4, "metadata": {"kernelspec": {"language": "fortran"}}, "cells": []}`, `written in "fortran"; this server's kernels run Python, JavaScript`},
		{"a cell's unknown language", `{"nbformat": 4, "cells": [{"cell_type": "code", "source": "", "metadata": {"cellbox": {"language": "cobol"}}}]}`, `cell 0: metadata.cellbox.language "cobol"`},
		{"another language_info", `{"nbformat": 4, "metadata": {"language_info": {"name": "julia"}}, "cells": []}`, `written in "julia"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.nb))
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want invalid argument with %q", err, tt.msg)
			}
		})
	}
	for _, ok := range []string{
		`{"nbformat": 4, "nbformat_minor": 2, "metadata": {}, "cells": []}`,
		`{"nbformat": 4, "metadata": {"kernelspec": {"language": "Python"}, "language_info": {"name": "python"}}, "cells": [{"cell_type": "code", "source": ["a\n", "b"]}]}`,
		`{"nbformat": 4, "metadata": {"kernelspec": {"language": "python3"}, "language_info": {"name": "IPython3"}}, "cells": []}`,
		`{"nbformat": 4, "cells": [{"cell_type": "future-kind", "whatever": [1]}]}`,
	} {
		if _, err := Parse([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// TestKeepsWhatItDoesNotRun: every field of the notebook and of its cells but code cells'
// outputs and execution_count comes back as it came, unknown ones included (nbformat would
// refuse the one at the top: no schema is checked here).
func TestKeepsWhatItDoesNotRun(t *testing.T) {
	in := `{
 "nbformat": 4, "nbformat_minor": 5,
 "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
  "language_info": {"name": "python", "version": "3.11.2"}, "vendor": {"nested": [1, 2.50, "x"]}},
 "x-unknown-top": {"a": [true, null]},
 "cells": [
  {"cell_type": "markdown", "id": "md", "metadata": {"collapsed": true}, "source": ["# Title\n", "text <b>&</b>"],
   "attachments": {"a.png": {"image/png": "iVBORw0KGgo="}}},
  {"cell_type": "raw", "id": "raw", "metadata": {"format": "text/x-rst"}, "source": ".. note::"},
  {"cell_type": "code", "id": "code", "metadata": {"tags": ["t"], "scrolled": "auto", "custom": {"k": 1e3}},
   "source": ["print(1)\n", "2"], "outputs": [{"output_type": "stream", "name": "stdout", "text": "stale"}], "execution_count": 9},
  {"cell_type": "code", "id": "empty", "metadata": {}, "source": "  \n", "outputs": [], "execution_count": 3}
 ]
}`
	res, err := run(t, &fakeSessions{}, api.NotebookRequest{Notebook: []byte(in)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	json.Unmarshal([]byte(in), &want)
	json.Unmarshal(res.Notebook, &got)
	wantCells, gotCells := want["cells"].([]any), got["cells"].([]any)
	// What the run changes: the code cells' outputs and counts.
	code := wantCells[2].(map[string]any)
	code["outputs"] = []any{map[string]any{"output_type": "stream", "name": "stdout", "text": "ran: print(1)\n2"}}
	code["execution_count"] = float64(1)
	empty := wantCells[3].(map[string]any)
	empty["outputs"], empty["execution_count"] = []any{}, nil
	if !reflect.DeepEqual(got, want) {
		for i := range wantCells {
			if !reflect.DeepEqual(gotCells[i], wantCells[i]) {
				t.Errorf("cell %d: %v\nwant %v", i, gotCells[i], wantCells[i])
			}
		}
		t.Fatalf("notebook %s", res.Notebook)
	}
}

// FuzzParse: no input panics the parser; what it takes comes out again as JSON that it
// takes, unchanged by a second round, with parameters injected or not.
func FuzzParse(f *testing.F) {
	f.Add(string(notebook(5, mdCell("# t"), tagged(codeCell("a = 1"), "parameters"), codeCell("print(a)"))))
	f.Add(string(notebook(4, codeCell(""), withID(tagged(codeCell("a = 2"), "injected-parameters"), "x"))))
	f.Add(`{"nbformat": 4, "cells": [{"cell_type": "code", "source": ["a", "b"], "metadata": {"tags": ["skip-execution"]}}], "x": {}}`)
	f.Add(`{"nbformat": 4, "nbformat_minor": 5, "metadata": null, "cells": [{"cell_type": "other"}]}`)
	f.Add(`{"nbformat":4,"cells":[{"cell_type":"code","source":"\u2028\"x","outputs":7}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		nb, err := Parse([]byte(in))
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error of another kind: %v", err)
			}
			return
		}
		once, err := json.Marshal(nb)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := Parse(once)
		if err != nil {
			t.Fatalf("parse what it wrote: %v\n%s", err, once)
		}
		twice, _ := json.Marshal(again)
		if string(once) != string(twice) {
			t.Fatalf("a second round changed it:\n%s\n%s", once, twice)
		}
		if err := again.Inject(map[string]any{"p": in}); err != nil && len(again.cells) < MaxCells {
			t.Fatalf("inject: %v", err)
		}
	})
}

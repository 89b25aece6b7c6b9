package notebook

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

// python runs code with Debian's python3 and returns its stdout.
func python(t *testing.T, code, stdin string) string {
	t.Helper()
	testbin.NeedProgram(t, "/usr/bin/python3", "python3")
	cmd := exec.Command("/usr/bin/python3", "-c", code)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("python3: %v\n%s\ncode:\n%s", err, stderr, code)
	}
	return string(out)
}

// sameAsJSON is Python that checks that the variable p is exactly the JSON on stdin as
// Python's json module reads it: same types (an int is no float, True no 1), same values.
const sameAsJSON = `
import json, math, sys
def same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b
want = json.loads(sys.stdin.read())
print("same" if same(p, want) else "differs: %r != %r" % (p, want))
`

// TestParametersInPython: the injected cell, run by a real python3, gives each parameter
// exactly its value, whatever a string holds; nothing in a value runs as code.
func TestParametersInPython(t *testing.T) {
	tests := []struct {
		name  string
		value any
	}{
		{"quote and code", "'; import os; os.system('touch /tmp/pwned') #"},
		{"double quotes", `"""; import os #`},
		{"backslashes", `\" \\ \n \x41 \N{BULLET} \u0041 end\`},
		{"line breaks", "a\nb\r\nc\rd\u2028e\u2029f\u0085g"},
		{"controls", "\x00\x01\x07\x08\x0b\x0c\x1b[31m\x7f"},
		{"unicode", "héllo wörld, 中文, 🙂, \U0001F600, e\u0301, \u00a0nbsp, \ufeffbom"},
		{"invalid UTF-8", string([]byte{'a', 0xff, 0xfe, 'b'})},
		{"empty", ""},
		{"int", 42},
		{"big int", json.Number("123456789012345678901234567890")},
		{"negative zero", json.Number("-0")},
		{"float", 2.5},
		{"float written with .0", json.Number("1.0")},
		{"exponent", json.Number("-1.5E-300")},
		{"huge exponent", json.Number("1e999")},
		{"true", true},
		{"false", false},
		{"null", nil},
		{"list", []any{1, "two", []any{3.5, nil}, map[string]any{}}},
		{"dict", map[string]any{"a b": 1, `k"ey`: "v'al\n", "": []any{}, "x": map[string]any{"y": false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nb := parse(t, notebook(5, codeCell("print(p)")))
			if err := nb.Inject(map[string]any{"p": tt.value}); err != nil {
				t.Fatal(err)
			}
			src := nb.cells[0].source
			if lines := strings.Split(strings.TrimSuffix(src, "\n"), "\n"); len(lines) != 2 || lines[0] != "# Parameters" || !strings.HasPrefix(lines[1], "p = ") {
				t.Fatalf("cell source %q: want the comment and one line", src)
			}
			want, err := json.Marshal(tt.value)
			if err != nil {
				t.Fatal(err)
			}
			if got := python(t, src+sameAsJSON, string(want)); got != "same\n" {
				t.Errorf("%s\nsource: %s", got, src)
			}
		})
	}
}

// TestParametersCell: papermill's placement, its tags, and an id only for nbformat 4.5.
func TestParametersCell(t *testing.T) {
	params := map[string]any{"b": "x", "a": 1}
	const src = "# Parameters\na = 1\nb = \"x\"\n"
	tests := []struct {
		name  string
		minor int
		cells []string
		at    int    // where the injected cell is
		id    string // its id: "" none, "*" a new one
		n     int    // cells after
	}{
		{"no parameters cell", 5, []string{codeCell("x")}, 0, "*", 2},
		{"after the parameters cell", 5, []string{mdCell("title"), tagged(codeCell("a = 0"), "parameters"), codeCell("x")}, 2, "*", 4},
		{"after the first parameters cell", 4, []string{tagged(codeCell("a = 0"), "parameters"), tagged(codeCell("b = 0"), "parameters")}, 1, "", 3},
		{"replaces an injected cell", 5, []string{tagged(codeCell("a = 0"), "parameters"), codeCell("x"), withID(tagged(codeCell("a = 7"), "injected-parameters"), "old")}, 2, "old", 3},
		{"nbformat 4.4: no id", 4, []string{codeCell("x")}, 0, "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nb := parse(t, notebook(tt.minor, tt.cells...))
			if err := nb.Inject(params); err != nil {
				t.Fatal(err)
			}
			if len(nb.cells) != tt.n {
				t.Fatalf("%d cells, want %d", len(nb.cells), tt.n)
			}
			cells := cellsOf(t, nb)
			c := cells[tt.at]
			if c["cell_type"] != "code" || c["source"] != src || c["execution_count"] != nil || len(c["outputs"].([]any)) != 0 {
				t.Errorf("injected cell %v", c)
			}
			if tags := c["metadata"].(map[string]any)["tags"].([]any); len(tags) != 1 || tags[0] != "injected-parameters" {
				t.Errorf("tags %v", tags)
			}
			id, hasID := c["id"].(string)
			switch {
			case tt.id == "" && hasID, tt.id == "*" && id == "", tt.id != "*" && tt.id != "" && id != tt.id:
				t.Errorf("id %q, want %q", id, tt.id)
			}
			validate(t, nb)
		})
	}
	t.Run("no parameters, no cell", func(t *testing.T) {
		nb := parse(t, notebook(5, codeCell("x")))
		if err := nb.Inject(nil); err != nil || len(nb.cells) != 1 {
			t.Errorf("%v, %d cells", err, len(nb.cells))
		}
	})
}

// TestParameterNamesRefused: a name that is not an identifier or is a keyword is an
// invalid argument naming it; soft keywords are names.
func TestParameterNamesRefused(t *testing.T) {
	for _, name := range []string{"", "1x", "a-b", "a b", "é", "x;import os", "__import__('os')", "class", "None", "True", "await", "x\n"} {
		nb := parse(t, notebook(5, codeCell("x")))
		err := nb.Inject(map[string]any{name: 1})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "parameter name") {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"match", "case", "type", "_", "x1", "_private", "CamelCase"} {
		nb := parse(t, notebook(5, codeCell("x")))
		if err := nb.Inject(map[string]any{name: 1}); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
}

// TestKeywordsArePythons: the list of keywords refused is python3's own.
func TestKeywordsArePythons(t *testing.T) {
	got := python(t, "import keyword, json; print(json.dumps(keyword.kwlist, separators=(',', ':')))", "")
	want, _ := json.Marshal(keywords)
	if strings.TrimSpace(got) != string(want) {
		t.Errorf("python3's keywords %s, ours %s", got, want)
	}
}

func TestParameterValuesRefused(t *testing.T) {
	deep := any(1)
	for range maxDepth + 2 {
		deep = []any{deep}
	}
	for name, v := range map[string]any{"too deep": deep, "a channel": make(chan int)} {
		nb := parse(t, notebook(5, codeCell("x")))
		if err := nb.Inject(map[string]any{"p": v}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

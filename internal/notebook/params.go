package notebook

import (
	"github.com/cellbox/cellbox/api"

	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// maxDepth bounds how deep a parameter's value nests: Python's parser refuses a literal
// nested about 200 deep.
const maxDepth = 64

// Inject adds papermill's parameters cell: "# Parameters" and one assignment a name, in
// name order, each value a Python literal. It goes in place of the first cell tagged
// injected-parameters, else right after the first tagged parameters, else at the top.
// Names must be Python identifiers of ASCII letters, digits and _, not keywords; values
// are JSON values (anything json.Marshal takes). No parameters: no cell.
func (nb *Notebook) Inject(params map[string]any) error {
	if len(params) == 0 {
		return nil
	}
	if nb.lang != api.LanguagePython {
		return invalid("parameters are injected as Python; this notebook is written in %s", nb.lang)
	}
	// Through JSON once: any Go value becomes one of JSON's, numbers kept as written.
	b, err := json.Marshal(params)
	if err != nil {
		return invalid("parameters: %s", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var values map[string]any
	if err := dec.Decode(&values); err != nil {
		return invalid("parameters: %s", err)
	}
	names := make([]string, 0, len(values))
	for name := range values {
		if err := checkName(name); err != nil {
			return err
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var src strings.Builder
	src.WriteString("# Parameters\n")
	for _, name := range names {
		lit, err := literal(values[name], 0)
		if err != nil {
			return invalid("parameter %s: %s", name, err)
		}
		fmt.Fprintf(&src, "%s = %s\n", name, lit)
	}
	return nb.insert(src.String())
}

// insert puts the injected cell with source src where papermill puts it.
func (nb *Notebook) insert(src string) error {
	c := &cell{
		kind: "code", source: src, tags: []string{TagInjectedParameters}, outputs: []map[string]any{},
		fields: map[string]json.RawMessage{
			"cell_type": json.RawMessage(`"code"`),
			"metadata":  json.RawMessage(`{"tags":["` + TagInjectedParameters + `"]}`),
		},
	}
	c.fields["source"], _ = json.Marshal(src)
	at := slices.IndexFunc(nb.cells, func(c *cell) bool { return c.tagged(TagInjectedParameters) })
	if at >= 0 {
		if id, ok := nb.cells[at].fields["id"]; ok {
			c.fields["id"] = id
		}
		nb.cells[at] = c
	} else {
		at = slices.IndexFunc(nb.cells, func(c *cell) bool { return c.tagged(TagParameters) }) + 1 // 0 without one
		if len(nb.cells) >= MaxCells {
			return invalid("%d cells and the parameters' cell; this server runs at most %d in one notebook: split it", len(nb.cells), MaxCells)
		}
		nb.cells = slices.Insert(nb.cells, at, c)
	}
	if _, ok := c.fields["id"]; !ok && nb.minor >= 5 { // nbformat 4.5 wants an id, 4.4 none
		id := make([]byte, 8)
		rand.Read(id)
		c.fields["id"] = json.RawMessage(`"` + hex.EncodeToString(id) + `"`)
	}
	return nil
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// keywords are Python's (keyword.kwlist); soft keywords (match, case, type, _) are names.
var keywords = []string{
	"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
	"continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
	"if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
	"try", "while", "with", "yield",
}

func checkName(name string) error {
	if !identifier.MatchString(name) {
		return invalid("parameter name %.64q is not a Python identifier: use ASCII letters, digits and _, not starting with a digit", name)
	}
	if slices.Contains(keywords, name) {
		return invalid("parameter name %q is a Python keyword: pick another name", name)
	}
	return nil
}

// literal writes v, a value of JSON decoded with UseNumber, as a Python literal that
// evaluates to it: nothing in a string can end the literal.
func literal(v any, depth int) (string, error) {
	if depth > maxDepth {
		return "", fmt.Errorf("nests deeper than %d levels", maxDepth)
	}
	switch v := v.(type) {
	case nil:
		return "None", nil
	case bool:
		if v {
			return "True", nil
		}
		return "False", nil
	case json.Number:
		if !number.MatchString(string(v)) {
			return "", fmt.Errorf("%.40q is not a JSON number", string(v))
		}
		return string(v), nil // JSON's numbers are Python's: 1 an int, 1.0 and 1e3 floats
	case string:
		return pyString(v), nil
	case []any:
		items := make([]string, len(v))
		for i, e := range v {
			s, err := literal(e, depth+1)
			if err != nil {
				return "", err
			}
			items[i] = s
		}
		return "[" + strings.Join(items, ", ") + "]", nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		items := make([]string, len(keys))
		for i, k := range keys {
			s, err := literal(v[k], depth+1)
			if err != nil {
				return "", err
			}
			items[i] = pyString(k) + ": " + s
		}
		return "{" + strings.Join(items, ", ") + "}", nil
	}
	return "", fmt.Errorf("a %T is not a JSON value", v)
}

// number is JSON's number grammar, every word of which Python reads as the same number.
var number = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// pyString quotes s as a Python string literal: printable characters as they are but
// the quote and the backslash, everything else (line breaks, controls, U+2028) as an
// escape, so the literal is one line.
func pyString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case strconv.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Package notebook runs Jupyter notebooks (nbformat 4) in cellbox sessions, as nbclient
// and papermill do: it parses a notebook and checks what running it needs (nbformat 4,
// each cell's type, a code cell's source), injects papermill's parameters, runs the code
// cells one at a time through the session manager's Execute, and puts each cell's outputs
// back in nbformat's shape, display updates and clear_output applied as nbclient applies
// them. What it does not run (markdown and raw cells, metadata, fields it does not know)
// is kept as it came.
//
// Not for: serving HTTP (package httpapi) or deciding what a session does (package
// session); kernels other than a session's Python, widgets' state, nbformat 3 and older.
package notebook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// MaxCells is the most cells a notebook may have.
const MaxCells = 1000

// Tags of cells that the run reads (in a cell's metadata.tags).
const (
	TagParameters         = "parameters"          // papermill: the injected cell goes after it
	TagInjectedParameters = "injected-parameters" // papermill: the cell of the parameters
	TagSkipExecution      = "skip-execution"      // nbclient: not run
	TagRaisesException    = "raises-exception"    // nbclient: its error does not stop the run
)

// Notebook is a parsed notebook. Its code cells start with no outputs and a null
// execution_count, as papermill starts them; Run fills in those that run.
type Notebook struct {
	fields map[string]json.RawMessage // every field but cells, as it came
	cells  []*cell
	minor  int    // nbformat_minor: from 5 on, every cell has an id
	lang   string // its code cells' language (an api.Language*), unless a cell names its own
}

type cell struct {
	fields map[string]json.RawMessage // as it came
	kind   string                     // cell_type
	source string                     // joined, for code cells
	tags   []string
	lang   string // metadata.cellbox.language, as the web page writes it: "" the notebook's
	// Of code cells: as run (none, null: not run).
	outputs []map[string]any
	count   *int
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("notebook: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// Parse reads a notebook. Its errors (invalid_argument) say what is wrong and where.
func Parse(b []byte) (*Notebook, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil || fields == nil {
		return nil, invalid("not a JSON object (an .ipynb file's content)")
	}
	raw, ok := fields["nbformat"]
	if !ok {
		return nil, invalid("no nbformat field: is it a Jupyter notebook (.ipynb)?")
	}
	var major int
	if json.Unmarshal(raw, &major) != nil || major != 4 {
		return nil, invalid("nbformat is %s; this server runs nbformat 4 (jupyter nbconvert --to notebook --nbformat 4 upgrades older ones)", truncate(raw))
	}
	nb := &Notebook{fields: fields}
	if raw, ok := fields["nbformat_minor"]; ok && json.Unmarshal(raw, &nb.minor) != nil {
		return nil, invalid("nbformat_minor is %s, not an integer", truncate(raw))
	}
	lang, err := notebookLanguage(fields["metadata"])
	if err != nil {
		return nil, err
	}
	nb.lang = lang
	var cells []json.RawMessage
	if json.Unmarshal(fields["cells"], &cells) != nil || cells == nil {
		return nil, invalid("cells must be a list of cells")
	}
	if len(cells) > MaxCells {
		return nil, invalid("%d cells; this server runs at most %d in one notebook: split it", len(cells), MaxCells)
	}
	delete(fields, "cells")
	for i, raw := range cells {
		c, err := parseCell(raw)
		if err != nil {
			return nil, invalid("cell %d: %s", i, err)
		}
		nb.cells = append(nb.cells, c)
	}
	return nb, nil
}

func parseCell(b []byte) (*cell, error) {
	c := &cell{}
	if err := json.Unmarshal(b, &c.fields); err != nil || c.fields == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	if json.Unmarshal(c.fields["cell_type"], &c.kind) != nil || c.kind == "" {
		return nil, fmt.Errorf("cell_type must be a string (code, markdown or raw)")
	}
	if raw, ok := c.fields["metadata"]; ok {
		var md struct {
			Tags    []string `json:"tags"`
			Cellbox struct {
				Language any `json:"language"`
			} `json:"cellbox"`
		}
		if json.Unmarshal(raw, &md) != nil {
			return nil, fmt.Errorf("metadata must be an object, and its tags a list of strings")
		}
		c.tags = md.Tags
		if md.Cellbox.Language != nil {
			l, _ := md.Cellbox.Language.(string)
			lang, ok := api.LanguageOf(l)
			if !ok || l == "" {
				return nil, fmt.Errorf("metadata.cellbox.language %.40q is not one of python, javascript, typescript, r, bash", l)
			}
			c.lang = lang
		}
	}
	if c.kind != "code" {
		return c, nil
	}
	src, err := multiline(c.fields["source"])
	if err != nil {
		return nil, fmt.Errorf("source %s", err)
	}
	c.source = src
	c.outputs = []map[string]any{}
	return c, nil
}

// multiline reads nbformat's multiline string: a string, or a list of strings to join.
func multiline(raw json.RawMessage) (string, error) {
	var v any
	if raw == nil || json.Unmarshal(raw, &v) != nil {
		return "", fmt.Errorf("is missing; a code cell's source is a string or a list of strings")
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case []any:
		var b strings.Builder
		for _, l := range v {
			s, ok := l.(string)
			if !ok {
				return "", fmt.Errorf("is a list with %s in it; it must be a string or a list of strings", kind(l))
			}
			b.WriteString(s)
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("is %s; it must be a string or a list of strings", kind(v))
}

// kind names the JSON type of v, a value json.Unmarshal made.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	}
	return "an object"
}

// notebookLanguage is the language a notebook's metadata names (its kernelspec's language,
// or language_info's name; ipython and python3 are Python), Python if none; a language this
// server has no kernel for is refused.
func notebookLanguage(raw json.RawMessage) (string, error) {
	var md struct {
		Kernelspec struct {
			Language any `json:"language"`
		} `json:"kernelspec"`
		LanguageInfo struct {
			Name any `json:"name"`
		} `json:"language_info"`
	}
	json.Unmarshal(raw, &md) // metadata nbformat would refuse is not this package's to refuse
	for _, v := range []any{md.Kernelspec.Language, md.LanguageInfo.Name} {
		l, _ := v.(string)
		if l == "" {
			continue
		}
		name := strings.ToLower(l)
		if p := strings.TrimSuffix(strings.TrimPrefix(name, "i"), "3"); p == "python" {
			name = p
		}
		lang, ok := api.LanguageOf(name)
		if !ok {
			return "", invalid("its metadata says it is written in %.40q; this server's kernels run Python, JavaScript, TypeScript, R and Bash", l)
		}
		return lang, nil
	}
	return api.LanguagePython, nil
}

// truncate shows a JSON value in a message, cut to 40 bytes.
func truncate(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// runs says whether the run executes c: a code cell with code, not tagged skip-execution.
func (c *cell) runs() bool {
	return c.kind == "code" && strings.TrimSpace(c.source) != "" && !c.tagged(TagSkipExecution)
}

func (c *cell) tagged(tag string) bool { return slices.Contains(c.tags, tag) }

// MarshalJSON writes the notebook: code cells with their outputs and execution_count as
// run, everything else as it came.
func (nb *Notebook) MarshalJSON() ([]byte, error) {
	cells := make([]map[string]any, len(nb.cells))
	for i, c := range nb.cells {
		m := make(map[string]any, len(c.fields)+2)
		for k, v := range c.fields {
			m[k] = v
		}
		if c.kind == "code" {
			m["outputs"] = c.outputs
			m["execution_count"] = c.count
		}
		cells[i] = m
	}
	m := make(map[string]any, len(nb.fields)+1)
	for k, v := range nb.fields {
		m[k] = v
	}
	m["cells"] = cells
	return json.Marshal(m)
}

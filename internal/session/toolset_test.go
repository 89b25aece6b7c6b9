package session

import (
	"encoding/json"
	"fmt"
	"regexp/syntax"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/guestproto"
)

// TestToolSchemaCostBounded: a schema whose references double at each link (a few KB that
// took seconds to check a value) and one that refers to itself are refused; arguments past
// maxArgs are refused before they are decoded.
func TestToolSchemaCostBounded(t *testing.T) {
	defs := map[string]any{"leaf": map[string]any{"type": "integer"}}
	prev := "leaf"
	for i := range 30 {
		name := fmt.Sprintf("d%d", i)
		defs[name] = map[string]any{"anyOf": []any{map[string]any{"$ref": "#/$defs/" + prev}, map[string]any{"$ref": "#/$defs/" + prev}}}
		prev = name
	}
	chain, _ := json.Marshal(map[string]any{"type": "object", "$defs": defs, "properties": map[string]any{"x": map[string]any{"$ref": "#/$defs/" + prev}}})
	loop, _ := json.Marshal(map[string]any{"type": "object", "$defs": map[string]any{"n": map[string]any{"type": "array", "items": map[string]any{"$ref": "#/$defs/n"}}},
		"properties": map[string]any{"x": map[string]any{"$ref": "#/$defs/n"}}})
	for name, schema := range map[string][]byte{"doubling chain": chain, "cycle": loop} {
		if _, err := checkTool(guestproto.Tool{Name: "f", InputSchema: schema}, nil, true); err == nil || !strings.Contains(err.Error(), "references") {
			t.Errorf("%s: %v; want refused for its expanded size", name, err)
		}
	}
	ok, err := checkTool(guestproto.Tool{Name: "f", InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"array","items":{"type":"string"}}}}`)}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	big := `{"x":[` + strings.Repeat(`1,`, maxArgs/2) + `1]}`
	if _, err := ok.check(json.RawMessage(big)); err == nil || !strings.Contains(err.Error(), "more than a tool call may take") {
		t.Errorf("arguments of %d bytes: %v", len(big), err)
	}
}

// TestToolPatternsBounded: a schema's patterns are refused past maxPatternInsts compiled
// (a few bytes of nested repeats compile to tens of MiB), ordinary ones are kept, and the
// estimate the bound rests on is never below the compiled program's size.
func TestToolPatternsBounded(t *testing.T) {
	schema := func(patterns ...string) json.RawMessage {
		props := map[string]any{}
		for i, p := range patterns {
			props[fmt.Sprintf("p%d", i)] = map[string]any{"type": "string", "pattern": p}
		}
		b, _ := json.Marshal(map[string]any{"type": "object", "properties": props})
		return b
	}
	for name, s := range map[string]json.RawMessage{
		"long repeats":      schema(`[a-z]{1000}x{1000}y{1000}z{1000}\pL{1000}`),
		"nested repeats":    schema(`((abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz01234567){10}){10}`),
		"many that add up":  schema(strings.Split(strings.Repeat(`\w{1000},`, 6), ",")[:6]...),
		"patternProperties": json.RawMessage(`{"type":"object","patternProperties":{"x{999}|y{999}|z{999}|w{999}|v{999}|u{999}":{}}}`),
		"alternatives":      schema(`a{1000}|b{1000}|c{1000}|d{1000}|e{1000}|f{1000}`),
	} {
		if _, err := checkTool(guestproto.Tool{Name: "f", InputSchema: s}, nil, true); err == nil || !strings.Contains(err.Error(), "regular expressions are larger") {
			t.Errorf("%s: %v; want refused for its patterns' size", name, err)
		}
	}
	ok := schema(`^[A-Z]{2}-\d{4}$`, `^(?:[a-z0-9._%+-]+)@(?:[a-z0-9.-]+)\.[a-z]{2,}$`, `^\d{4}-\d{2}-\d{2}$`)
	st, err := checkTool(guestproto.Tool{Name: "f", InputSchema: ok}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.check(json.RawMessage(`{"p0":"AB-12x4"}`)); err == nil {
		t.Error("a value that breaks a pattern passed")
	}
	for _, p := range []string{`a`, `abc|de|f`, `(a|b)*c+d?`, `x{3,7}`, `x{2,}`, `(a{10}){10}`, `[^a-z]{5}\b(?i:hello)`, `((ab)*|c{0,4}){3}`, `^\d{4}-\d{2}$`, `(?:a?){30}`, `x{999}|y{999}|z{999}`, `((abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz01234567){10}){10}`, `(?:ab|ac|ad){3}`, `\pL{1000}`, `(?i)k{20}|[[:alpha:]]+$`} {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		if est := progInsts(re, 1<<30); est < len(prog.Inst) {
			t.Errorf("%s: estimated %d instructions, compiled to %d", p, est, len(prog.Inst))
		}
	}
}

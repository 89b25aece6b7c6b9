package session

import (
	"encoding/json"
	"fmt"
	"regexp/syntax"
	"runtime"
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
	ok := schema(`^[A-Z]{2}-\d{4}$`, `^(?:[a-z0-9._%+-]+)@(?:[a-z0-9.-]+)\.[a-z]{2,}$`, `^\d{4}-\d{2}-\d{2}$`, `^[\p{L}\p{N}_]{1,64}$`)
	st, err := checkTool(guestproto.Tool{Name: "f", InputSchema: ok}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	for args, match := range map[string]bool{`{"p0":"AB-1234"}`: true, `{"p0":"AB-12x4"}`: false, `{"p0":"xAB-1234"}`: false,
		`{"p3":"naïve_2"}`: true, `{"p3":"a b"}`: false} {
		if _, err := st.check(json.RawMessage(args)); (err == nil) != match {
			t.Errorf("%s: %v; want a match: %v", args, err, match)
		}
	}
	// A pattern counts once, not again for the meta-schema's check of it as a regex.
	if _, err := checkTool(guestproto.Tool{Name: "f", InputSchema: schema(`a{600}b{600}c{600}`)}, nil, true); err != nil {
		t.Errorf("a pattern of about 1800 instructions: %v", err)
	}
}

// TestToolPatternsMemory: what a tool's patterns keep is bounded as maxPatternInsts says.
// Go compiles an anchored pattern onepass, copying its classes' ranges into each
// instruction: these 30 bytes kept 10 MiB a tool.
func TestToolPatternsMemory(t *testing.T) {
	s := json.RawMessage(`{"type":"object","properties":{"x":{"type":"string","pattern":"^(?:\\p{Ll}\\p{Lu}?){300}$"}}}`)
	const n = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := make([]*sessionTool, n)
	for i := range kept {
		st, err := checkTool(guestproto.Tool{Name: "f", InputSchema: s}, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		kept[i] = st
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > n<<20 {
		t.Errorf("%d tools of one anchored pattern keep %d KiB; want at most 1 MiB each", n, grew>>10)
	}
	if _, err := kept[0].check(json.RawMessage(`{"x":"` + strings.Repeat("aB", 300) + `"}`)); err != nil {
		t.Errorf("a value that matches: %v", err)
	}
	if _, err := kept[0].check(json.RawMessage(`{"x":"x` + strings.Repeat("aB", 300) + `"}`)); err == nil {
		t.Error("a value that does not match passed")
	}
	runtime.KeepAlive(kept)
}

// TestToolFormatRegex: under a draft that asserts "format", a "regex" argument is checked
// with the same engine, alone, as often as it comes: the schema's own budget is not spent.
func TestToolFormatRegex(t *testing.T) {
	st, err := checkTool(guestproto.Tool{Name: "f", InputSchema: json.RawMessage(
		`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"re":{"type":"string","format":"regex"}}}`)}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := st.check(json.RawMessage(`{"re":"a{1000}"}`)); err != nil {
			t.Fatalf("a regex argument: %v", err)
		}
	}
	if _, err := st.check(json.RawMessage(`{"re":"abc"}`)); err != nil {
		t.Errorf("after five: %v", err)
	}
	if _, err := st.check(json.RawMessage(`{"re":"((a{1000}){5}"}`)); err == nil {
		t.Error("a regex argument that is not one passed")
	}
}

// FuzzPatternEstimate: the estimate the bound rests on is never below the compiled
// program's size.
func FuzzPatternEstimate(f *testing.F) {
	for _, p := range []string{`a`, `(?:(?:abc){0}){0,3}`, `((?:((?:$){0,})){0,3})`, `x{0}`, `(a|b|)*`, `[^a]{2,5}?`, `(?i)ab{3}|c`, `\pL+\b`} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			return
		}
		est := progInsts(re, 1<<20)
		if est >= 1<<20 {
			return
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			return
		}
		if est < len(prog.Inst) {
			t.Errorf("%s: estimated %d instructions, compiled to %d", p, est, len(prog.Inst))
		}
	})
}

package session

import (
	"encoding/json"
	"fmt"
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
		if _, err := checkTool(guestproto.Tool{Name: "f", InputSchema: schema}, nil); err == nil || !strings.Contains(err.Error(), "references") {
			t.Errorf("%s: %v; want refused for its expanded size", name, err)
		}
	}
	ok, err := checkTool(guestproto.Tool{Name: "f", InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"array","items":{"type":"string"}}}}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := `{"x":[` + strings.Repeat(`1,`, maxArgs/2) + `1]}`
	if _, err := ok.check(json.RawMessage(big)); err == nil || !strings.Contains(err.Error(), "more than a tool call may take") {
		t.Errorf("arguments of %d bytes: %v", len(big), err)
	}
}

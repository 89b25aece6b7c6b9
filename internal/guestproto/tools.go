package guestproto

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// ToolSet is the kernel's tools after a run that changed them: all of them, not a change.
type ToolSet struct {
	Tools []Tool `json:"tools"`
}

// Tool is a function of the kernel's offered as a tool (from cellbox import tool).
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Source      string          `json:"source"`
	Save        bool            `json:"save,omitempty"`
}

// ToolResultMIME is the MIME type of the one display_data output by which a tool's call
// (cellbox._call) returns its value: {"value": JSON} or, when JSON can't hold it,
// {"text": its repr, "type": its type's name}.
const ToolResultMIME = "application/vnd.cellbox.tool-result+json"

// The kernel's limits on tools (module cellbox enforces them; Check checks them again).
const (
	MaxTools           = 64
	MaxToolDescription = 1024      // characters
	MaxToolSchema      = 64 << 10  // bytes of JSON
	MaxToolSource      = 256 << 10 // bytes
)

var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckToolName says why name can't be a tool's: the providers' pattern
// (^[A-Za-z0-9_-]{1,64}$), and not the agent's own python or shell.
func CheckToolName(name string) error {
	if !toolName.MatchString(name) {
		return fmt.Errorf("%q can't be a tool's name: a name is 1 to 64 letters, digits, _ or -", name)
	}
	if l := strings.ToLower(name); l == "python" || l == "shell" {
		return fmt.Errorf("%q can't be a tool's name: python and shell are the agent's own tools", name)
	}
	return nil
}

// Check says what is wrong with a tool set from a guest, which is untrusted: too many
// tools, a name twice or out of pattern, a schema that is not a JSON object of type
// object, a part over its limit.
func (s *ToolSet) Check() error {
	if len(s.Tools) > MaxTools {
		return fmt.Errorf("%d tools, more than %d", len(s.Tools), MaxTools)
	}
	seen := make(map[string]bool, len(s.Tools))
	for i, t := range s.Tools {
		if err := CheckToolName(t.Name); err != nil {
			return fmt.Errorf("tool %d: %w", i, err)
		}
		if seen[t.Name] {
			return fmt.Errorf("tool %q twice", t.Name)
		}
		seen[t.Name] = true
		if utf8.RuneCountInString(t.Description) > MaxToolDescription {
			return fmt.Errorf("tool %q: a description of more than %d characters", t.Name, MaxToolDescription)
		}
		if len(t.Source) > MaxToolSource {
			return fmt.Errorf("tool %q: a source of more than %d bytes", t.Name, MaxToolSource)
		}
		if len(t.InputSchema) > MaxToolSchema {
			return fmt.Errorf("tool %q: an input schema of more than %d bytes", t.Name, MaxToolSchema)
		}
		var schema map[string]json.RawMessage // keys exactly: a struct would match "TYPE" too
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil || string(schema["type"]) != `"object"` {
			return fmt.Errorf("tool %q: an input schema that is not a JSON Schema of type object", t.Name)
		}
	}
	return nil
}

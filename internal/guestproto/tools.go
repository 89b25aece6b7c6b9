package guestproto

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cellbox/cellbox/api"
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

// MaxToolResult bounds a ToolResultMIME value, as JSON, which module cellbox keeps within
// it (1 MiB of a value's JSON, or 64 Ki characters of its repr): one of a run is let
// through outside the run's rich-output budget.
const MaxToolResult = 1<<20 + 256<<10 + 1<<10

// The kernel's limits on tools (module cellbox enforces them; Check checks them again).
const (
	MaxTools           = 64
	MaxToolDescription = 1024      // characters
	MaxToolSchema      = 64 << 10  // bytes of JSON
	MaxToolSource      = 256 << 10 // bytes
	// MaxToolReport bounds a report: all the tools' JSON together, as the runner sends it
	// (ASCII, escaped), which is never less than their decoded names, descriptions,
	// schemas and sources.
	MaxToolReport = 4 << 20
)

var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// BuiltinTools are the names of the tools the front doors offer beside a session's own
// (REST's /v1/tools, MCP, the agent): python, shell, and a tool per language, whether or
// not the server offers it (--tool-languages). A kernel's tool may take none of them, in
// any letter case (module cellbox refuses them too).
var BuiltinTools = []string{"python", "shell", api.LanguageJavaScript, api.LanguageTypeScript, api.LanguageR, api.LanguageBash}

// Builtin reports whether name is one of BuiltinTools, in any letter case.
func Builtin(name string) bool {
	return slices.ContainsFunc(BuiltinTools, func(b string) bool { return strings.EqualFold(b, name) })
}

// CheckToolName says why name can't be a tool's: the providers' pattern
// (^[A-Za-z0-9_-]{1,64}$), and not a built-in tool's (BuiltinTools).
func CheckToolName(name string) error {
	if !toolName.MatchString(name) {
		return fmt.Errorf("%q can't be a tool's name: a name is 1 to 64 letters, digits, _ or -", name)
	}
	if Builtin(name) {
		return fmt.Errorf("%q can't be a tool's name: %s are built-in tools", name, strings.Join(BuiltinTools, ", "))
	}
	return nil
}

// Check says what is wrong with a tool set from a guest, which is untrusted, as a whole:
// more tools than MaxTools, or more than MaxToolReport bytes of them. The runner keeps a
// report within both whatever the kernel's code does, so a set past them is a broken
// guest. Each tool is checked by the server (package session), which drops those that
// break a tool's own limits and offers the rest.
func (s *ToolSet) Check() error {
	if len(s.Tools) > MaxTools {
		return fmt.Errorf("%d tools, more than %d", len(s.Tools), MaxTools)
	}
	n := 0
	for _, t := range s.Tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema) + len(t.Source)
	}
	if n > MaxToolReport {
		return fmt.Errorf("tools of %d bytes together, more than %d", n, MaxToolReport)
	}
	return nil
}

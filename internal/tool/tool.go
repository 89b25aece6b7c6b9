// Package tool is the tool set a model sees — the python and shell tools, and beside them a
// session's own tools (functions its code defined with `from cellbox import tool`), their
// names, descriptions and JSON schemas in the OpenAI, Anthropic and MCP shapes — and how a
// call of one is carried out and its result written for a model: concise text, long output
// cut in the middle with a marker, tracebacks kept, files listed, images kept as images.
//
// REST (/v1/tools), the MCP server and the agent loop all use it, so a model sees the same
// tools everywhere. Not for: talking to a model (package llm) or running the loop (agent).
package tool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// Tool names.
const (
	Python = "python"
	Shell  = "shell"
)

// Formats of Format.
const (
	FormatOpenAI    = "openai"
	FormatAnthropic = "anthropic"
	FormatMCP       = "mcp"
)

// Options shape the definitions: the limits the descriptions state, and whether the tools
// take a session_id (MCP, where a stateless client keeps its state by naming the session).
type Options struct {
	TimeoutS  float64 // one call's wall time, stated in the descriptions; 0 leaves it out
	MemoryMB  int     // the session's memory limit; 0 leaves it out
	SessionID bool    // add an optional session_id argument
	// Languages adds a tool for each of these languages (api.LanguageJavaScript,
	// LanguageTypeScript, LanguageR, LanguageBash), named as the language, beside python
	// and shell. Unknown names are left out (CheckLanguages says which).
	Languages []string
}

// languageTools describe the tools of the other languages: what each runs and has.
var languageTools = map[string]struct{ what, code string }{
	api.LanguageJavaScript: {"JavaScript (Node.js) code in a stateful session, like a notebook cell: top-level await, " +
		"require() and import of installed modules work, and variables, functions and imports persist between calls. " +
		"The value of the last expression is shown; console.log anything else you want to see. " +
		"display.html(s), display.svg(s) and display.png(buffer) show rich output.", "The JavaScript code to run."},
	api.LanguageTypeScript: {"TypeScript code (types are stripped, not checked) in the same stateful Node.js session as the javascript tool: " +
		"top-level await and imports work, and what one call declares the next one sees. " +
		"The value of the last expression is shown; console.log anything else you want to see.", "The TypeScript code to run."},
	api.LanguageR: {"R code in a stateful R session, like a notebook cell: variables, functions and loaded libraries persist between calls. " +
		"Visible values are shown as at R's prompt (data frames as tables); plots come back to you as images.", "The R code to run."},
	api.LanguageBash: {"Bash code in a stateful shell: the working directory, variables and functions persist between calls " +
		"(unlike the shell tool, which starts afresh each time). A failing last command is reported as an error with its exit status.", "The Bash code to run."},
}

// CheckLanguages returns an error naming the first of langs that has no tool.
func CheckLanguages(langs []string) error {
	for _, l := range langs {
		if _, ok := languageTools[l]; !ok {
			return fmt.Errorf("no tool for language %.50q: use javascript, typescript, r or bash", l)
		}
	}
	return nil
}

// networkText is what the descriptions say of the network: sessions differ (see
// NetworkNote, which the agent's system prompt carries).
const networkText = "Internet access is only what the session's network policy allows (by default none): " +
	"through the proxy that HTTP_PROXY and HTTPS_PROXY already name; a refused host answers 403 Forbidden from the proxy."

// Definition is one tool: a name, a description written for a model, and the JSON schema
// of its arguments.
type Definition struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
}

// Definitions returns the tool set.
func Definitions(o Options) []Definition {
	var limits []string
	if o.TimeoutS > 0 {
		limits = append(limits, fmt.Sprintf("a call is stopped after %s s", trimFloat(o.TimeoutS)))
	}
	if o.MemoryMB > 0 {
		limits = append(limits, fmt.Sprintf("memory is limited to %d MiB", o.MemoryMB))
	}
	limitText := ""
	if len(limits) > 0 {
		limitText = " Limits: " + strings.Join(limits, "; ") + "."
	}
	py := Definition{
		Name: Python,
		Description: "Run Python 3 code in a stateful IPython session, like a cell of a Jupyter notebook: " +
			"variables, imports and functions persist between calls. Installed: the standard library, numpy, " +
			"pandas, matplotlib and scipy. " + networkText +
			" Files are in " + api.WorkspaceDir + ": the user's files are there, and save the files you make there. " +
			"The value of the last expression is shown, as in a notebook; print() anything else you want to see. " +
			"Show plots with matplotlib and plt.show(); each figure comes back to you as an image. " +
			"Long output is cut in the middle, so print summaries (df.head(), df.describe()) rather than whole data sets." +
			limitText,
		InputSchema: object(map[string]any{
			"code": map[string]any{"type": "string", "description": "The Python code to run."},
		}, "code"),
	}
	sh := Definition{
		Name: Shell,
		Description: "Run a shell command with bash -c in the same sandbox as the python tool, with " +
			api.WorkspaceDir + " as the working directory. Use it for quick file work (ls -la, head, wc -l, file); " +
			"use the python tool for analysis. " + networkText + limitText,
		InputSchema: object(map[string]any{
			"command": map[string]any{"type": "string", "description": "The command line to run with bash -c."},
		}, "command"),
	}
	defs := []Definition{py, sh}
	for _, l := range o.Languages {
		lt, ok := languageTools[l]
		if !ok || slices.ContainsFunc(defs, func(d Definition) bool { return d.Name == l }) {
			continue
		}
		defs = append(defs, Definition{
			Name:        l,
			Description: "Run " + lt.what + " Files are in " + api.WorkspaceDir + ", the working directory. " + networkText + limitText,
			InputSchema: object(map[string]any{"code": map[string]any{"type": "string", "description": lt.code}}, "code"),
		})
	}
	if o.SessionID {
		for _, d := range defs {
			d.InputSchema["properties"].(map[string]any)["session_id"] = map[string]any{
				"type": "string",
				"description": "Optional: the session to run in, as returned in an earlier result. " +
					"Leave it out to use this connection's session.",
			}
		}
	}
	return defs
}

func object(props map[string]any, required ...string) map[string]any {
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

func trimFloat(f float64) string { return strings.TrimSuffix(fmt.Sprintf("%.1f", f), ".0") }

// Format returns the definitions as the given API takes them, ready to paste into a
// request: for openai, the value of Chat Completions' "tools"; for anthropic, the value of
// the Messages API's "tools"; for mcp, a tools/list result.
func Format(defs []Definition, format string) (any, error) {
	switch format {
	case FormatOpenAI:
		out := make([]any, len(defs))
		for i, d := range defs {
			out[i] = map[string]any{"type": "function", "function": map[string]any{
				"name": d.Name, "description": d.Description, "parameters": d.InputSchema,
			}}
		}
		return out, nil
	case FormatAnthropic:
		return defs, nil
	case FormatMCP:
		out := make([]any, len(defs))
		for i, d := range defs {
			out[i] = map[string]any{"name": d.Name, "description": d.Description, "inputSchema": d.InputSchema}
		}
		return map[string]any{"tools": out}, nil
	}
	return nil, fmt.Errorf("unknown tool format %q: use openai, anthropic or mcp", format)
}

// Arguments of the tools, as a model sends them.
type pythonArgs struct {
	Code      string `json:"code"`
	SessionID string `json:"session_id,omitempty"`
}

type shellArgs struct {
	Command   string `json:"command"`
	SessionID string `json:"session_id,omitempty"`
}

// Call is one decoded tool call.
type Call struct {
	ID   string // the model's id of the call, when it has one
	Name string
	// Code is what the call runs: python's code, shell's command line, or a session tool's
	// arguments (a JSON object, compact).
	Code      string
	SessionID string // only when the tools take one
}

// IsSessionTool says whether c calls one of a session's tools rather than python, shell or
// a language's tool.
func (c Call) IsSessionTool() bool {
	_, lang := languageTools[c.Name]
	return c.Name != Python && c.Name != Shell && !lang
}

// Builtin reports whether name is a built-in tool's (python, shell or a language's,
// offered or not), in any letter case. A session's tool never has such a name (the session
// layer refuses it), and no door lets one stand for the other.
func Builtin(name string) bool { return guestproto.Builtin(name) }

// SessionDefinitions are a session's tools (from cellbox import tool) as definitions, to
// offer beside python and shell; one named like a built-in tool (Builtin) is left out.
func SessionDefinitions(tools []api.SessionTool) []Definition {
	defs := make([]Definition, 0, len(tools))
	for _, t := range tools {
		if !Builtin(t.Name) {
			defs = append(defs, Definition{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
		}
	}
	return defs
}

// Decode checks a call of python, shell or one of offered: the other tools the model was
// offered (a language's, a session's; python and shell among them change nothing). A
// language's tool is taken only when offered, and an offered tool named like a built-in
// (Builtin) is never taken as a session's tool. A session tool's arguments must be a JSON
// object; they are passed on as they are, for the session to check against the tool's
// schema. The error is written for the model that made the call.
func Decode(name string, args json.RawMessage, offered ...Definition) (Call, error) {
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage("{}")
	}
	isOffered := slices.ContainsFunc(offered, func(d Definition) bool { return d.Name == name })
	_, lang := languageTools[name]
	switch {
	case name == Python || lang && isOffered:
		var a pythonArgs
		if err := strictUnmarshal(args, &a); err != nil {
			example := "..."
			if name == Python {
				example = "print(1)"
			}
			return Call{}, fmt.Errorf("the %s tool's arguments must be a JSON object like {\"code\": \"%s\"}: %v", name, example, err)
		}
		if strings.TrimSpace(a.Code) == "" {
			return Call{}, fmt.Errorf("the %s tool needs a non-empty \"code\" argument", name)
		}
		return Call{Name: name, Code: a.Code, SessionID: a.SessionID}, nil
	case name == Shell:
		var a shellArgs
		if err := strictUnmarshal(args, &a); err != nil {
			return Call{}, fmt.Errorf("the shell tool's arguments must be a JSON object like {\"command\": \"ls -la\"}: %v", err)
		}
		if strings.TrimSpace(a.Command) == "" {
			return Call{}, fmt.Errorf("the shell tool needs a non-empty \"command\" argument")
		}
		return Call{Name: name, Code: a.Command, SessionID: a.SessionID}, nil
	case isOffered && !Builtin(name):
		var obj map[string]json.RawMessage
		if err := strictUnmarshal(args, &obj); err != nil || obj == nil {
			return Call{}, fmt.Errorf("the %s tool's arguments must be a JSON object of its parameters (see its input schema)", name)
		}
		var b bytes.Buffer
		if err := json.Compact(&b, args); err != nil {
			return Call{}, fmt.Errorf("the %s tool's arguments must be a JSON object of its parameters (see its input schema)", name)
		}
		return Call{Name: name, Code: b.String()}, nil
	}
	names := []string{strconv.Quote(Python), strconv.Quote(Shell)}
	for _, d := range offered {
		if _, lang := languageTools[d.Name]; d.Name != Python && d.Name != Shell && (lang || !Builtin(d.Name)) {
			names = append(names, strconv.Quote(d.Name))
		}
	}
	if len(name) > 64 {
		name = Prefix(name, 64) + "..."
	}
	return Call{}, fmt.Errorf("there is no tool %q; the tools are %s", name, strings.Join(names, ", "))
}

func strictUnmarshal(b []byte, v any) error {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("extra data after the JSON object")
	}
	return nil
}

// ShellCommand is the command request of a shell call.
func ShellCommand(command string, timeoutS float64) api.CommandRequest {
	return api.CommandRequest{Cmd: []string{"bash", "-c", command}, TimeoutS: timeoutS}
}

package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// A session's tools are what its kernel last reported (guestproto.ToolSet). The kernel runs
// user code, so a report is untrusted: every tool is checked again here against the
// contract's limits, and its schema compiled, before anyone sees it; a tool that fails is
// dropped with a log line.

// Limits of a tool (the kernel's module refuses past them too).
const (
	maxTools           = 64
	maxToolDescription = 1024 // characters
	maxToolSchema      = 64 << 10
	maxToolSource      = 256 << 10
)

// toolName is OpenAI's and Anthropic's pattern of a function's name.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// reservedTools are the names of the built-in tools a model sees beside a session's.
var reservedTools = map[string]bool{"python": true, "shell": true}

// sessionTool is a tool as checked: its schema decoded and compiled.
type sessionTool struct {
	guestproto.Tool // Save: kept in the tenant's library (once stored), not the report's wish
	doc             map[string]any
	schema          *jsonschema.Schema
}

func (t *sessionTool) view() api.SessionTool {
	return api.SessionTool{Name: t.Name, Description: t.Description, InputSchema: t.doc, Source: t.Source, Saved: t.Save}
}

// checkTool checks one reported tool; the error says why it is refused. A tool of prev
// (may be nil) with the same schema lends its compiled schema.
func checkTool(t guestproto.Tool, prev *sessionTool) (*sessionTool, error) {
	switch {
	case !toolName.MatchString(t.Name):
		return nil, errors.New("its name is not 1 to 64 of A-Z a-z 0-9 _ -")
	case reservedTools[strings.ToLower(t.Name)]:
		return nil, fmt.Errorf("%s is a built-in tool's name", t.Name)
	case utf8.RuneCountInString(t.Description) > maxToolDescription || !utf8.ValidString(t.Description):
		return nil, fmt.Errorf("its description is not valid text of at most %d characters", maxToolDescription)
	case len(t.Source) > maxToolSource || !utf8.ValidString(t.Source):
		return nil, fmt.Errorf("its source is not valid text of at most %d KiB", maxToolSource>>10)
	case len(t.InputSchema) > maxToolSchema:
		return nil, fmt.Errorf("its input schema is larger than %d KiB", maxToolSchema>>10)
	}
	if prev != nil && bytes.Equal(prev.InputSchema, t.InputSchema) {
		return &sessionTool{Tool: t, doc: prev.doc, schema: prev.schema}, nil
	}
	doc, schema, err := compileSchema(t.InputSchema)
	if err != nil {
		return nil, err
	}
	return &sessionTool{Tool: t, doc: doc, schema: schema}, nil
}

// schemaURL names a tool's schema while it compiles; nothing is ever fetched from it.
const schemaURL = "https://tool.cellbox.invalid/input_schema.json"

// noLoader refuses every reference outside the schema: a tool's schema must stand alone
// (nothing is read from the host's files or the network).
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, errors.New("a tool's schema may refer only within itself")
}

// compileSchema decodes a tool's input schema, an object schema of type "object", and
// compiles it as JSON Schema (draft 2020-12 unless it names another known draft).
func compileSchema(raw json.RawMessage) (map[string]any, *jsonschema.Schema, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, errors.New("its input schema is not JSON")
	}
	doc, ok := v.(map[string]any)
	if !ok || doc["type"] != "object" {
		return nil, nil, errors.New(`its input schema is not of "type": "object"`)
	}
	budget := maxSchemaNodes
	if !expand(doc, doc, &budget, 0) {
		return nil, nil, fmt.Errorf("its input schema has more than %d parts with its references ($ref) expanded, or refers to itself: "+
			"a schema whose checks multiply through references could take the server's time on every call", maxSchemaNodes)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, nil, errors.New("its input schema does not compile")
	}
	schema, err := c.Compile(schemaURL)
	if err != nil {
		return nil, nil, fmt.Errorf("its input schema does not compile: %s", schemaMessage(err))
	}
	return doc, schema, nil
}

// maxSchemaNodes bounds a schema's size with its references expanded: the validator's work
// for one value follows that size, and a chain of references that each name the next twice
// doubles it at every link (1.3 KB of schema took seconds a call).
const maxSchemaNodes = 20000

// expand counts the nodes of v within doc, each "#/..." reference counted as what it points
// to, against budget; false when the budget runs out (a reference cycle does too).
func expand(doc, v any, budget *int, depth int) bool {
	*budget--
	if *budget < 0 || depth > 200 {
		return false
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if ref, ok := e.(string); ok && (k == "$ref" || k == "$dynamicRef") {
				if target, ok := pointer(doc, ref); ok && !expand(doc, target, budget, depth+1) {
					return false
				}
				continue
			}
			if !expand(doc, e, budget, depth+1) {
				return false
			}
		}
	case []any:
		for _, e := range x {
			if !expand(doc, e, budget, depth+1) {
				return false
			}
		}
	}
	return true
}

// pointer resolves a reference within doc ("#/$defs/x"); false for any other.
func pointer(doc any, ref string) (any, bool) {
	p, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, false
	}
	v := doc
	for _, tok := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if p == "" {
			break
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// checkToolSet checks a report; refused is one line per tool dropped (name quoted, why).
// Past maxTools, or a name reported twice, the later ones are dropped. A tool whose schema
// is unchanged since prev keeps its compiled schema.
func checkToolSet(set *guestproto.ToolSet, prev []*sessionTool) (tools []*sessionTool, refused []string) {
	old := map[string]*sessionTool{}
	for _, t := range prev {
		old[t.Name] = t
	}
	seen := map[string]bool{}
	for i, t := range set.Tools {
		name := t.Name
		if len(name) > 80 {
			name = name[:80] + "..."
		}
		var err error
		var st *sessionTool
		switch {
		case len(tools) >= maxTools:
			err = fmt.Errorf("the kernel reported more than %d tools (this is number %d)", maxTools, i+1)
		case seen[t.Name]:
			err = errors.New("the name was reported twice")
		default:
			st, err = checkTool(t, old[t.Name])
		}
		if err != nil {
			refused = append(refused, fmt.Sprintf("%q: %v", name, err))
			continue
		}
		seen[t.Name] = true
		tools = append(tools, st)
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	return tools, refused
}

// maxArgsMessage caps the validator's message in an error; maxArgs a call's arguments,
// whose check costs the server memory and time in their size.
const (
	maxArgsMessage = 2048
	maxArgs        = 256 << 10
)

// check decodes a call's arguments (null or none: {}) and checks them against the schema;
// it returns them as compact JSON for the kernel.
func (t *sessionTool) check(args json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(args)) == 0 || bytes.Equal(bytes.TrimSpace(args), []byte("null")) {
		args = json.RawMessage("{}")
	}
	if len(args) > maxArgs {
		return nil, fmt.Errorf("the arguments are %d KiB of JSON, more than a tool call may take (%d KiB): pass large data as a file in /mnt/data, by its path",
			len(args)>>10, maxArgs>>10)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return nil, errors.New("arguments is not JSON")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("arguments must be a JSON object of the tool's parameters")
	}
	if err := t.schema.Validate(v); err != nil {
		return nil, fmt.Errorf("the arguments do not match %s's input schema: %s", t.Name, schemaMessage(err))
	}
	var b bytes.Buffer
	if err := json.Compact(&b, args); err != nil {
		return nil, errors.New("arguments is not JSON")
	}
	return b.Bytes(), nil
}

// schemaMessage is the validator's message without its first line (which names the
// schema's URL), its causes joined by "; ", cut at maxArgsMessage.
func schemaMessage(err error) string {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) > 1 {
		lines = lines[1:]
	}
	for i, l := range lines {
		lines[i] = strings.TrimLeft(strings.TrimSpace(l), "- ")
	}
	msg := strings.Join(lines, "; ")
	if len(msg) > maxArgsMessage {
		msg = strings.ToValidUTF8(msg[:maxArgsMessage], "") + "..."
	}
	return msg
}

// toolNames lists tools' names for a message; "none" when there are none.
func toolNames(tools []*sessionTool) string {
	if len(tools) == 0 {
		return "none"
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

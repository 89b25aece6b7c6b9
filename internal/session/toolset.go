package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"regexp/syntax"
	"sort"
	"strconv"
	"strings"
	"sync"
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

// sessionTool is a tool as checked: its schema decoded, and compiled when first needed
// (a tool restored with its session, or read from the library, is compiled only when it
// is called: it compiled when it was reported).
type sessionTool struct {
	guestproto.Tool // as the kernel reported it; Save: its code proposes it for the library
	// saved: the API's caller saved it to the tenant's library, or loaded it from there, as
	// it is: a kernel restart defines it again from this Source, the session's own copy.
	// Never set by a report (see toolsReported).
	saved  bool
	doc    map[string]any
	schema *lazySchema
}

// lazySchema is a tool's schema, compiled once on first use.
type lazySchema struct {
	doc    map[string]any
	once   sync.Once
	schema *jsonschema.Schema
	err    error
}

func (l *lazySchema) compiled() (*jsonschema.Schema, error) {
	l.once.Do(func() { l.schema, l.err = compileSchema(l.doc) })
	return l.schema, l.err
}

func (t *sessionTool) view() api.SessionTool {
	return api.SessionTool{Name: t.Name, Description: t.Description, InputSchema: t.doc, Source: t.Source, Saved: t.saved, SaveProposed: t.Save}
}

// same reports whether t and o are one definition: name, description, source and schema
// (the schema as decoded: a copy from another node was encoded again).
func (t *sessionTool) same(o *sessionTool) bool {
	return t.Name == o.Name && t.Description == o.Description && t.Source == o.Source &&
		(bytes.Equal(t.InputSchema, o.InputSchema) || reflect.DeepEqual(t.doc, o.doc))
}

// checkTool checks one tool; the error says why it is refused. A tool of prev (may be nil)
// with the same schema lends its compiled schema. compile: the schema is compiled now (a
// report from the kernel), not at the first call (a tool checked before, kept by the
// server).
func checkTool(t guestproto.Tool, prev *sessionTool, compile bool) (*sessionTool, error) {
	switch {
	case !toolName.MatchString(t.Name):
		return nil, errors.New("its name is not 1 to 64 of A-Z a-z 0-9 _ -")
	case guestproto.Builtin(t.Name): // whatever languages the server offers, in any case
		return nil, fmt.Errorf("%s is a built-in tool's name (%s)", t.Name, strings.Join(guestproto.BuiltinTools, ", "))
	case utf8.RuneCountInString(t.Description) > maxToolDescription || !utf8.ValidString(t.Description):
		return nil, fmt.Errorf("its description is not valid text of at most %d characters", maxToolDescription)
	case len(t.Source) > maxToolSource || !utf8.ValidString(t.Source):
		return nil, fmt.Errorf("its source is not valid text of at most %d KiB", maxToolSource>>10)
	case len(t.InputSchema) > maxToolSchema:
		return nil, fmt.Errorf("its input schema is larger than %d KiB", maxToolSchema>>10)
	}
	if prev != nil && bytes.Equal(prev.InputSchema, t.InputSchema) {
		if compile {
			if _, err := prev.schema.compiled(); err != nil {
				return nil, err
			}
		}
		return &sessionTool{Tool: t, doc: prev.doc, schema: prev.schema}, nil
	}
	doc, err := decodeSchema(t.InputSchema)
	if err != nil {
		return nil, err
	}
	st := &sessionTool{Tool: t, doc: doc, schema: &lazySchema{doc: doc}}
	if compile {
		if _, err := st.schema.compiled(); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// schemaURL names a tool's schema while it compiles; nothing is ever fetched from it.
const schemaURL = "https://tool.cellbox.invalid/input_schema.json"

// noLoader refuses every reference outside the schema: a tool's schema must stand alone
// (nothing is read from the host's files or the network).
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, errors.New("a tool's schema may refer only within itself")
}

// decodeSchema decodes a tool's input schema, an object schema of type "object" of at most
// maxSchemaNodes parts with its references expanded.
func decodeSchema(raw json.RawMessage) (map[string]any, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, errors.New("its input schema is not JSON")
	}
	doc, ok := v.(map[string]any)
	if !ok || doc["type"] != "object" {
		return nil, errors.New(`its input schema is not of "type": "object"`)
	}
	budget := maxSchemaNodes
	if !expand(doc, doc, &budget, 0) {
		return nil, fmt.Errorf("its input schema has more than %d parts with its references ($ref) expanded, or refers to itself: "+
			"a schema whose checks multiply through references could take the server's time on every call", maxSchemaNodes)
	}
	if patternsInsts(doc, maxPatternInsts+1) > maxPatternInsts {
		return nil, errPatterns
	}
	return doc, nil
}

// compileSchema compiles a decoded schema as JSON Schema (draft 2020-12 unless it names
// another known draft). The compiler keeps doc, which is not changed after.
func compileSchema(doc map[string]any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	c.UseRegexpEngine(patternEngine)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, errors.New("its input schema does not compile")
	}
	schema, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("its input schema does not compile: %s", schemaMessage(err))
	}
	return schema, nil
}

// maxPatternInsts bounds the compiled size of a schema's regular expressions together
// ("pattern", "patternProperties"; any "format": "regex" argument alone), in
// instructions of Go's regexp machine, about 60 bytes each as patternEngine compiles them:
// 5000 is 0.3 MiB a tool, and an e-mail address's pattern is about 100. Go's own limit is
// per pattern and large: 64 KiB of "a{1000}|" compiles to tens of MiB.
const maxPatternInsts = 5000

// patternEngine is the schema compiler's regexp engine: a pattern past maxPatternInsts is
// refused, and none is compiled onepass. Go compiles a pattern anchored with ^ of fewer
// than 1000 instructions onepass when it can, which copies every character class's
// ranges into each of its instructions: ^(?:\p{Ll}\p{Lu}?){300}$, 30 bytes, kept 10 MiB.
// A pattern is compiled behind an empty-width test that always holds, (?:\b|\B), which
// changes no match and leaves Go's other machines, whose instructions share the ranges.
func patternEngine(s string) (jsonschema.Regexp, error) {
	re, err := syntax.Parse(s, syntax.Perl)
	if err != nil {
		return nil, err
	}
	// The bound is checked on a parse that is then dropped: compiling it unbounded is
	// the cost the check avoids. Parse itself caps its tree (Go's maxSize), and a
	// pattern's text is within the schema's 64 KiB.
	if progInsts(re, maxPatternInsts+1) > maxPatternInsts {
		return nil, errPatterns
	}
	// s parsed alone, so its parentheses balance: wrapped, it is one group.
	c, err := regexp.Compile(`(?:\b|\B)(?:` + s + `)`)
	if err != nil {
		return nil, err
	}
	return pattern{c, s}, nil
}

var errPatterns = fmt.Errorf("its regular expressions are larger than %d instructions compiled: "+
	"write simpler patterns, or check the text in the tool", maxPatternInsts)

// pattern is a compiled pattern that names itself as written (in the validator's messages).
type pattern struct {
	*regexp.Regexp
	text string
}

func (p pattern) String() string { return p.text }

// patternsInsts adds up the compiled size of the patterns of a decoded schema (the
// strings of its "pattern" keywords, the keys of its "patternProperties"), no further
// than limit; a pattern that does not parse counts nothing (the compiler refuses it).
func patternsInsts(v any, limit int) int {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch p := e.(type) {
			case string:
				if k == "pattern" {
					n += textInsts(p, limit-n)
				}
			case map[string]any:
				if k == "patternProperties" {
					for key := range p {
						n += textInsts(key, limit-n)
					}
				}
			}
			if n += patternsInsts(e, limit-n); n >= limit {
				return limit
			}
		}
	case []any:
		for _, e := range x {
			if n += patternsInsts(e, limit-n); n >= limit {
				return limit
			}
		}
	}
	return min(n, limit)
}

func textInsts(s string, limit int) int {
	re, err := syntax.Parse(s, syntax.Perl)
	if err != nil || limit <= 0 {
		return 0
	}
	return progInsts(re, limit)
}

// progInsts estimates the instructions of re's compiled program, no fewer than it has,
// counting no further than limit.
func progInsts(re *syntax.Regexp, limit int) int {
	return min(limit, insts(re, limit)+2) // a program's fail and match
}

// insts estimates the instructions of re compiled (after Simplify), no fewer, counting no
// further than limit: a repeat {n,m} is its body and its branches, m times.
func insts(re *syntax.Regexp, limit int) int {
	n := 1
	switch re.Op {
	case syntax.OpLiteral:
		n = max(len(re.Rune), 1)
	case syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		n = 2 // a star of what matches empty compiles as (x+)?
	case syntax.OpConcat, syntax.OpAlternate:
		n = max(len(re.Sub), 1)
	case syntax.OpRepeat:
		// x{n,m}: n copies of x, then m-n optional ones (x{n,}: then x*), each optional one
		// x and a branch.
		body := insts(re.Sub[0], limit)
		more := re.Max - re.Min
		if re.Max < 0 {
			more = 1
		}
		if re.Min > 0 && body > limit/re.Min || more > 0 && body+2 > limit/more {
			return limit
		}
		return min(limit, re.Min*body+more*(body+2)+1)
	}
	for _, sub := range re.Sub {
		if n += insts(sub, limit); n >= limit {
			return limit
		}
	}
	return n
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
// is unchanged since prev keeps its compiled schema. compile: as checkTool's.
func checkToolSet(set *guestproto.ToolSet, prev []*sessionTool, compile bool) (tools []*sessionTool, refused []string) {
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
			st, err = checkTool(t, old[t.Name], compile)
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
// it returns the checked value as compact JSON for the kernel.
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
	schema, err := t.schema.compiled()
	if err != nil {
		return nil, fmt.Errorf("%s's input schema no longer compiles (%s): define the tool again", t.Name, err)
	}
	if err := schema.Validate(v); err != nil {
		return nil, fmt.Errorf("the arguments do not match %s's input schema: %s", t.Name, schemaMessage(err))
	}
	if err := kernelNumbers(v); err != nil {
		return nil, err
	}
	// The kernel gets the value checked, encoded again, not the caller's text, which
	// Python would read otherwise: a lone surrogate (\ud800) Go read as U+FFFD, a key given
	// twice.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, errors.New("arguments is not JSON")
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// maxNumberText bounds a number's text in arguments: Python refuses to read an integer of
// more than 4300 digits, and no parameter needs one.
const maxNumberText = 1000

// kernelNumbers refuses a number of v that the kernel would not read as it reads here: a
// float past float64's range (Python reads it as inf, which the schema never allowed) or
// one of more than maxNumberText characters.
func kernelNumbers(v any) error {
	switch x := v.(type) {
	case json.Number:
		if len(x) > maxNumberText {
			return fmt.Errorf("a number of the arguments is %d characters long; at most %d", len(x), maxNumberText)
		}
		if strings.ContainsAny(string(x), ".eE") {
			if f, err := strconv.ParseFloat(string(x), 64); err != nil || math.IsInf(f, 0) {
				return fmt.Errorf("the number %.40s of the arguments is out of range for a float", string(x))
			}
		}
	case map[string]any:
		for _, e := range x {
			if err := kernelNumbers(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := kernelNumbers(e); err != nil {
				return err
			}
		}
	}
	return nil
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

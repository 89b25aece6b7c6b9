package guest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// run executes code with opts and returns the result and the tool set it reported (nil:
// none).
func (g *guestT) run(t *testing.T, code string, quiet bool) (*api.ExecuteResult, *guestproto.ToolSet) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var tools *guestproto.ToolSet
	r, err := g.ExecuteWith(ctx, api.ExecuteRequest{Code: code, TimeoutS: 30}, guestproto.ExecuteOptions{
		Quiet: quiet,
		OnTools: func(ts guestproto.ToolSet) {
			if tools != nil {
				t.Errorf("tools reported twice")
			}
			tools = &ts
		},
	})
	if err != nil {
		t.Fatalf("execute %q: %v", code, err)
	}
	return r, tools
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// toolResult is the value of the tool-result output of r, and the other outputs.
func toolResult(t *testing.T, r *api.ExecuteResult) (map[string]any, []api.Output) {
	t.Helper()
	var res map[string]any
	var rest []api.Output
	for _, o := range r.Outputs {
		if v, ok := o.Data[guestproto.ToolResultMIME]; ok {
			if res != nil || o.Type != api.OutputDisplayData || len(o.Data) != 1 {
				t.Errorf("tool result output %+v (one display_data of one MIME wanted)", o)
			}
			res, _ = v.(map[string]any)
			continue
		}
		rest = append(rest, o)
	}
	return res, rest
}

func names(ts *guestproto.ToolSet) string {
	var n []string
	for _, t := range ts.Tools {
		n = append(n, t.Name)
	}
	return strings.Join(n, ",")
}

// Tools defined in a kernel are reported on the execute stream when they change, called and
// loaded by quiet runs that leave the execution count and the history alone.
func TestTools(t *testing.T) {
	g := startKernelGuest(t, testConfig())
	const define = `from cellbox import tool

@tool
def add(a: int, b: int = 2) -> int:
    """Adds two numbers.

    Args:
        a: the first
        b: the second
    """
    print("adding", a, b)
    return a + b
`
	r, ts := g.run(t, "x = 1", false)
	if r.Status != api.StatusOK || r.ExecutionCount != 1 || ts != nil {
		t.Fatalf("a cell without tools: %+v, tools %+v", r, ts)
	}

	r, ts = g.run(t, define, false)
	if r.Status != api.StatusOK || r.ExecutionCount != 2 || ts == nil || names(ts) != "add" {
		t.Fatalf("a cell that defines a tool: %+v, tools %+v", r, ts)
	}
	add := ts.Tools[0]
	var schema map[string]any
	if err := json.Unmarshal(add.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if add.Description != "Adds two numbers." || add.Save || !strings.Contains(add.Source, "def add(a: int, b: int = 2)") ||
		fmt.Sprint(schema["required"]) != "[a]" || schema["additionalProperties"] != false {
		t.Errorf("tool %+v, schema %v", add, schema)
	}

	t.Run("the same definition again reports nothing", func(t *testing.T) {
		if r, ts := g.run(t, define, false); r.Status != api.StatusOK || ts != nil {
			t.Errorf("%+v, tools %+v", r, ts)
		}
	})

	count := func(t *testing.T) int {
		r, _ := g.run(t, "None", false)
		return r.ExecutionCount
	}
	t.Run("a quiet call keeps the count and the outputs", func(t *testing.T) {
		before := count(t)
		r, ts := g.run(t, fmt.Sprintf(`__import__("cellbox")._call("add", %q)`, b64(`{"a": 40}`)), true)
		if r.Status != api.StatusOK || r.ExecutionCount != before || ts != nil {
			t.Errorf("quiet call: %+v, tools %+v (count before %d)", r, ts, before)
		}
		res, rest := toolResult(t, r)
		if fmt.Sprint(res) != "map[value:42]" || len(rest) != 1 || rest[0].Text != "adding 40 2\n" {
			t.Errorf("result %v, outputs %+v", res, rest)
		}
		if after := count(t); after != before+1 {
			t.Errorf("the cell after a quiet call has count %d, want %d", after, before+1)
		}
		// In holds "" and each counted cell, this one included: not the quiet one.
		if r, _ := g.run(t, "print(len(In))", false); text(r, "stdout") != fmt.Sprintf("%d\n", r.ExecutionCount+1) {
			t.Errorf("history: In has %q entries at cell %d", text(r, "stdout"), r.ExecutionCount)
		}
	})

	t.Run("a quiet call that raises", func(t *testing.T) {
		r, _ := g.run(t, `from cellbox import tool
@tool
def boom(n: int):
    raise ValueError("no good: %d" % n)
`, false)
		if r.Status != api.StatusOK {
			t.Fatalf("%+v", r)
		}
		r, _ = g.run(t, fmt.Sprintf(`__import__("cellbox")._call("boom", %q)`, b64(`{"n": 7}`)), true)
		res, rest := toolResult(t, r)
		if r.Status != api.StatusError || res != nil || len(rest) != 1 || rest[0].EName != "ValueError" || rest[0].EValue != "no good: 7" {
			t.Fatalf("%+v", r)
		}
		if tb := strings.Join(rest[0].Traceback, "\n"); strings.Contains(tb, "<cellbox>") || strings.Contains(tb, "in _call") || !strings.Contains(tb, "no good") {
			t.Errorf("traceback shows cellbox's own frames, or not the tool's:\n%s", tb)
		}
	})

	t.Run("an unknown tool names the others", func(t *testing.T) {
		r, _ := g.run(t, `__import__("cellbox")._call("nope", "e30=")`, true)
		if r.Status != api.StatusError || len(r.Outputs) != 1 || r.Outputs[0].EName != "LookupError" ||
			!strings.Contains(r.Outputs[0].EValue, "add, boom") {
			t.Errorf("%+v", r)
		}
	})

	t.Run("a saved tool loaded", func(t *testing.T) {
		// As cellbox writes a saved tool's source: loading it gives the same.
		src := "from cellbox import tool\nimport math\n\n\n@tool(save=True)\ndef hyp(a: float, b: float) -> float:\n    return math.hypot(a, b)\n"
		r, ts := g.run(t, fmt.Sprintf(`__import__("cellbox")._load(%q)`, b64(src)), true)
		if r.Status != api.StatusOK || ts == nil || names(ts) != "add,boom,hyp" || !ts.Tools[2].Save || ts.Tools[2].Source != src {
			t.Fatalf("load: %+v, tools %+v", r, ts)
		}
		// Callable from code, and through _call.
		if r, _ := g.run(t, "print(hyp(3, 4))", false); text(r, "stdout") != "5.0\n" {
			t.Errorf("the loaded tool from code: %+v", r)
		}
		r, _ = g.run(t, fmt.Sprintf(`__import__("cellbox")._call("hyp", %q)`, b64(`{"a": 6, "b": 8}`)), true)
		if res, _ := toolResult(t, r); fmt.Sprint(res) != "map[value:10]" {
			t.Errorf("the loaded tool called: %+v", r)
		}
	})

	t.Run("removing one reports the rest", func(t *testing.T) {
		r, ts := g.run(t, "import cellbox; cellbox.remove_tool('boom')", false)
		if r.Status != api.StatusOK || ts == nil || names(ts) != "add,hyp" {
			t.Errorf("%+v, tools %+v", r, ts)
		}
	})

	t.Run("a tampered registry is reported within the guest's bounds", func(t *testing.T) {
		// Code may put anything in module cellbox's registry; the runner reports at most
		// MaxTools tools of at most MaxToolReport bytes (non-ASCII text is sent escaped,
		// six bytes a character), and ExecuteWith, which refuses more, takes them.
		const tamper = `import cellbox
class T:
    def __init__(self, i, src):
        self.i, self.src = i, src
    def report(self):
        return {"name": "t%d" % self.i, "description": "", "input_schema": {"type": "object"}, "source": self.src, "save": False}
for i in range(COUNT):
    cellbox._registry["t%d" % i] = T(i, SOURCE)
cellbox._version += 1
`
		r, ts := g.run(t, strings.NewReplacer("COUNT", "100", "SOURCE", `""`).Replace(tamper), false)
		if r.Status != api.StatusOK || ts == nil || len(ts.Tools) != guestproto.MaxTools {
			t.Fatalf("100 small tools: %+v, %d tools", r, len(ts.Tools))
		}
		r, ts = g.run(t, strings.NewReplacer("COUNT", "20", "SOURCE", `"é" * 200000`).Replace(tamper), false)
		if r.Status != api.StatusOK || ts == nil || len(ts.Tools) == 0 || len(ts.Tools) > 5 {
			t.Fatalf("tools of 1.2 MB each: %+v, tools %v", r, ts != nil)
		}
		g.run(t, "cellbox._registry.clear(); cellbox._version += 1", false)
	})

	t.Run("no report from a kernel that died after it", func(t *testing.T) {
		r, ts := g.run(t, `import os
os.write(4, b'{"t": "tools", "tools": [{"name": "ghost", "description": "", "input_schema": {"type": "object"}, "source": "", "save": false}]}\n')
os._exit(1)`, false)
		if !r.KernelRestarted || ts != nil {
			t.Errorf("%+v, tools %+v", r, ts)
		}
	})

	t.Run("a restart drops them", func(t *testing.T) {
		if err := g.Restart(context.Background()); err != nil {
			t.Fatal(err)
		}
		r, ts := g.run(t, "import cellbox; print(cellbox.tools())", false)
		if text(r, "stdout") != "[]\n" || ts != nil {
			t.Errorf("%+v, tools %+v", r, ts)
		}
	})
}

package guestproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

const okResult = `{"result":{"status":"ok","execution_count":3}}` + "\n"

func toolsLine(tools ...string) string {
	return `{"tools":{"tools":[` + strings.Join(tools, ",") + `]}}` + "\n"
}

func aTool(name string) string {
	return fmt.Sprintf(`{"name":%q,"description":"d","input_schema":{"type":"object","properties":{}},"source":"def f(): pass"}`, name)
}

// ExecuteWith hands the tools a run reported to OnTools, sends Quiet, and refuses tool sets
// past a report's bounds, which only a broken guest sends.
func TestExecuteTools(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		tools  string // the names OnTools got, "-" for no call
		err    error
	}{
		{"none", okResult, "-", nil},
		{"reported", toolsLine(aTool("a"), aTool("b-2")) + okResult, "a,b-2", nil},
		{"all removed", toolsLine() + okResult, "", nil},
		{"null list", `{"tools":{"tools":null}}` + "\n" + okResult, "", nil},
		{"after outputs", `{"output":{"type":"stream","name":"stdout","text":"x"}}` + "\n" + toolsLine(aTool("a")) + okResult, "a", nil},
		{"twice", toolsLine(aTool("a")) + toolsLine(aTool("a")) + okResult, "-", errdefs.ErrUnavailable},
		// A tool's own limits are the server's to check, tool by tool (package session).
		{"bad name", toolsLine(aTool("a b")) + okResult, "a b", nil},
		{"a name twice", toolsLine(aTool("a"), aTool("a")) + okResult, "a,a", nil},
		{"schema not an object", toolsLine(`{"name":"a","input_schema":{"type":"string"}}`) + okResult, "a", nil},
		{"too many", toolsLine(strings.Split(strings.Repeat(aTool("x")+"\x00", 65), "\x00")[:65]...) + okResult, "-", errdefs.ErrUnavailable},
		{"too large", toolsLine(fmt.Sprintf(`{"name":"a","input_schema":{"type":"object"},"source":%q}`, strings.Repeat("x", MaxToolReport))) + okResult, "-", errdefs.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var quiet bool
			c := fakeGuest(t, func(req Request) []byte {
				quiet = req.Quiet
				return []byte(tt.answer)
			})
			got := "-"
			r, err := c.ExecuteWith(context.Background(), api.ExecuteRequest{Code: "1", TimeoutS: 5}, ExecuteOptions{
				Quiet: true,
				OnTools: func(ts ToolSet) {
					var n []string
					for _, t := range ts.Tools {
						n = append(n, t.Name)
					}
					if ts.Tools == nil {
						n = []string{"nil!"}
					}
					got = strings.Join(n, ",")
				},
			})
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("error %v, want %v", err, tt.err)
			}
			if got != tt.tools || !quiet {
				t.Errorf("tools %q, want %q (quiet sent: %v)", got, tt.tools, quiet)
			}
			if err == nil && r.ExecutionCount != 3 {
				t.Errorf("result %+v", r)
			}
		})
	}
	t.Run("Execute drops them", func(t *testing.T) {
		c := fakeGuest(t, func(Request) []byte { return []byte(toolsLine(aTool("a")) + okResult) })
		if r, err := c.Execute(context.Background(), api.ExecuteRequest{Code: "1", TimeoutS: 5}, nil); err != nil || r.Status != api.StatusOK {
			t.Errorf("%+v, %v", r, err)
		}
	})
	t.Run("not where they don't belong", func(t *testing.T) {
		c := fakeGuest(t, func(Request) []byte { return []byte(toolsLine(aTool("a")) + `{"ok":true}` + "\n") })
		if err := c.Restart(context.Background()); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("tools answering a restart: %v", err)
		}
	})
}

func TestCheckToolName(t *testing.T) {
	for name, ok := range map[string]bool{
		"a": true, "add_2-x": true, strings.Repeat("x", 64): true,
		"": false, "a b": false, strings.Repeat("x", 65): false, "python": false, "Shell": false, "é": false, "a.b": false,
		// Every language's tool, in any case, whether or not a server offers it.
		"bash": false, "Bash": false, "PYTHON": false, "r": false, "R": false, "JavaScript": false, "typescript": false,
		"bash_2": true, "rr": true, "pythons": true,
	} {
		if err := CheckToolName(name); (err == nil) != ok {
			t.Errorf("CheckToolName(%q) = %v", name, err)
		}
	}
}

// FuzzToolSetCheck: whatever a guest sends as tools, Check never panics, and a set it takes
// is within the bounds of a report.
func FuzzToolSetCheck(f *testing.F) {
	f.Add([]byte(`{"tools":[` + aTool("a") + `]}`))
	f.Add([]byte(`{"tools":[{"name":"python","input_schema":{"type":"object"}}]}`))
	f.Add([]byte(`{"tools":[{"name":"a","input_schema":"x"},{"name":"a"}]}`))
	f.Add([]byte(`{"tools":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ts ToolSet
		if json.Unmarshal(b, &ts) != nil || ts.Check() != nil {
			return
		}
		if len(ts.Tools) > MaxTools {
			t.Fatalf("%d tools taken", len(ts.Tools))
		}
		n := 0
		for _, tl := range ts.Tools {
			n += len(tl.Name) + len(tl.Description) + len(tl.InputSchema) + len(tl.Source)
		}
		if n > MaxToolReport {
			t.Fatalf("%d bytes of tools taken", n)
		}
	})
}

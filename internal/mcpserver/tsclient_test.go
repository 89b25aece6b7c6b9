package mcpserver

// The official MCP TypeScript SDK's client (testdata/tsclient) and a session's tools, over
// streamable HTTP and HTTP+SSE. cmd/cellbox's tests run the same scripts over stdio.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/testbin"
)

// tsToolsReport is what testdata/tsclient/tools.mjs prints.
type tsToolsReport struct {
	ListChangedCapability bool     `json:"listChangedCapability"`
	Before                []string `json:"before"`
	DefineError           string   `json:"defineError"`
	Changes               int      `json:"changes"`
	After                 []string `json:"after"`
	Greet                 *struct {
		Description string         `json:"description"`
		InputSchema map[string]any `json:"inputSchema"`
	} `json:"greet"`
	Call, Bad struct {
		IsError bool     `json:"isError"`
		Texts   []string `json:"texts"`
	}
	Error string `json:"error"`
}

func TestTypeScriptClientSessionTools(t *testing.T) {
	node := testbin.NeedProgram(t, "node", "nodejs")
	dir, err := filepath.Abs(filepath.Join("testdata", "tsclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		testbin.Missing(t, "needs the MCP TypeScript SDK: run npm ci in %s (make test does)", dir)
	}
	s, _ := newServer(t)
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.Handler())
	mux.Handle("/mcp/sse", s.SSE())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	t.Cleanup(s.Close) // before hs.Close: ends the open event streams

	for _, tr := range []struct{ name, mode, path string }{
		{"streamable HTTP", "http", "/mcp"},
		{"HTTP+SSE", "sse", "/mcp/sse"},
	} {
		t.Run(tr.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "tools.mjs", tr.mode, hs.URL+tr.path)
			cmd.Dir = dir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var r tsToolsReport
			if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil || err != nil || r.Error != "" {
				t.Fatalf("client: %v, %v\nreport: %s\nstderr: %s", err, jerr, &stdout, &stderr)
			}
			checkTSTools(t, r)
		})
	}
}

// checkTSTools checks a report of tools.mjs.
func checkTSTools(t *testing.T, r tsToolsReport) {
	t.Helper()
	if !r.ListChangedCapability || !slices.Equal(r.Before, []string{"python", "shell"}) || r.DefineError != "" {
		t.Errorf("before: listChanged capability %v, tools %v, defining: %q", r.ListChangedCapability, r.Before, r.DefineError)
	}
	if r.Changes == 0 || !slices.Contains(r.After, "greet") || r.Greet == nil {
		t.Fatalf("after list_changed (%d): tools %v", r.Changes, r.After)
	}
	props, _ := r.Greet.InputSchema["properties"].(map[string]any)
	if !strings.HasPrefix(r.Greet.Description, "Greet someone.") || props["name"] == nil || props["times"] == nil {
		t.Errorf("greet listed as %+v", r.Greet)
	}
	if r.Call.IsError || len(r.Call.Texts) != 2 || r.Call.Texts[0] != `"hello ada hello ada"` || !strings.Contains(r.Call.Texts[1], "greeting ada") {
		t.Errorf("greet(ada, 2): %+v", r.Call)
	}
	if !r.Bad.IsError || len(r.Bad.Texts) != 1 || !strings.Contains(r.Bad.Texts[0], "do not match greet's input schema") {
		t.Errorf("greet with a bad argument: %+v", r.Bad)
	}
}

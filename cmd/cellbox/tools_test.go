package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/testbin"
)

func TestToolsCommand(t *testing.T) {
	tests := []struct {
		args  []string
		check func(t *testing.T, out []byte)
	}{
		{[]string{"tools"}, func(t *testing.T, out []byte) {
			var v []struct {
				Type     string
				Function struct{ Name, Description string }
			}
			if err := json.Unmarshal(out, &v); err != nil || len(v) != 2 || v[0].Type != "function" || v[0].Function.Name != "python" {
				t.Errorf("openai: %v %s", err, out)
			}
		}},
		{[]string{"tools", "--format", "anthropic", "--exec-timeout", "2m", "--memory-mb", "512"}, func(t *testing.T, out []byte) {
			var v []struct {
				Name, Description string
				InputSchema       map[string]any `json:"input_schema"`
			}
			if err := json.Unmarshal(out, &v); err != nil || len(v) != 2 || v[1].Name != "shell" || v[1].InputSchema["type"] != "object" {
				t.Fatalf("anthropic: %v %s", err, out)
			}
			if !strings.Contains(v[0].Description, "stopped after 120 s") || !strings.Contains(v[0].Description, "512 MiB") {
				t.Errorf("the limits given are not stated: %s", v[0].Description)
			}
		}},
		{[]string{"tools", "--format", "mcp"}, func(t *testing.T, out []byte) {
			if !strings.Contains(string(out), `"inputSchema"`) || !strings.Contains(string(out), `"session_id"`) {
				t.Errorf("mcp: %s", out)
			}
		}},
	}
	for _, tt := range tests {
		out, err := exec.Command(testbin.Cellbox(t), tt.args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		tt.check(t, out)
	}
	cmd := exec.Command(testbin.Cellbox(t), "tools", "--format", "gemini")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "openai, anthropic or mcp") {
		t.Errorf("bad format: %v %s", err, out)
	}
}

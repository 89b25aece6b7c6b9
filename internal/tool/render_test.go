package tool

import (
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
)

func TestPrefix(t *testing.T) {
	for _, tt := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 2, "ab"},
		{"aé", 2, "a"}, // é is two bytes: not cut in half
		{"éé", 3, "é"},
		{"abc", 0, ""},
	} {
		if got := Prefix(tt.s, tt.n); got != tt.want {
			t.Errorf("Prefix(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

func TestRenderToolCall(t *testing.T) {
	printed := api.Output{Type: api.OutputStream, Name: "stdout", Text: "computing\n"}
	plot := api.Output{Type: api.OutputDisplayData, Data: map[string]any{"image/png": png1x1, "text/plain": "<Figure>"}}
	raised := api.Output{Type: api.OutputError, EName: "ValueError", EValue: "w must be positive",
		Traceback: []string{"Traceback (most recent call last):", "ValueError: w must be positive"}}
	tests := []struct {
		name    string
		res     api.ToolCallResult
		want    string
		isError bool
		images  int
	}{
		{"a value", api.ToolCallResult{Status: api.StatusOK, HasValue: true, Value: 7.5}, "Returned: 7.5", false, 0},
		{"null is a value", api.ToolCallResult{Status: api.StatusOK, HasValue: true}, "Returned: null", false, 0},
		{"JSON, not escaped for HTML", api.ToolCallResult{Status: api.StatusOK, HasValue: true, Value: map[string]any{"a<b": []any{1.0, "x&y"}}},
			`Returned: {"a<b":[1,"x&y"]}`, false, 0},
		{"what JSON cannot hold", api.ToolCallResult{Status: api.StatusOK, Text: "{1, 2}", ValueType: "set"},
			"Returned a value of type set that JSON cannot hold; its repr: {1, 2}", false, 0},
		{"prints and plots after the value", api.ToolCallResult{Status: api.StatusOK, HasValue: true, Value: "ok", Outputs: []api.Output{printed, plot},
			Files: []api.FileChange{{Path: "/mnt/data/a.png", Size: 10, Change: api.ChangeCreated}}},
			"Returned: \"ok\"\ncomputing\n[image 1: image/png, attached]\nFiles changed:\n- /mnt/data/a.png (created, 10 B)", false, 1},
		{"a tool that raised", api.ToolCallResult{Status: api.StatusError, Outputs: []api.Output{printed, raised}},
			"computing\nTraceback (most recent call last):\nValueError: w must be positive", true, 0},
		{"a timeout", api.ToolCallResult{Status: api.StatusTimeout, Message: "stopped after 5 s"}, "Status: timeout: stopped after 5 s", true, 0},
		{"nothing at all", api.ToolCallResult{Status: api.StatusOK}, "(the tool ran, printed nothing and returned no value)", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RenderToolCall(&tt.res, RenderLimits{})
			if got.Text != tt.want || got.IsError != tt.isError || len(got.Images) != tt.images {
				t.Errorf("got %q (isError %v, %d images)\nwant %q (isError %v, %d images)", got.Text, got.IsError, len(got.Images), tt.want, tt.isError, tt.images)
			}
		})
	}
}

// A big value is cut in the middle like printed output, and is cut apart from the prints.
func TestRenderToolCallLimits(t *testing.T) {
	long := strings.Repeat("0123456789\n", 1000)
	res := &api.ToolCallResult{Status: api.StatusOK, HasValue: true, Value: strings.Split(long, "\n"),
		Outputs: []api.Output{{Type: api.OutputStream, Name: "stdout", Text: long}}}
	got := RenderToolCall(res, RenderLimits{MaxText: 1000}).Text
	if len(got) > 2500 || strings.Count(got, "cut from the middle") != 2 || !strings.HasPrefix(got, `Returned: ["0123456789",`) {
		t.Errorf("%d bytes:\n%s", len(got), got)
	}
	repr := RenderToolCall(&api.ToolCallResult{Status: api.StatusOK, Text: long, ValueType: "ndarray"}, RenderLimits{MaxText: 1000}).Text
	if len(repr) > 1300 || !strings.Contains(repr, "cut from the middle") {
		t.Errorf("repr: %d bytes:\n%s", len(repr), repr)
	}
}

// A file's link, when the request asked for links, is in the model's result for it to hand on.
func TestRenderFileLinks(t *testing.T) {
	res := &api.ExecuteResult{Status: api.StatusOK, Files: []api.FileChange{
		{Path: "/mnt/data/a.png", Size: 10, Change: api.ChangeCreated, URL: "https://cb.example/v1/sessions/s/files/a.png?expires=1&signature=x"},
		{Path: "/mnt/data/b.txt", Size: 3, Change: api.ChangeModified},
	}}
	want := "Files changed:\n- /mnt/data/a.png (created, 10 B), link for the user: https://cb.example/v1/sessions/s/files/a.png?expires=1&signature=x\n- /mnt/data/b.txt (modified, 3 B)"
	if got := RenderExecute(res, RenderLimits{}).Text; !strings.Contains(got, want) {
		t.Errorf("got %q\nwant it to hold %q", got, want)
	}
}

package guest

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

func TestCompleteUTF8(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"é", 2},
		{"é"[:1], 0},
		{"a✓"[:3], 1},
		{"a𝄞"[:4], 1},
		{"a𝄞", 5},
		{"\xff\xff", 2}, // not UTF-8: sent as it is
	}
	for _, tt := range tests {
		if got := completeUTF8([]byte(tt.in)); got != tt.want {
			t.Errorf("completeUTF8(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestBudgetText(t *testing.T) {
	b := newBudget(10, 100)
	if got := string(b.text([]byte("hello"), "stdout")); got != "hello" {
		t.Errorf("got %q", got)
	}
	got := string(b.text([]byte("ééééé"), "stderr")) // 10 bytes, 5 fit: cut at a rune
	if got != "éé" || !utf8.ValidString(got) {
		t.Errorf("got %q", got)
	}
	if got := b.text([]byte("more"), "stdout"); len(got) != 0 {
		t.Errorf("after the cap: %q", got)
	}
	m := b.marker()
	if !b.truncated() || m == nil || m.Name != "stderr" || !strings.Contains(m.Text, "10 bytes of text not shown") {
		t.Errorf("marker %+v", m)
	}
	if newBudget(10, 10).marker() != nil {
		t.Error("marker without a cut")
	}
}

func TestBudgetRich(t *testing.T) {
	b := newBudget(100, 10)
	small := api.Output{Type: api.OutputDisplayData, Data: map[string]any{"image/png": "12345", "text/plain": "<img>"}}
	if !b.rich(&small) || small.Data["image/png"] != "12345" {
		t.Errorf("small: %+v", small)
	}
	big := api.Output{Type: api.OutputDisplayData, Data: map[string]any{"text/html": "123456", "text/plain": "<big>"},
		Metadata: map[string]any{"x": 1}}
	if !b.rich(&big) || big.Data["text/html"] != nil || big.Data["text/plain"] != "<big>" || big.Metadata != nil {
		t.Errorf("big: %+v", big)
	}
	only := api.Output{Type: api.OutputDisplayData, Data: map[string]any{"image/png": "123456789"}}
	if b.rich(&only) {
		t.Errorf("an output with nothing left is sent: %+v", only)
	}
	if m := b.marker(); m == nil || !strings.Contains(m.Text, "2 rich output(s)") {
		t.Errorf("marker %+v", m)
	}
	e := api.Output{Type: api.OutputError, EName: "E", EValue: strings.Repeat("v", 5000), Traceback: []string{strings.Repeat("a", 80), strings.Repeat("b", 80), "E: v"}}
	b.rich(&e)
	if len(e.EValue) > maxEValue+3 || e.Traceback[len(e.Traceback)-1] != "E: v" || !strings.Contains(e.Traceback[0], "cut") {
		t.Errorf("error %d %q", len(e.EValue), e.Traceback)
	}
}

// TestBudgetToolResult: a tool's return value comes through after the plots that used up
// the rich budget, once a run and within MaxToolResult.
func TestBudgetToolResult(t *testing.T) {
	b := newBudget(100, 10)
	plot := api.Output{Type: api.OutputDisplayData, Data: map[string]any{"image/png": "1234567890"}}
	if !b.rich(&plot) {
		t.Fatal("the plot within the budget was cut")
	}
	result := func(v any) api.Output {
		return api.Output{Type: api.OutputDisplayData, Data: map[string]any{guestproto.ToolResultMIME: map[string]any{"value": v}}}
	}
	big := result(strings.Repeat("x", guestproto.MaxToolResult))
	if b.rich(&big) {
		t.Error("a return value past MaxToolResult went through")
	}
	// Measured as the module measures it: "<" is one byte, not six.
	value := result(strings.Repeat("<a>", 300<<10))
	if !b.rich(&value) || value.Data[guestproto.ToolResultMIME] == nil {
		t.Errorf("the return value after a budget's worth of plots was cut: %+v", value.Data)
	}
	again := result("again")
	if b.rich(&again) {
		t.Error("a second return value went through outside the budget")
	}
}

func TestDiffIncomplete(t *testing.T) {
	a := snapshot{files: map[string]fileState{"same": {size: 1}, "gone": {size: 2}, "mod": {size: 3}}, complete: true}
	b := snapshot{files: map[string]fileState{"same": {size: 1}, "new": {size: 4}, "mod": {size: 5}}, complete: true}
	if got := diff(a, b); len(got) != 3 || got[0].Path != "/mnt/data/gone" || got[1].Change != api.ChangeModified || got[2].Change != api.ChangeCreated {
		t.Errorf("diff = %+v", got)
	}
	b.complete = false // only what both saw is compared
	if got := diff(a, b); len(got) != 1 || got[0].Path != "/mnt/data/mod" {
		t.Errorf("diff of an incomplete snapshot = %+v", got)
	}
}

// A file of the same size is modified when its mtime, inode or mode is not the same.
func TestDiffSameSize(t *testing.T) {
	was := fileState{size: 1, mtime: 10, ino: 20, mode: 0o100644}
	for name, now := range map[string]fileState{
		"mtime": {size: 1, mtime: 11, ino: 20, mode: 0o100644},
		"inode": {size: 1, mtime: 10, ino: 21, mode: 0o100644},
		"mode":  {size: 1, mtime: 10, ino: 20, mode: 0o100755},
	} {
		a := snapshot{files: map[string]fileState{"f": was}, complete: true}
		b := snapshot{files: map[string]fileState{"f": now}, complete: true}
		if got := diff(a, b); len(got) != 1 || got[0].Change != api.ChangeModified {
			t.Errorf("%s changed: diff = %+v", name, got)
		}
		if got := diff(a, a); len(got) != 0 {
			t.Errorf("nothing changed: diff = %+v", got)
		}
	}
}

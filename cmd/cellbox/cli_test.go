package main

// Hermetic tests of the CLI's pieces; run_test.go runs the binary itself.

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
)

func TestComplete(t *testing.T) {
	tests := []struct {
		block string // lines joined by "|"
		want  bool
	}{
		{"x = 1", true},
		{"print('(')", true},
		{"s = ']' # [", true},
		{"if x:", false},
		{"if x:|    y = 1", false},
		{"if x:|    y = 1|", true},
		{"for i in range(3):  # loop|    print(i)|", true},
		{"x = [1,", false},
		{"x = [1,|2]", true},
		{"f(a,|  b=')')", true},
		{`s = """doc`, false},
		{`s = """doc|more"""`, true},
		{`x = 1 + \`, false},
		{"d = {'a': 1}", true},
	}
	for _, tt := range tests {
		if got := complete(strings.Split(tt.block, "|")); got != tt.want {
			t.Errorf("complete(%q) = %v, want %v", tt.block, got, tt.want)
		}
	}
}

func TestSaveIn(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	outside := filepath.Join(dir, "outside")
	os.Mkdir(outside, 0o755)
	write := func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }
	if err := saveIn(out, "a/b/c.txt", write); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "a", "b", "c.txt")); string(b) != "x" {
		t.Fatalf("saved %q", b)
	}
	os.Symlink(outside, filepath.Join(out, "link"))
	for _, bad := range []string{"../x", "/etc/x", "a/../../x", "", "link/x", `a\b`, "a\x00b"} {
		if err := saveIn(out, bad, write); err == nil {
			t.Errorf("saveIn(%q) wrote a file", bad)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("a file landed outside the out folder: %v", entries)
	}
	// A failed download leaves no partial file behind.
	failing := func(w io.Writer) error { io.WriteString(w, "part"); return io.ErrUnexpectedEOF }
	if err := saveIn(out, "partial.bin", failing); err == nil {
		t.Error("a failed write was not reported")
	}
	if _, err := os.Stat(filepath.Join(out, "partial.bin")); !os.IsNotExist(err) {
		t.Errorf("partial file kept: %v", err)
	}
}

func TestShowOutputs(t *testing.T) {
	var stdout, stderr bytes.Buffer
	s := &session{outDir: t.TempDir(), stdout: &stdout, stderr: &stderr}
	s.show(api.Output{Type: api.OutputStream, Name: "stdout", Text: "out\n"})
	s.show(api.Output{Type: api.OutputStream, Name: "stderr", Text: "err\n"})
	s.show(api.Output{Type: api.OutputExecuteResult, ExecutionCount: 1, Data: map[string]any{"text/plain": "42", "text/html": "<b>42</b>"}})
	s.show(api.Output{Type: api.OutputDisplayData, Data: map[string]any{"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}})
	s.show(api.Output{Type: api.OutputDisplayData, Data: map[string]any{"image/svg+xml": "<svg/>"}})
	s.show(api.Output{Type: api.OutputError, EName: "E", EValue: "v", Traceback: []string{"line 1", "E: v\n"}})
	if stdout.String() != "out\n42\n" {
		t.Errorf("stdout %q", stdout.String())
	}
	png := filepath.Join(s.outDir, "cell-1-out-1.png")
	svg := filepath.Join(s.outDir, "cell-1-out-2.svg")
	want := "err\nsaved " + png + "\nsaved " + svg + "\nline 1\nE: v\n"
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if b, _ := os.ReadFile(png); !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("png %q", b)
	}
}

package main

import (
	"strings"
	"testing"
)

func TestMarkdown(t *testing.T) {
	in := "# Result\nThere are **8000** rows, see [the plot](hist.png).\n- first\n  * nested\n```python\nprint(1)\n```\n**bold** and *x* stay"
	var plain strings.Builder
	md := newMarkdown(&plain, false)
	// Streamed in small pieces, as a model writes it.
	for i := 0; i < len(in); i += 3 {
		md.Write([]byte(in[i:min(i+3, len(in))]))
	}
	md.Flush()
	want := "Result\nThere are 8000 rows, see the plot (hist.png).\n  • first\n    • nested\n\n    print(1)\n\nbold and *x* stay\n"
	if plain.String() != want {
		t.Errorf("got:\n%q\nwant:\n%q", plain.String(), want)
	}
	var color strings.Builder
	md = newMarkdown(&color, true)
	md.Write([]byte("## Title\nis **big**\n"))
	if got := color.String(); got != ansiBold+"Title"+ansiReset+"\nis "+ansiBold+"big"+ansiReset+"\n" {
		t.Errorf("color: %q", got)
	}
}

package main

import "testing"

func TestTermSafe(t *testing.T) {
	tests := []struct {
		in     string
		keepCR bool
		want   string
	}{
		{"plain\ttext\n", false, "plain\ttext\n"},
		{"évité ✓", false, "évité ✓"},
		{"evil()\x1b[1A\x1b[2Kprint('hi')", false, "evil()^[[1A^[[2Kprint('hi')"},
		{"x\rcomment", false, "x^Mcomment"},
		{"50%\r100%\n", true, "50%\r100%\n"},
		{"\x1b]52;c;ZXZpbA==\a", true, "^[]52;c;ZXZpbA==^G"},
		{"csi\u009b2J del\x7f", false, "csi<U+009B>2J del^?"},
	}
	for _, tt := range tests {
		if got := termSafe(tt.in, tt.keepCR); got != tt.want {
			t.Errorf("termSafe(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

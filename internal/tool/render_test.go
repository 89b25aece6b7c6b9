package tool

import "testing"

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

package workspace

import (
	"errors"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/errdefs"
)

func TestClean(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "a.txt", want: "a.txt"},
		{in: "dir/b.csv", want: "dir/b.csv"},
		{in: "./dir//b.csv/", want: "dir/b.csv"},
		{in: "", want: "."},
		{in: ".", want: "."},
		{in: "/mnt/data", want: "."},
		{in: "/mnt/data/", want: "."},
		{in: "/mnt/data/plot.png", want: "plot.png"},
		{in: "/mnt/data/x/../y", bad: true},
		{in: "..", bad: true},
		{in: "../etc/passwd", bad: true},
		{in: "a/../../b", bad: true},
		{in: "a/..", bad: true},
		{in: "/etc/passwd", bad: true},
		{in: "/mnt/database/x", bad: true},
		{in: "/", bad: true},
		{in: "a\x00b", bad: true},
		{in: `..\..\x`, bad: true},
		{in: strings.Repeat("a", MaxPathLen+1), bad: true},
		{in: "...", want: "..."},
		{in: "..a", want: "..a"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Clean(tt.in)
			if tt.bad {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("Clean(%q) = %q, %v; want invalid argument", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Clean(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"a", "../a", "/mnt/data/a/b", "a/./b//c", "/etc", "a/..", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := Clean(p)
		if err != nil {
			return
		}
		if rel == "" || strings.HasPrefix(rel, "/") || strings.Contains(rel, "\x00") || strings.Contains(rel, `\`) {
			t.Fatalf("Clean(%q) = %q: not a clean relative path", p, rel)
		}
		for _, c := range strings.Split(rel, "/") {
			if c == ".." || c == "" || (c == "." && rel != ".") {
				t.Fatalf("Clean(%q) = %q: bad component %q", p, rel, c)
			}
		}
		again, err := Clean(rel)
		if err != nil || again != rel {
			t.Fatalf("Clean is not idempotent: %q -> %q -> %q, %v", p, rel, again, err)
		}
	})
}

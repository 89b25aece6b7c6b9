package agent

import (
	"os"
	"strings"
	"testing"
)

func TestDescribeFile(t *testing.T) {
	tests := []struct {
		name, content string
		want          []string
	}{
		{"data.csv", "a,b,c\n1,2,3\n4,5,6\n", []string{"- /mnt/data/data.csv (18 B): 2 rows, 3 columns: a, b, c\n  First rows (as in the file):\n  a,b,c\n  1,2,3\n  4,5,6"}},
		{"t.tsv", "x\ty\n1\t2\n", []string{"1 rows, 2 columns: x, y"}},
		{"notes.txt", "hello", []string{"- /mnt/data/notes.txt (5 B)"}},
		{"empty.csv", "", []string{"(0 B): empty"}},
		{"quoted.csv", "name,text\n\"a\",\"line1\nline2\"\n\"b\",\"x\"\n", []string{"2 rows, 2 columns: name, text"}},
		{"bad.csv", "a,b\n\"unterminated,1\n", []string{"2 columns"}},
		{"wide.csv", strings.Repeat("c,", 99) + "c\n", []string{"100 columns", "... (40 more)"}},
		{"long.csv", "a\n" + strings.Repeat("x", 1000) + "\n", []string{"x ...", "1 rows"}},
		{"oneline.csv", strings.Repeat("y", 4<<20), []string{"0 rows, 1 columns: yyy", "y ..."}},
		{"longnames.csv", strings.Repeat(strings.Repeat("n", 50000)+",", 59) + "n\n", []string{"60 columns"}},
	}
	for _, tt := range tests {
		got := DescribeFile(tt.name, int64(len(tt.content)), strings.NewReader(tt.content))
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tt.name, got, w)
			}
		}
		if len(got) > 5000 {
			t.Errorf("%s: %d bytes", tt.name, len(got))
		}
	}
}

func TestDescribeTrafficAccidents(t *testing.T) {
	f, err := os.Open("../../examples/data/traffic_accidents.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	got := DescribeFile("traffic_accidents.csv", st.Size(), f)
	if !strings.Contains(got, "8,000 rows, 10 columns: accidents, traffic_fine_amount") || strings.Count(got, "\n") != 7 {
		t.Errorf("got:\n%s", got)
	}
}

package client

import (
	"reflect"
	"testing"
	"time"
)

func TestParseServerTiming(t *testing.T) {
	for _, tt := range []struct {
		name   string
		values []string
		want   []Timing
	}{
		{"none", nil, nil},
		{"one", []string{`server;dur=1.5;desc="cellbox server"`}, []Timing{{"server", 1500 * time.Microsecond, "cellbox server"}}},
		{"several, over two values", []string{`a;dur=0.001, b;desc=plain`, `c`},
			[]Timing{{"a", time.Microsecond, ""}, {"b", 0, "plain"}, {"c", 0, ""}}},
		{"quoted separators", []string{`a;desc="x, y; \"z\"";dur=2`}, []Timing{{"a", 2 * time.Millisecond, `x, y; "z"`}}},
		{"case and spaces", []string{` a ; DUR = 3 `}, []Timing{{"a", 3 * time.Millisecond, ""}}},
		{"nameless and bad numbers", []string{`;dur=1, b;dur=x`}, []Timing{{"b", 0, ""}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseServerTiming(tt.values); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseServerTiming(%q) = %+v, want %+v", tt.values, got, tt.want)
			}
		})
	}
}

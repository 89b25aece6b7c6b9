package main

import (
	"reflect"
	"testing"
)

func TestReorder(t *testing.T) {
	for _, tt := range []struct{ in, want []string }{
		{[]string{"mine", "--file", "mine.list"}, []string{"--file", "mine.list", "mine"}},
		{[]string{"--state-dir=/s", "mine"}, []string{"--state-dir=/s", "mine"}},
		{[]string{"mine", "--", "-odd"}, []string{"mine", "-odd"}},
		{[]string{"--file"}, []string{"--file"}}, // the flag package says the value is missing
	} {
		if got := reorder(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("reorder(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

package guest

import (
	"errors"
	"strings"
	"testing"
)

// The template's answer is classified by its code, never by its message: an "env" error
// (start the kernel afresh) wraps errTemplateEnv whatever it says; no other does.
func TestReadAnswer(t *testing.T) {
	for _, c := range []struct {
		name, answer string
		pid          int
		preimported  bool
		env, failed  bool
	}{
		{"a kernel", "pid 42\n", 42, false, false, false},
		{"a preimported kernel", "pid 42 preimported\n", 42, true, false, false},
		{"env", "error env LD_PRELOAD differs from the template's\n", 0, false, true, true},
		{"env, worded otherwise", "error env anything at all\n", 0, false, true, true},
		{"failed", "error failed environment: looks like env but is not\n", 0, false, false, true},
		{"an unknown code", "error other x\n", 0, false, false, true},
		{"a kernel that cannot be used", "pid 42\nerror failed setns\n", 42, false, false, true},
		{"garbage", "hello\n", 0, false, false, true},
		{"a bad pid", "pid 1\n", 0, false, false, true},
		{"nothing", "", 0, false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pid, pre, err := readAnswer(strings.NewReader(c.answer))
			if pid != c.pid || pre != c.preimported || (err != nil) != c.failed || errors.Is(err, errTemplateEnv) != c.env {
				t.Errorf("readAnswer(%q) = %d, %v, %v; want %d, %v, error %v, env %v", c.answer, pid, pre, err, c.pid, c.preimported, c.failed, c.env)
			}
		})
	}
}

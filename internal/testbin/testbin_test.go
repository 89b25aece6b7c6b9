package testbin

import (
	"runtime"
	"testing"
)

// recorder is a testing.TB that records how a test was ended; like the real one, ending
// stops the goroutine (see call).
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = format; runtime.Goexit() }
func (r *recorder) Skipf(format string, a ...any)  { r.skip = format; runtime.Goexit() }

// call runs f in a goroutine of its own, which the recorder may end.
func call(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

func TestMissingFailsInCI(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	call(func() { Missing(r, "needs %s", "x") })
	if r.fatal == "" || r.skip != "" {
		t.Errorf("with CI set: fatal %q, skip %q; want a failure, not a skip", r.fatal, r.skip)
	}
}

func TestMissingSkipsOutsideCI(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	call(func() { Missing(r, "needs %s", "x") })
	if r.skip == "" || r.fatal != "" {
		t.Errorf("without CI: fatal %q, skip %q; want a skip", r.fatal, r.skip)
	}
}

package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
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

func TestSweepRemovesEndedProcessesFolders(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(name string) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	live := mk(fmt.Sprintf("%s%d-1", dirPrefix, os.Getpid()))
	dead := mk(fmt.Sprintf("%s%d-2", dirPrefix, ended.Process.Pid))
	old := mk(dirPrefix + "123456") // the names before the pid was in them
	other := mk("cellbox-other-1")
	sweep()
	for d, keep := range map[string]bool{live: true, dead: false, old: false, other: true} {
		_, err := os.Stat(d)
		if kept := err == nil; kept != keep {
			t.Errorf("%s: kept %v, want %v", filepath.Base(d), kept, keep)
		}
	}
}

func TestPoll(t *testing.T) {
	n := 0
	if err := Poll(time.Minute, func() error {
		if n++; n < 3 {
			return fmt.Errorf("try %d", n)
		}
		return nil
	}); err != nil || n != 3 {
		t.Errorf("a condition true at the third try: %v after %d tries", err, n)
	}
	start := time.Now()
	err := Poll(50*time.Millisecond, func() error { return fmt.Errorf("never") })
	if err == nil || !strings.Contains(err.Error(), "never") || time.Since(start) < 50*time.Millisecond {
		t.Errorf("a condition never true: %v after %v", err, time.Since(start))
	}
}

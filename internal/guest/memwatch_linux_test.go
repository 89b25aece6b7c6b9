package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestOOMCounter(t *testing.T) {
	dir := t.TempDir()
	if c := newOOMCounter(dir); c.known() || c.read() != 0 {
		t.Errorf("counter without files: %+v", c)
	}
	if c := newOOMCounter(""); c.known() {
		t.Error("counter without a cgroup")
	}
	os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 0\noom 0\noom_kill 7\noom_group_kill 0\n"), 0o644)
	if c := newOOMCounter(dir); !c.known() || c.read() != 7 {
		t.Errorf("v2 counter: %+v %d", c, c.read())
	}
}

// TestMemWatchPick: the process with the most resident pages goes, weighted by a positive
// oom_score_adj as Linux weighs it; never the guest or process 1. A negative adj counts as
// 0 (gVisor lets user code lower its own: -1000 must not hide a bomb), and a process whose
// first thread has exited is measured by its other threads.
func TestMemWatchPick(t *testing.T) {
	proc := t.TempDir()
	w := &memWatch{limit: 1 << 30, self: 7}
	page := int64(os.Getpagesize())
	statm := func(rssMB int64) []byte { return []byte(fmt.Sprintf("999999 %d 10 1 0 5 0\n", rssMB<<20/page)) }
	add := func(pid string, rssMB int64, adj string) {
		os.MkdirAll(filepath.Join(proc, pid), 0o755)
		os.WriteFile(filepath.Join(proc, pid, "statm"), statm(rssMB), 0o644)
		if adj != "" {
			os.WriteFile(filepath.Join(proc, pid, "oom_score_adj"), []byte(adj+"\n"), 0o644)
		}
	}
	add("1", 900, "")       // process 1
	add("7", 800, "")       // the guest
	add("20", 300, "0")     // a big one
	add("21", 200, "-1000") // hiding
	add("22", 100, "1000")  // the kernel: oomFirst
	os.MkdirAll(filepath.Join(proc, "self"), 0o755)
	if got := w.pick(proc); got != 22 {
		t.Errorf("picked %d, want the kernel (22), first by its adj", got)
	}
	os.WriteFile(filepath.Join(proc, "22", "oom_score_adj"), []byte("0\n"), 0o644)
	if got := w.pick(proc); got != 20 {
		t.Errorf("picked %d, want the largest (20)", got)
	}
	os.RemoveAll(filepath.Join(proc, "20"))
	if got := w.pick(proc); got != 21 {
		t.Errorf("picked %d, want 21, whose -1000 counts as 0", got)
	}
	// A bomb in a thread of a process whose first thread has exited.
	add("23", 0, "0")
	os.MkdirAll(filepath.Join(proc, "23", "task", "24"), 0o755)
	os.WriteFile(filepath.Join(proc, "23", "task", "24", "statm"), statm(600), 0o644)
	if got := w.pick(proc); got != 23 {
		t.Errorf("picked %d, want 23, whose thread holds 600 MB", got)
	}
	for _, pid := range []string{"21", "22", "23"} {
		os.RemoveAll(filepath.Join(proc, pid))
	}
	if got := w.pick(proc); got != 0 {
		t.Errorf("picked %d, want none", got)
	}
}

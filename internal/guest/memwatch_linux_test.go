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

// TestMemWatchPick: the process with the most resident pages goes, weighted by
// oom_score_adj as Linux weighs it; never the guest, process 1, or one at -1000.
func TestMemWatchPick(t *testing.T) {
	proc := t.TempDir()
	w := &memWatch{limit: 1 << 30, self: 7}
	page := int64(os.Getpagesize())
	add := func(pid string, rssMB int64, adj string) {
		os.MkdirAll(filepath.Join(proc, pid), 0o755)
		os.WriteFile(filepath.Join(proc, pid, "statm"), []byte(fmt.Sprintf("999999 %d 10 1 0 5 0\n", rssMB<<20/page)), 0o644)
		if adj != "" {
			os.WriteFile(filepath.Join(proc, pid, "oom_score_adj"), []byte(adj+"\n"), 0o644)
		}
	}
	add("1", 900, "")       // process 1
	add("7", 800, "")       // the guest
	add("20", 300, "0")     // a big one
	add("21", 200, "-1000") // never
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
	os.RemoveAll(filepath.Join(proc, "22"))
	if got := w.pick(proc); got != 0 {
		t.Errorf("picked %d, want none", got)
	}
}

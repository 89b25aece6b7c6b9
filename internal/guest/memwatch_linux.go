package guest

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// memWatch is the OOM killer of a sandbox whose kernel has none that acts inside it. Under
// gVisor the sentry holds all of user code's memory, so the host's OOM killer, at the
// sandbox cgroup's limit, can only end the whole sandbox (the session would lose its
// variables and its background processes to a memory bomb). The guest keeps user code
// under the limit itself: it reads the memory in use (sysinfo, the sentry's own
// accounting: a couple of microseconds) every idleEvery, every busyEvery once above half
// the limit, and past the limit SIGKILLs the process that holds the most, weighted by
// oom_score_adj as Linux's OOM killer does (the kernel and commands go first, oomFirst).
// The host's limit stays above this one (sandbox.GVisorHostMemoryMB) as a backstop.
type memWatch struct {
	limit uint64 // bytes
	self  int
	log   *slog.Logger
	kills atomic.Int64
}

// The watch's intervals: a fill of the memory runs at a few GB/s, so above half the limit
// it looks often; below, a bomb must climb half the limit before the next look.
var (
	idleEvery = 100 * time.Millisecond
	busyEvery = 5 * time.Millisecond
)

func newMemWatch(limitMB int, log *slog.Logger) *memWatch {
	if limitMB <= 0 {
		return nil
	}
	return &memWatch{limit: uint64(limitMB) << 20, self: os.Getpid(), log: log}
}

// used is the memory in use in the sandbox, or false when the kernel does not say.
func used() (uint64, bool) {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0, false
	}
	unit := uint64(si.Unit)
	if unit == 0 {
		unit = 1
	}
	return (uint64(si.Totalram) - uint64(si.Freeram)) * unit, true
}

// run watches until ctx ends.
func (w *memWatch) run(ctx context.Context) {
	t := time.NewTimer(idleEvery)
	defer t.Stop()
	var victim int // the last one killed, while it is still there
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, ok := used()
		if !ok {
			w.log.Warn("the memory watch stops: sysinfo fails")
			return
		}
		next := idleEvery
		if n > w.limit/2 {
			next = busyEvery
		}
		if n > w.limit {
			if victim != 0 && alive(victim) {
				t.Reset(next) // its memory is being freed
				continue
			}
			victim = w.pick("/proc")
			if victim != 0 {
				unix.Kill(victim, unix.SIGKILL)
				w.kills.Add(1)
				w.log.Warn("out of memory: killed the process that held the most", "pid", victim, "used_mb", n>>20, "limit_mb", w.limit>>20)
			}
		}
		t.Reset(next)
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// A zombie holds no memory.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}

// pick is the process in proc (/proc) with the most points: resident pages, plus
// oom_score_adj thousandths of the limit; not the guest, nor process 1, nor a process whose
// adj is -1000. 0: none.
func (w *memWatch) pick(proc string) int {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return 0
	}
	limitPages := int64(w.limit) / int64(os.Getpagesize())
	best, bestPoints := 0, int64(-1)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == w.self || pid == 1 {
			continue
		}
		dir := filepath.Join(proc, e.Name())
		statm, err := os.ReadFile(filepath.Join(dir, "statm"))
		if err != nil {
			continue
		}
		f := bytes.Fields(statm)
		if len(f) < 2 {
			continue
		}
		rss, _ := strconv.ParseInt(string(f[1]), 10, 64)
		adj := int64(0)
		if b, err := os.ReadFile(filepath.Join(dir, "oom_score_adj")); err == nil {
			adj, _ = strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		}
		if adj <= -1000 {
			continue
		}
		if p := rss + adj*limitPages/1000; p > bestPoints {
			best, bestPoints = pid, p
		}
	}
	return best
}

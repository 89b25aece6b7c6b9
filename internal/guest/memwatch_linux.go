package guest

import (
	"bytes"
	"context"
	"log/slog"
	"math"
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
//
// With pids set, it also refuses new processes while less than an eighth of the limit is
// free (until a quarter is again): there a fork takes memory at once (see userPids), and a
// fork bomb is to end at a fork that fails, as under runc, not in the kernel's OOM kill.
type memWatch struct {
	limit uint64 // bytes
	self  int
	log   *slog.Logger
	kills atomic.Int64
	pids  *userPids // nil: none
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

// settle is how long, after a kill, the watch waits for the memory in use to fall below the
// limit before it picks again: the sentry gives a dead process's pages back some time after
// it is gone, and a second kill then would be a process that did nothing wrong.
var settle = 500 * time.Millisecond

// run watches until ctx ends.
func (w *memWatch) run(ctx context.Context) {
	t := time.NewTimer(idleEvery)
	defer t.Stop()
	var (
		victim int       // the last one killed, while it is still there
		killed time.Time // when
	)
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
		w.admit(n)
		switch {
		case n <= w.limit:
			victim = 0 // its pid may name another process one day
		case victim != 0 && (alive(victim) || time.Since(killed) < settle):
			// Its memory is being freed.
		default:
			victim = 0
			if pid := w.pick("/proc"); pid != 0 && unix.Kill(pid, unix.SIGKILL) == nil {
				victim, killed = pid, time.Now()
				w.kills.Add(1)
				w.log.Warn("out of memory: killed the process that held the most", "pid", pid, "used_mb", n>>20, "limit_mb", w.limit>>20)
			}
		}
		t.Reset(next)
	}
}

// admit holds user code's count of processes while less than an eighth of the limit is
// free, and releases it once a quarter is again, for n bytes in use.
func (w *memWatch) admit(n uint64) {
	switch {
	case w.pids == nil:
	case n > w.limit-w.limit/8:
		w.pids.hold()
	case n < w.limit-w.limit/4:
		w.pids.release()
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
// oom_score_adj thousandths of the limit, as Linux counts them; not the guest, nor process
// 1. An adj below 0 counts as 0: the guest never sets one, and gVisor lets a process lower
// its own, so user code could otherwise hide from the watch. 0: none.
func (w *memWatch) pick(proc string) int {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return 0
	}
	limitPages := int64(w.limit) / int64(os.Getpagesize())
	best, bestPoints := 0, int64(math.MinInt64)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == w.self || pid == 1 {
			continue
		}
		dir := filepath.Join(proc, e.Name())
		rss, ok := residentPages(dir)
		if !ok {
			continue
		}
		adj := int64(0)
		if b, err := readSmall(filepath.Join(dir, "oom_score_adj")); err == nil {
			adj, _ = strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		}
		adj = min(max(adj, 0), 1000)
		if p := rss + adj*limitPages/1000; p > bestPoints {
			best, bestPoints = pid, p
		}
	}
	return best
}

// residentPages is a process's resident pages: its statm's, or, when its first thread has
// exited (which leaves that statm at 0 under gVisor), the most any of its threads' says.
func residentPages(dir string) (int64, bool) {
	rss, ok := statmRSS(filepath.Join(dir, "statm"))
	if !ok || rss > 0 {
		return rss, ok
	}
	tasks, _ := os.ReadDir(filepath.Join(dir, "task"))
	for i, t := range tasks {
		if i == 64 {
			break // enough to find a bomb's threads; the limit bounds the rest
		}
		if n, ok := statmRSS(filepath.Join(dir, "task", t.Name(), "statm")); ok && n > rss {
			rss = n
		}
	}
	return rss, true
}

func statmRSS(path string) (int64, bool) {
	b, err := readSmall(path)
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(f[1]), 10, 64)
	return n, err == nil
}

// readSmall reads the first 256 bytes of a /proc file.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 256)
	n, err := f.Read(b)
	if n > 0 {
		return b[:n], nil
	}
	return nil, err
}

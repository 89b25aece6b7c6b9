package guest

import (
	"bytes"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// oomCounter reads the sandbox cgroup's count of OOM kills: `oom_kill` in memory.events
// (cgroup v2) or in memory.oom_control (v1), plus the kills of the guest's own memory watch
// (gVisor). The zero value counts nothing.
type oomCounter struct {
	path  string
	watch *memWatch
}

func newOOMCounter(cgroup string) oomCounter {
	if cgroup == "" {
		return oomCounter{}
	}
	for _, p := range []string{
		filepath.Join(cgroup, "memory.events"),
		filepath.Join(cgroup, "memory", "memory.oom_control"),
		filepath.Join(cgroup, "memory.oom_control"),
	} {
		if _, ok := readOOMKills(p); ok {
			return oomCounter{path: p}
		}
	}
	return oomCounter{}
}

// known says whether the counter can be read at all.
func (c oomCounter) known() bool { return c.path != "" || c.watch != nil }

// read returns the counter, or 0 when unknown.
func (c oomCounter) read() int64 {
	var n int64
	if c.path != "" {
		n, _ = readOOMKills(c.path)
	}
	if c.watch != nil {
		n += c.watch.kills.Load()
	}
	return n
}

// readOOMKills reads the count from a cgroup file whose few lines come in one read: open,
// read and close into a buffer on the stack (every cell reads it; os.ReadFile took twice the
// system calls and allocated). The file is not kept open: a checkpoint must find none.
func readOOMKills(path string) (int64, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	var buf [1024]byte
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil || n <= 0 {
		return 0, false
	}
	for line := range bytes.Lines(buf[:n]) {
		if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

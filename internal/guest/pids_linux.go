package guest

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// userPids is the cgroup that holds user code (the kernels, the commands and all they
// start) where the guest keeps user code's process limit itself: under gVisor, whose
// sentry counts the sandbox's tasks in a cgroup2 hierarchy of its own (the host's cgroup
// counts the sentry's threads instead; see sandbox.GVisorHostTasks).
//
// It is the sandbox's cgroup, which runsc makes for the sandbox and starts the guest in.
// The guest leaves it for the root cgroup (its own threads are not user code's to use up)
// and clones every child into it (CLONE_INTO_CGROUP): the child is inside before it runs
// anything, and a fork past pids.max fails with EAGAIN, as under runc. User code cannot
// leave it or raise its limit: the cgroup files are root's, and user code is not root.
//
// Under gVisor a fork also takes memory at once: the sentry copies 2 MiB around each page
// that a process, or its copy, writes while they share it (Linux copies 4 KiB), so a forked
// Python kernel costs some 28 MiB, and a fork bomb would fill the memory limit long before
// the process limit. While memory is short the memory watch holds the count where it is
// (hold): a fork is refused as at the limit, and the memory limit stays for the memory a
// process itself takes.
type userPids struct {
	dir string // the cgroup's folder
	fd  int    // dir, open, to clone children into
	max int
	log *slog.Logger

	mu   sync.Mutex
	held bool // pids.max is the count at the moment memory ran short
}

// newUserPids finds the guest's cgroup in self (a /proc/<pid>/cgroup file) below mount,
// where a cgroup2 hierarchy is mounted, limits it to max tasks, and moves the guest to the
// hierarchy's root.
func newUserPids(mount, self string, max int, log *slog.Logger) (*userPids, error) {
	b, err := os.ReadFile(self)
	if err != nil {
		return nil, fmt.Errorf("find the sandbox's cgroup: %w", err)
	}
	var cg string
	for line := range bytes.Lines(b) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "0::"); ok {
			cg = path.Clean(p)
		}
	}
	if !strings.HasPrefix(cg, "/") || cg == "/" {
		return nil, fmt.Errorf("the guest is in no cgroup2 cgroup of its own below %s (%q)", mount, strings.TrimSpace(string(b)))
	}
	p := &userPids{dir: filepath.Join(mount, cg), max: max, log: log}
	if err := p.setMax(max); err != nil {
		return nil, err
	}
	if p.fd, err = unix.Open(p.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("open the sandbox's cgroup: %w", err)
	}
	if err := writeFile(filepath.Join(mount, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		unix.Close(p.fd)
		return nil, fmt.Errorf("move the guest out of the sandbox's cgroup: %w", err)
	}
	return p, nil
}

// hold refuses new tasks beyond those there now (memory is short); release lets them up to
// the limit again.
func (p *userPids) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held {
		return
	}
	b, err := os.ReadFile(filepath.Join(p.dir, "pids.current"))
	n, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil {
		p.log.Warn("cannot read user code's count of processes", "error", errors.Join(err, perr))
		return
	}
	if err := p.setMax(min(n, p.max)); err != nil {
		p.log.Warn("cannot hold user code's processes", "error", err)
		return
	}
	p.held = true
	p.log.Warn("memory is short: no new processes for now", "pids", n)
}

func (p *userPids) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.held {
		return
	}
	if err := p.setMax(p.max); err != nil {
		p.log.Warn("cannot let user code's processes grow again", "error", err)
		return
	}
	p.held = false
}

func (p *userPids) setMax(n int) error {
	if err := writeFile(filepath.Join(p.dir, "pids.max"), strconv.Itoa(n)); err != nil {
		return fmt.Errorf("limit user code's processes: %w", err)
	}
	return nil
}

// writeFile writes s to an existing file, in one write: a cgroup file takes one value per
// write.
func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	return errors.Join(err, f.Close())
}

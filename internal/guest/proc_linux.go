package guest

import (
	"bytes"
	"errors"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// procTable starts the guest's children and delivers their exit statuses. It is process-wide:
// SIGCHLD and wait4 are.
//
// By default it waits only for the children it started (so it can share a process with
// os/exec). After initMode it reaps every child of the process, as process 1 must: orphans
// reparented to the guest would otherwise stay zombies. exec.Cmd.Wait cannot work then,
// which is why children are started here and tracked by pid.
type procTable struct {
	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
	adopted map[int]bool // waiters for processes that become children later (adopt)
	reapAll bool
	kick    chan os.Signal
	// With reapAll: the latest statuses no waiter took, for adopt (at most maxUnclaimed).
	unclaimed map[int]unix.WaitStatus
	order     []int
	// pids, when set, is the cgroup every child is cloned into (see userPids).
	pids *userPids
}

const maxUnclaimed = 64

var (
	procsOnce sync.Once
	procsT    *procTable
)

func procs() *procTable {
	procsOnce.Do(func() {
		procsT = &procTable{waiters: map[int]chan unix.WaitStatus{}, adopted: map[int]bool{},
			unclaimed: map[int]unix.WaitStatus{}, kick: make(chan os.Signal, 1)}
		signal.Notify(procsT.kick, unix.SIGCHLD)
		go func() {
			for range procsT.kick {
				procsT.reap()
			}
		}()
	})
	return procsT
}

// initMode makes the process a child subreaper that reaps every zombie. Process 1 of a
// pid namespace is its reaper already, and reaps all the same if it cannot be a subreaper
// too: gVisor (runsc 20221219) answers EINVAL to process 1, whose orphans then stayed
// zombies, holding the pids limit, until the sandbox ended.
func initMode() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil && os.Getpid() != 1 {
		return err
	}
	p := procs()
	p.mu.Lock()
	p.reapAll = true
	p.mu.Unlock()
	select {
	case p.kick <- unix.SIGCHLD: // reap what is already waiting
	default:
	}
	return nil
}

func (p *procTable) reap() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reapAll {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				return
			}
			p.deliver(pid, ws)
		}
	}
	for pid := range p.waiters {
		if p.adopted[pid] {
			continue // not a child yet, maybe: reapAll's wait for any child takes it
		}
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		switch {
		case got == pid:
			p.deliver(pid, ws)
		case err == unix.ECHILD: // reaped by someone else: status unknown
			p.deliver(pid, unix.WaitStatus(0xff<<8))
		}
	}
}

func (p *procTable) deliver(pid int, ws unix.WaitStatus) {
	if ch, ok := p.waiters[pid]; ok {
		delete(p.waiters, pid)
		delete(p.adopted, pid)
		ch <- ws
		return
	}
	if p.reapAll {
		if _, ok := p.unclaimed[pid]; !ok {
			p.order = append(p.order, pid)
		}
		p.unclaimed[pid] = ws
		if len(p.order) > maxUnclaimed {
			delete(p.unclaimed, p.order[0])
			p.order = p.order[1:]
		}
	}
}

// adopt returns a channel that receives the exit status of pid once: a process of the
// guest's pid namespace that another process started, which is (or soon will be)
// re-parented to the guest, and which the guest then reaps (reapAll). A status that was
// reaped before adopt is kept for it, unless pid names a living process now: then the
// status was an earlier process's with the same number. A pid that names no process, and
// whose status is no longer kept (more than maxUnclaimed others were reaped meanwhile, say
// a flood of user code's orphans), gets an unknown status at once: nothing would ever
// deliver one.
func (p *procTable) adopt(pid int) <-chan unix.WaitStatus {
	ch := make(chan unix.WaitStatus, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	ws, reaped := p.unclaimed[pid]
	fd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		unix.Close(fd)
		reaped = false
	}
	if !reaped && err == unix.ESRCH {
		ws, reaped = unix.WaitStatus(0xff<<8), true
	}
	if reaped {
		p.forget(pid)
		ch <- ws
		return ch
	}
	p.forget(pid)
	p.waiters[pid] = ch
	p.adopted[pid] = true
	return ch
}

// forget drops pid's unclaimed status. The caller holds mu.
func (p *procTable) forget(pid int) {
	if _, ok := p.unclaimed[pid]; !ok {
		return
	}
	delete(p.unclaimed, pid)
	for i, q := range p.order {
		if q == pid {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
}

// startIn makes every child start in u's cgroup.
func (p *procTable) startIn(u *userPids) {
	p.mu.Lock()
	p.pids = u
	p.mu.Unlock()
}

// start runs a program in its own process group and returns its pid and a channel that
// receives its exit status once.
func (p *procTable) start(path string, argv []string, attr *syscall.ProcAttr) (int, <-chan unix.WaitStatus, error) {
	if attr.Sys == nil {
		attr.Sys = &syscall.SysProcAttr{}
	}
	attr.Sys.Setpgid = true
	// Local mode: if the guest dies, its children go with it (the sandbox does this itself).
	attr.Sys.Pdeathsig = syscall.SIGKILL
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pids != nil {
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, p.pids.fd
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	p.waiters[pid] = ch
	return pid, ch, nil
}

// killTree kills process group pgid (a child started by procTable.start) and, while the
// group's leader has not been reaped (leaderAlive), every descendant of it, including those
// that left the group. Processes are stopped first, so none can fork while the tree is
// collected. Once the leader is reaped its pid may name another process: only the group,
// which keeps its id while it has members, is killed then.
func killTree(pgid int, leaderAlive bool) {
	seen := stopTree(pgid, leaderAlive)
	unix.Kill(-pgid, unix.SIGKILL)
	for pid := range seen {
		unix.Kill(pid, unix.SIGKILL)
	}
}

// stopTree stops (SIGSTOP) what killTree kills and returns the descendants it found.
func stopTree(pgid int, leaderAlive bool) map[int]bool {
	unix.Kill(-pgid, unix.SIGSTOP)
	seen := map[int]bool{}
	for i := 0; leaderAlive && i < 16; i++ {
		fresh := false
		for _, pid := range descendants(pgid) {
			if !seen[pid] {
				seen[pid] = true
				fresh = true
				unix.Kill(pid, unix.SIGSTOP)
			}
		}
		if !fresh {
			break
		}
	}
	return seen
}

// killAll kills every process the guest's process started, however far removed: all other
// processes of the pid namespace when the guest is process 1, else its descendants.
func killAll() {
	if os.Getpid() == 1 {
		unix.Kill(-1, unix.SIGKILL)
		return
	}
	self := os.Getpid()
	for range 8 {
		pids := descendants(self)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGSTOP)
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// descendants lists the descendants of pid found in /proc (not pid itself).
func descendants(pid int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	children := map[int][]int{}
	var buf [512]byte
	for _, n := range names {
		p, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		ppid := readPPID(p, buf[:])
		if ppid > 0 {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		c := children[queue[0]]
		queue = queue[1:]
		out = append(out, c...)
		queue = append(queue, c...)
	}
	return out
}

// readPPID reads the parent pid from /proc/<pid>/stat: the field after "(comm) state".
func readPPID(pid int, buf []byte) int {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	n, _ := unix.Read(fd, buf)
	unix.Close(fd)
	if n <= 0 {
		return 0
	}
	s := buf[:n]
	i := bytes.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(s[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// exitText describes an exit status for a person: "exit code 1", "signal SIGSEGV".
func exitText(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + sigName(ws.Signal())
	}
	return "exit code " + strconv.Itoa(ws.ExitStatus())
}

func sigName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return strconv.Itoa(int(s))
}

// exitCode is a shell's view of an exit status: the code, or 128+signal.
func exitCode(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// lookPath finds a program the way execvp does, in the PATH of env.
func lookPath(file string, env []string) (string, error) {
	if strings.HasPrefix(file, "/") {
		if err := unix.Access(file, unix.X_OK); err != nil {
			return "", err
		}
		return file, nil
	}
	if strings.Contains(file, "/") {
		return file, nil // relative to the program's own working folder
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	denied := false
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + file
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		if unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
		denied = true
	}
	if denied {
		return "", unix.EACCES
	}
	return "", unix.ENOENT
}

// mergeEnv returns base with the entries of adds set, later ones winning, without duplicates.
func mergeEnv(base []string, adds ...map[string]string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(base)+8)
	set := func(k, v string) {
		kv := k + "=" + v
		if i, ok := idx[k]; ok {
			out[i] = kv
			return
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	for _, m := range adds {
		for k, v := range m {
			if k != "" && !strings.ContainsAny(k, "=\x00") && !strings.Contains(v, "\x00") {
				set(k, v)
			}
		}
	}
	return out
}

var errClosing = errors.New("the sandbox is shutting down")

// oomFirst makes pid the OOM killer's first choice, so it picks the kernel or a command,
// never the guest. Raising the score needs no privilege.
func oomFirst(pid int) {
	os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0)
}

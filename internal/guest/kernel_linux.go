package guest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guest/pyrunner"
	"github.com/cellbox/cellbox/internal/guest/runners"
	"github.com/cellbox/cellbox/internal/guestproto"
)

const (
	// coalesce is how long stream text may wait to be sent with what follows it.
	coalesce = 50 * time.Millisecond
	// maxPending sends stream text at once past this size.
	maxPending = 256 << 10
	// maxDrain bounds one drain of the stream pipes before a protocol message; what was
	// written before the message is at most a pipe's capacity.
	maxDrain = 4 << 20
	// stderrTail is how much of a silent run's stderr is kept to explain a failure.
	stderrTail = 4 << 10
)

var errKernelDead = errors.New("the kernel is not running")

// stopReason says why the guest stops a cell.
type stopReason int

const (
	stopNone stopReason = iota
	stopTimeout
	stopInterrupt
	stopRestart
)

// cellRun is one execution in the kernel. The execute handler creates it, the kernel's pump
// fills it, and done is closed when it is over.
type cellRun struct {
	op       string // "exec", "drop" (forget context), "ping", "env" (envList), or a question: "complete", "inspect", "is_complete"
	envList  []string
	code     string
	context  string            // the execution context ("": the default)
	env      map[string]string // set in os.environ for this cell only
	displays bool              // send display ids, display updates and clear_output
	stdin    bool              // input() asks the caller (Request.Stdin)
	exprs    map[string]string // user expressions, evaluated after the code
	pos      int               // a question's cursor (code points)
	detail   int               // inspect's detail level
	silent   bool              // preimport: outputs discarded, nothing counted
	startup  bool              // silent, of the kernel's start: a restart does not stop it
	quiet    bool              // a tool's call: outputs kept, nothing counted
	trace    bool              // the runner reports its durations (runnerTime, runCellTime)
	deadline time.Time         // zero: none
	grace    time.Duration
	budget   *budget

	// Guarded by kernel.mu.
	started  bool
	count    int
	stop     stopReason
	graceEnd time.Time
	sigSent  bool
	killed   bool // the guest killed the kernel to end this cell

	// Set by the pump before done is closed.
	ok       bool
	ename    string
	died     bool
	ws       unix.WaitStatus
	errOut   *api.Output           // silent runs: the error output
	errTail  []byte                // silent runs: the end of stderr
	tools    *guestproto.ToolSet   // the kernel's tools, when the run changed them
	answers  map[string]api.Output // the user expressions' answers
	reply    json.RawMessage       // a question's answer
	finished time.Time
	timer    *time.Timer // wakes the pump at the deadline
	// With trace, set by the pump before done is closed: the runner's own time for the
	// cell, and IPython's run_cell in it.
	runnerTime, runCellTime time.Duration

	// Outputs the pump queued for the execute handler to send, and the input() waiting
	// for a value, if any, after them.
	qmu    sync.Mutex
	queue  []api.Output
	input  *guestproto.InputRequest
	notify chan struct{}
	done   chan struct{}
}

func newRun(code string, silent bool, timeout, grace time.Duration, b *budget) *cellRun {
	r := &cellRun{op: "exec", code: code, silent: silent, grace: grace, budget: b,
		notify: make(chan struct{}, 1), done: make(chan struct{})}
	if timeout > 0 {
		r.deadline = time.Now().Add(timeout)
	}
	return r
}

func (r *cellRun) push(o api.Output) {
	r.qmu.Lock()
	r.queue = append(r.queue, o)
	r.qmu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// ask queues an input() of the cell, after the outputs before it.
func (r *cellRun) ask(in guestproto.InputRequest) {
	if len(in.Prompt) > guestproto.MaxInput/2 {
		in.Prompt = in.Prompt[:runeCut([]byte(in.Prompt), guestproto.MaxInput/2)]
	}
	r.qmu.Lock()
	r.input = &in
	r.qmu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// take returns the queued outputs, and the input() waiting after them (nil: none).
func (r *cellRun) take() ([]api.Output, *guestproto.InputRequest) {
	r.qmu.Lock()
	q, in := r.queue, r.input
	r.queue, r.input = nil, nil
	r.qmu.Unlock()
	return q, in
}

// kernel is one Python process running the IPython runner.
type kernel struct {
	pid int
	// preimported: forked from a template that ran the same pre-imports.
	preimported bool
	efd         int // eventfd that wakes the pump
	out         int // read ends, non-blocking, owned by the pump
	errp        int
	prR         int
	wmu         sync.Mutex
	prW         int // write end toward the runner, non-blocking; guarded by wmu
	// shell: the runner is a shell that reads command lines (langRuntime.shell), not JSON.
	shell bool

	mu     sync.Mutex
	run    *cellRun
	exited bool // the reaper delivered its exit status
	ws     unix.WaitStatus
	dead   bool          // the pump has ended: nothing more will run here
	gone   chan struct{} // closed when the pump has ended and closed the pipes

	emu sync.Mutex // guards efd against use after the pump closed it

	// Pump-only state.
	sbuf     []byte // stream reads
	pendName string
	pend     []byte
	flushAt  time.Time
	line     []byte
	skipping bool // inside a protocol line over the cap
	maxLine  int
}

type kernelSpec struct {
	user   *syscall.Credential // nil: the guest's own uid
	python string
	// rt: the runtime of a language other than Python, which the kernel then runs; its
	// image names it in messages. A template serves Python only.
	rt    *langRuntime
	image string
	env   []string
	dir   string
	// maxLine caps one protocol line from the runner.
	maxLine int
	// template: the socket of the kernel template to fork the kernel from; "": none.
	template string
	// preimport: the code the guest runs first; a template that ran the same says so.
	preimport string
	log       *slog.Logger
}

// startKernel starts a kernel; it is ready for begin once started (the runner reads its
// first command after IPython is up).
func startKernel(spec kernelSpec) (*kernel, error) {
	program := spec.python
	if spec.rt != nil {
		program, spec.template = spec.rt.program, ""
	}
	path, err := lookPath(program, spec.env)
	switch {
	case err != nil && spec.rt != nil:
		return nil, missingRuntime(spec.rt, spec.image)
	case err != nil:
		return nil, errors.New("the Python interpreter " + strconv.Quote(spec.python) + " was not found")
	}
	var fds []int // every descriptor made here, closed on failure
	pipe := func() (int, int, error) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return -1, -1, err
		}
		fds = append(fds, p[0], p[1])
		return p[0], p[1], nil
	}
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	outR, outW, err1 := pipe()
	errR, errW, err2 := pipe()
	inR, inW, err3 := pipe()
	prR, prW, err4 := pipe()
	devnull, err5 := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		closeAll()
		if devnull >= 0 {
			unix.Close(devnull)
		}
		return nil, err
	}
	fds = append(fds, devnull)
	pid, exit, preimported, err := 0, (<-chan unix.WaitStatus)(nil), false, error(nil)
	if spec.template != "" {
		pid, exit, preimported, err = forkKernel(spec.template, forkRequest{Python: spec.python, Cwd: spec.dir, Env: spec.env, Preimport: spec.preimport},
			[5]int{devnull, outW, errW, inR, prW})
		switch {
		case errors.Is(err, errTemplateEnv):
			spec.log.Info("the kernel's environment is not the template's: starting it afresh", "error", err)
		case err != nil:
			spec.log.Warn("the kernel template could not fork a kernel: starting one afresh", "error", err)
		}
	}
	if exit == nil {
		// The script travels in the environment, which the bootstrap empties again: argv
		// stays short for ps, and the user's processes do not inherit it.
		argv := []string{spec.python, "-c", pyrunner.Bootstrap}
		env := mergeEnv(spec.env, map[string]string{pyrunner.Env: pyrunner.Script})
		stdin := devnull
		if rt := spec.rt; rt != nil {
			argv = append([]string{rt.program}, rt.args...)
			env = mergeEnv(spec.env, map[string]string{runners.Env: rt.script})
			if rt.shell {
				stdin = inR // the shell's command input; a cell reads /dev/null
			}
		}
		pid, exit, err = procs().start(path, argv, &syscall.ProcAttr{
			Dir: spec.dir, Env: env, Sys: &syscall.SysProcAttr{Credential: spec.user},
			Files: []uintptr{uintptr(stdin), uintptr(outW), uintptr(errW), uintptr(inR), uintptr(prW)},
		})
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("could not start %s: %w", strconv.Quote(program), err)
	}
	for _, fd := range []int{devnull, outW, errW, inR, prW} {
		unix.Close(fd)
	}
	oomFirst(pid)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		killTree(pid, true)
		for _, fd := range []int{outR, errR, inW, prR} {
			unix.Close(fd)
		}
		return nil, err
	}
	for _, fd := range []int{outR, errR, prR, inW} {
		unix.SetNonblock(fd, true)
	}
	k := &kernel{pid: pid, preimported: preimported, efd: efd, out: outR, errp: errR, prR: prR, prW: inW,
		gone: make(chan struct{}), maxLine: spec.maxLine, shell: spec.rt != nil && spec.rt.shell}
	go func() {
		ws := <-exit
		k.mu.Lock()
		k.exited, k.ws = true, ws
		k.mu.Unlock()
		k.wake()
	}()
	go k.pump()
	return k, nil
}

func (k *kernel) wake() {
	var one = [8]byte{1}
	k.emu.Lock()
	if k.efd >= 0 {
		unix.Write(k.efd, one[:])
	}
	k.emu.Unlock()
}

func (k *kernel) isDead() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dead || k.exited
}

// begin starts r in the kernel. Whatever happens, r's done is closed eventually: by the
// pump, or here if the kernel is already gone.
func (k *kernel) begin(r *cellRun) error {
	k.mu.Lock()
	if k.dead {
		ws := k.ws
		k.mu.Unlock()
		r.died, r.ws = true, ws
		k.finish(r)
		return errKernelDead
	}
	if k.run != nil { // not reached: the server runs one cell at a time
		k.mu.Unlock()
		k.finish(r)
		return errors.New("the kernel is busy")
	}
	k.run = r
	if !r.deadline.IsZero() {
		// The pump sleeps until something happens; this is what happens at the deadline.
		r.timer = time.AfterFunc(time.Until(r.deadline), k.wake)
	}
	k.mu.Unlock()
	if k.shell {
		return k.write([]byte(shellLine(r)))
	}
	var env any = r.env
	if r.op == "env" {
		env = r.envList
	}
	msg, _ := json.Marshal(struct {
		Op       string            `json:"op"`
		Code     string            `json:"code,omitempty"`
		Silent   bool              `json:"silent,omitempty"`
		Quiet    bool              `json:"quiet,omitempty"`
		Context  string            `json:"ctx,omitempty"`
		Env      any               `json:"env,omitempty"`
		Displays bool              `json:"du,omitempty"`
		Exprs    map[string]string `json:"ux,omitempty"`
		Pos      int               `json:"pos"`
		Detail   int               `json:"detail,omitempty"`
		Stdin    bool              `json:"stdin,omitempty"`
		Trace    bool              `json:"tr,omitempty"`
	}{r.op, r.code, r.silent, r.quiet, r.context, env, r.displays, r.exprs, r.pos, r.detail, r.stdin, r.trace})
	return k.write(append(msg, '\n'))
}

// shellLine is what a shell kernel reads for r: its runner at its start (a ping), or a cell.
func shellLine(r *cellRun) string {
	if r.op == "exec" {
		return runners.BashCell(r.code, r.quiet || r.silent, r.env)
	}
	return runners.BashLoad
}

// write writes all of b toward the runner, waiting while the pipe is full.
func (k *kernel) write(b []byte) error {
	k.wmu.Lock()
	defer k.wmu.Unlock()
	for len(b) > 0 {
		n, err := unix.Write(k.prW, b)
		if n > 0 {
			b = b[n:]
		}
		switch err {
		case nil, unix.EINTR:
		case unix.EAGAIN:
			if k.isDead() {
				return errKernelDead
			}
			pfd := []unix.PollFd{{Fd: int32(k.prW), Events: unix.POLLOUT}}
			unix.Poll(pfd, 200)
		default:
			return errKernelDead
		}
	}
	return nil
}

// ack answers a runner message that waits for one. The write itself never blocks (a full
// pipe means forged messages, which get no answer); the lock may be held for a moment by
// begin, which may not have returned yet when the runner already answers.
func (k *kernel) ack() {
	k.wmu.Lock()
	unix.Write(k.prW, []byte("{\"op\":\"ack\"}\n"))
	k.wmu.Unlock()
}

// stopRun asks the pump to stop the running cell for reason: target, or (nil) whichever
// cell runs. It reports whether it was running. A target ends the race of a caller whose
// cell has ended with the next cell: a late stop of the one must never land on the other.
// A silent run is not stopped by an interrupt; one of a kernel's start (its preimport, its
// environment) is not stopped at all: it has its own time limit, and a restart that comes
// while a kernel starts waits for it (kmu) instead of failing the start it raced with. A
// context's drop (it runs the user's finalizers) is ended by a restart.
func (k *kernel) stopRun(target *cellRun, reason stopReason) bool {
	k.mu.Lock()
	r := k.run
	if r == nil || (target != nil && r != target) || r.startup || (r.silent && reason == stopInterrupt) {
		k.mu.Unlock()
		return false
	}
	if r.stop == stopNone {
		r.stop = reason
		r.graceEnd = time.Now().Add(r.grace)
		if reason == stopRestart || r.silent {
			r.graceEnd = time.Now()
		}
	}
	k.mu.Unlock()
	k.wake()
	return true
}

// kill kills the kernel's process tree and waits until the pump has ended.
func (k *kernel) kill() {
	k.signal(killTree)
	<-k.gone
}

// freeze stops the kernel's process tree: it runs nothing more, and keeps what it holds
// until kill or killLater.
func (k *kernel) freeze() {
	k.signal(func(pid int, alive bool) { stopTree(pid, alive) })
}

// killLater kills the kernel's process tree without waiting for it to end: its teardown
// (a process unmapping ~100 MiB: ~6 ms on a VM here) goes on while the caller answers.
func (k *kernel) killLater() {
	k.signal(killTree)
}

func (k *kernel) signal(f func(pid int, leaderAlive bool)) {
	k.mu.Lock()
	alive := !k.exited
	k.mu.Unlock()
	if alive {
		f(k.pid, true)
	}
}

// pump is the kernel's one reader: it reads the stream pipes and the protocol pipe in
// order, enforces deadlines, and ends when the kernel has exited.
func (k *kernel) pump() {
	defer func() {
		for _, fd := range []int{k.out, k.errp, k.prR} {
			unix.Close(fd)
		}
		k.emu.Lock()
		unix.Close(k.efd)
		k.efd = -1
		k.emu.Unlock()
		k.wmu.Lock()
		unix.Close(k.prW)
		k.prW = -1
		k.wmu.Unlock()
		close(k.gone)
	}()
	buf := make([]byte, 64<<10)
	k.sbuf = make([]byte, 64<<10)
	efd := k.efd
	gaveUp := false
	fds := []unix.PollFd{
		{Fd: int32(k.out), Events: unix.POLLIN},
		{Fd: int32(k.errp), Events: unix.POLLIN},
		{Fd: int32(k.prR), Events: unix.POLLIN},
		{Fd: int32(efd), Events: unix.POLLIN},
	}
	for {
		// What the last round readied (a cell's caller waits for its run's done) runs
		// before this goroutine blocks in poll: with the guest's one P (tuneMemory), it
		// would wait until sysmon takes the P from the blocked poll, 20 µs to 10 ms later
		// (a cell's answer waited ~1 ms for it under gVisor).
		runtime.Gosched()
		_, err := unix.Poll(fds, k.pollTimeout(time.Now()))
		if err != nil && err != unix.EINTR && !gaveUp {
			gaveUp = true
			killTree(k.pid, true) // cannot wait any more: give up on this kernel
		}
		if fds[3].Revents != 0 {
			var b [8]byte
			unix.Read(efd, b[:])
		}
		if fds[0].Revents != 0 {
			k.readStream(&fds[0], "stdout", len(k.sbuf))
		}
		if fds[1].Revents != 0 {
			k.readStream(&fds[1], "stderr", len(k.sbuf))
		}
		if fds[2].Revents != 0 {
			k.readProto(fds, buf)
		}
		k.tick(time.Now())
		k.mu.Lock()
		exited, ws := k.exited, k.ws
		k.mu.Unlock()
		if exited {
			// What the kernel wrote before it died is in the pipes: take it, then kill what
			// is left of its process group.
			if fds[2].Fd >= 0 {
				k.readProto(fds, buf)
			}
			k.drainStreams(fds)
			unix.Kill(-k.pid, unix.SIGKILL)
			k.mu.Lock()
			r := k.run
			k.run = nil
			k.dead = true
			k.mu.Unlock()
			if r != nil {
				r.died, r.ws = true, ws
				k.finish(r)
			}
			return
		}
		if fds[2].Fd < 0 && !gaveUp {
			// The runner closed its side of the protocol: it can no longer be driven.
			gaveUp = true
			killTree(k.pid, true)
		}
	}
}

// pollTimeout is the time until the next deadline of the pump, in ms (-1: none).
func (k *kernel) pollTimeout(now time.Time) int {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	consider(k.flushAt)
	k.mu.Lock()
	if r := k.run; r != nil {
		switch {
		case r.stop == stopNone:
			consider(r.deadline)
		case !r.killed:
			consider(r.graceEnd)
		}
	}
	k.mu.Unlock()
	if next.IsZero() {
		return -1
	}
	d := next.Sub(now)
	if d <= 0 {
		return 0
	}
	return int((d + time.Millisecond - 1) / time.Millisecond)
}

// tick enforces the running cell's deadline and grace period and sends stream text that
// has waited long enough.
func (k *kernel) tick(now time.Time) {
	kill := false
	k.mu.Lock()
	r := k.run
	if r != nil {
		if r.stop == stopNone && !r.deadline.IsZero() && !now.Before(r.deadline) {
			r.stop = stopTimeout
			r.graceEnd = now.Add(r.grace)
			if r.silent {
				r.graceEnd = now
			}
		}
		if r.stop != stopNone && r.stop != stopRestart && r.started && !r.sigSent && !r.silent {
			// The whole group: a program the cell started stops too, as with Ctrl-C.
			unix.Kill(-k.pid, unix.SIGINT)
			r.sigSent = true
		}
		if r.stop != stopNone && !r.killed && !now.Before(r.graceEnd) {
			r.killed = true
			kill = !k.exited
		}
	}
	k.mu.Unlock()
	if kill {
		killTree(k.pid, true)
	}
	if !k.flushAt.IsZero() && !now.Before(k.flushAt) {
		k.flush(r, false)
	}
}

func (k *kernel) current() *cellRun {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.run
}

// readStream reads what is in a stream pipe, up to about max bytes.
func (k *kernel) readStream(pfd *unix.PollFd, name string, max int) {
	if pfd.Fd < 0 {
		return
	}
	for got := 0; got < max; {
		n, err := unix.Read(int(pfd.Fd), k.sbuf)
		if n > 0 {
			got += n
			k.streamData(name, k.sbuf[:n])
			continue
		}
		if err == unix.EINTR {
			continue
		}
		if err != unix.EAGAIN {
			pfd.Fd = -1 // end of file: the writers are gone
		}
		return
	}
}

func (k *kernel) drainStreams(fds []unix.PollFd) {
	k.readStream(&fds[0], "stdout", maxDrain)
	k.readStream(&fds[1], "stderr", maxDrain)
}

func (k *kernel) streamData(name string, data []byte) {
	r := k.current()
	if r == nil {
		return // idle: nobody to tell
	}
	if r.silent {
		if name == "stderr" {
			r.errTail = append(r.errTail, data...)
			if len(r.errTail) > stderrTail {
				r.errTail = append(r.errTail[:0], r.errTail[len(r.errTail)-stderrTail:]...)
			}
		}
		return
	}
	data = r.budget.text(data, name)
	if len(data) == 0 {
		return
	}
	if k.pendName != "" && k.pendName != name {
		k.flush(r, true)
	}
	k.pendName = name
	k.pend = append(k.pend, data...)
	if k.flushAt.IsZero() {
		k.flushAt = time.Now().Add(coalesce)
	}
	if len(k.pend) >= maxPending {
		k.flush(r, false)
	}
}

// flush sends pending stream text; unless all, an incomplete rune at the end waits.
func (k *kernel) flush(r *cellRun, all bool) {
	n := len(k.pend)
	if !all {
		n = completeUTF8(k.pend)
	}
	if n > 0 && r != nil && !r.silent {
		r.push(api.Output{Type: api.OutputStream, Name: k.pendName, Text: string(k.pend[:n])})
	}
	k.pend = append(k.pend[:0], k.pend[n:]...)
	k.flushAt = time.Time{}
	if len(k.pend) == 0 {
		k.pendName = ""
	}
}

// readProto reads the protocol pipe and handles each complete line, draining the stream
// pipes first: the runner flushed them before it wrote the line.
func (k *kernel) readProto(fds []unix.PollFd, buf []byte) {
	pfd := &fds[2]
	for pfd.Fd >= 0 {
		n, err := unix.Read(int(pfd.Fd), buf)
		if n <= 0 {
			if err == unix.EINTR {
				continue
			}
			if err != unix.EAGAIN {
				pfd.Fd = -1
			}
			return
		}
		data := buf[:n]
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				if !k.skipping && len(k.line)+len(data) > k.maxLine {
					k.skipping, k.line = true, k.line[:0]
				}
				if !k.skipping {
					k.line = append(k.line, data...)
				}
				break
			}
			seg := data[:i]
			data = data[i+1:]
			switch {
			case k.skipping || len(k.line)+len(seg) > k.maxLine:
				k.skipping, k.line = false, k.line[:0]
				k.drainStreams(fds)
				k.oversized()
			case len(k.line) == 0:
				k.drainStreams(fds)
				k.handle(seg)
			default:
				k.line = append(k.line, seg...)
				k.drainStreams(fds)
				k.handle(k.line)
				k.line = k.line[:0]
				if cap(k.line) > 1<<20 {
					k.line = nil // do not keep a large image's buffer for the kernel's life
				}
			}
		}
	}
}

// runnerMsg is a line from the runner.
type runnerMsg struct {
	T     string      `json:"t"`
	N     int         `json:"n"`
	O     *api.Output `json:"o"`
	A     int         `json:"a"`
	OK    bool        `json:"ok"`
	EName string      `json:"ename"`
	// "tools": all the kernel's tools (module cellbox), passed on as they are; the
	// server checks them.
	Tools []guestproto.Tool `json:"tools"`
	// "input": a cell's input() waiting for a value.
	Prompt   string `json:"prompt"`
	Password bool   `json:"password"`
	// "done": the user expressions' answers, a question's answer.
	UX    map[string]api.Output `json:"ux"`
	Reply json.RawMessage       `json:"reply"`
	// "done" of a run with trace: the runner's durations, in ns.
	Trace *struct {
		Runner  int64 `json:"runner"`
		RunCell int64 `json:"run_cell"`
	} `json:"tr"`
}

// oversized handles a runner line over the cap: an output too large to carry.
func (k *kernel) oversized() {
	k.ack() // only outputs get this large; the runner may be waiting
	r := k.current()
	if r == nil || r.silent {
		return
	}
	k.flush(r, true)
	r.budget.richCut += int64(k.maxLine)
	r.budget.richCutN++
}

func (k *kernel) handle(line []byte) {
	var m runnerMsg
	if err := json.Unmarshal(line, &m); err != nil {
		// The runner writes valid JSON; if it did not, it must not wait forever.
		if bytes.Contains(line, []byte(`"a":1`)) {
			k.ack()
		}
		return
	}
	r := k.current()
	switch m.T {
	case "started":
		if r != nil {
			k.mu.Lock()
			r.started, r.count = true, m.N
			k.mu.Unlock()
		}
	case "out":
		if m.A != 0 {
			defer k.ack()
		}
		if r == nil || m.O == nil {
			return
		}
		o := *m.O
		if r.silent {
			if o.Type == api.OutputError {
				r.errOut = &o
			}
			return
		}
		k.flush(r, true)
		if r.budget.rich(&o) {
			r.push(o)
		}
	case "input":
		if r != nil && r.stdin && !r.silent {
			k.flush(r, true)
			r.ask(guestproto.InputRequest{Prompt: m.Prompt, Password: m.Password})
		}
	case "tools":
		if r != nil && !r.silent {
			tools := m.Tools
			if tools == nil {
				tools = []guestproto.Tool{}
			}
			r.tools = &guestproto.ToolSet{Tools: tools}
		}
	case "done":
		if r == nil {
			return
		}
		k.mu.Lock()
		if k.run == r {
			k.run = nil
		}
		k.mu.Unlock()
		r.ok, r.ename, r.count = m.OK, m.EName, m.N
		if !r.silent {
			r.answers, r.reply = m.UX, m.Reply
		}
		if r.trace && m.Trace != nil {
			r.runnerTime, r.runCellTime = time.Duration(m.Trace.Runner), time.Duration(m.Trace.RunCell)
		}
		k.finish(r)
	}
}

// finish ends r: pending text, the truncation marker, then done.
func (k *kernel) finish(r *cellRun) {
	if r.timer != nil {
		r.timer.Stop()
	}
	k.flush(r, true)
	if !r.silent {
		if m := r.budget.marker(); m != nil {
			r.push(*m)
		}
	}
	r.finished = time.Now()
	close(r.done)
}

package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// maxCommandStream caps one stream of a command whatever the configuration says: both
// streams, JSON-escaped (up to 6 bytes a byte), must fit one protocol line.
const maxCommandStream = (guestproto.MaxMessageSize - 64<<10) / 12

// afterExit is how long a command's output is still read once it has exited and its
// process group is killed: only a process that left the group can still hold the pipes.
const afterExit = 200 * time.Millisecond

// capture is one output stream of a command, read to its end. It keeps the first max bytes,
// cut at a UTF-8 boundary, and counts the rest as dropped.
type capture struct {
	name    string
	max     int
	buf     []byte // what is kept; with a streamer, what waits to be sent
	sent    int    // with a streamer: bytes sent
	dropped int64
	done    chan struct{} // closed when read has returned
}

func newCapture(name string, limit int) *capture {
	return &capture{name: name, max: limit, done: make(chan struct{})}
}

// read reads f to its end, keeping what it reads, or passing it to sw when there is one.
func (c *capture) read(f *os.File, sw *streamer) {
	defer close(c.done)
	b := make([]byte, 32<<10)
	for {
		n, err := f.Read(b)
		if n > 0 {
			if sw != nil {
				sw.add(c, b[:n])
			} else {
				c.keep(b[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// keep appends data to buf, up to max bytes in all.
func (c *capture) keep(data []byte) {
	if c.dropped > 0 {
		c.dropped += int64(len(data)) // once cut, nothing more: not even a rune that would fit
		return
	}
	c.buf = append(c.buf, data...)
	if over := c.sent + len(c.buf) - c.max; over > 0 {
		n := runeCut(c.buf, len(c.buf)-over)
		c.dropped += int64(len(c.buf) - n)
		c.buf = c.buf[:n]
	}
}

// streamer sends a command's stdout and stderr on w as outputs while it runs. A read's
// text waits up to coalesce for what follows (a program writing a byte at a time must not
// cost a message a byte), and goes without an incomplete UTF-8 sequence at its end, which
// waits for the next read. The other stream's waiting text is sent first, so the order of
// the two streams is kept. After a failed write (nobody listens any more) output is dropped.
type streamer struct {
	w       io.Writer
	streams [2]*capture

	mu     sync.Mutex
	timer  *time.Timer // pending flush; nil: none
	failed bool
	closed bool
}

func (sw *streamer) add(c *capture, data []byte) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	for _, o := range sw.streams {
		if o != c {
			sw.flush(o, false)
		}
	}
	c.keep(data)
	if len(c.buf) >= maxPending {
		sw.flush(c, false)
	}
	if len(c.buf) > 0 && sw.timer == nil && !sw.closed {
		sw.timer = time.AfterFunc(coalesce, sw.tick)
	}
}

func (sw *streamer) tick() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.timer = nil
	if sw.closed {
		return
	}
	for _, c := range sw.streams {
		sw.flush(c, false)
	}
}

// flush sends what c's buffer holds; unless all, an incomplete rune at its end stays.
// sw.mu is held.
func (sw *streamer) flush(c *capture, all bool) {
	n := len(c.buf)
	if !all {
		n = completeUTF8(c.buf)
	}
	if n == 0 {
		return
	}
	if !sw.failed {
		o := api.Output{Type: api.OutputStream, Name: c.name, Text: string(c.buf[:n])}
		if err := writeMsg(sw.w, guestproto.Message{Output: &o}); err != nil {
			sw.failed = true
		}
	}
	c.sent += n
	c.buf = append(c.buf[:0], c.buf[n:]...)
}

// close sends what is left, once both streams have been read to their end.
func (sw *streamer) close() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.closed = true
	if sw.timer != nil {
		sw.timer.Stop()
	}
	for _, c := range sw.streams {
		sw.flush(c, true)
	}
}

// command runs a program, in workspace folder req.Cwd or, when abs is set, in abs, an
// absolute folder of the sandbox that the program enters itself as the sandbox's user
// (after fork, before exec), so the kernel's permissions decide. Its run ends, and its process tree is killed, when ctx does (the
// caller went away) or when an interrupt names runID, before or after it started. With
// stream, its output is sent on w as it is read, and the result carries none.
func (s *server) command(ctx context.Context, w io.Writer, runID string, req *api.CommandRequest, abs string, stream bool) guestproto.Message {
	if req == nil || len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return errMsg(api.CodeInvalidArgument, "cmd must name a program to run, e.g. [\"ls\", \"-l\"]")
	}
	for _, a := range req.Cmd {
		if strings.ContainsRune(a, 0) {
			return errMsg(api.CodeInvalidArgument, "cmd arguments cannot contain NUL bytes")
		}
	}
	if e := checkEnv(req.Env); e != nil {
		return guestproto.Message{Error: e}
	}
	cfg := guestproto.Config{}
	if c := s.config(); c != nil {
		cfg = *c
	}
	cfg = withDefaults(cfg)
	timeout := seconds(req.TimeoutS)
	if timeout <= 0 {
		timeout = seconds(cfg.DefaultTimeoutS)
	}
	env := mergeEnv(os.Environ(), egressEnv(s.opts.Egress, s.bundlePath()), cfg.Env, req.Env)

	dir := abs
	if abs != "" {
		if e := checkDir(abs, req.Cwd); e != nil {
			return guestproto.Message{Error: e}
		}
	} else {
		rel := "."
		if req.Cwd != "" {
			var perr *guestproto.Error
			if rel, perr = cleanPath(req.Cwd); perr != nil {
				return guestproto.Message{Error: perr}
			}
		}
		dfd, err := s.root.open(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			e := fsError(rel, err)
			e.Message = "cwd: " + e.Message
			return guestproto.Message{Error: e}
		}
		defer unix.Close(dfd)
		// Through the open descriptor, the command starts in the folder that was checked,
		// even if a symbolic link is swapped in meanwhile.
		dir = filepath.Join(s.opts.Workspace, rel)
		if s.procFD {
			dir = "/proc/self/fd/" + strconv.Itoa(dfd)
		}
	}

	res := &api.CommandResult{Files: []api.FileChange{}}
	notStarted := func(msg string) guestproto.Message {
		res.Status, res.ExitCode, res.Message = api.StatusError, -1, msg
		return guestproto.Message{CommandResult: res}
	}
	path, err := lookPath(req.Cmd[0], env)
	if err != nil {
		return notStarted(startError(req.Cmd[0], err))
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return errMsg(api.CodeUnavailable, "could not create a pipe for the command")
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return errMsg(api.CodeUnavailable, "could not create a pipe for the command")
	}
	defer errR.Close()
	var inR, inW *os.File
	if req.Stdin != "" {
		if inR, inW, err = os.Pipe(); err != nil {
			outW.Close()
			errW.Close()
			return errMsg(api.CodeUnavailable, "could not create a pipe for the command")
		}
		defer inW.Close()
	} else if inR, err = os.Open(os.DevNull); err != nil {
		outW.Close()
		errW.Close()
		return errMsg(api.CodeUnavailable, "could not open /dev/null for the command")
	}

	ctx, end := s.runs.start(ctx, runID)
	defer end()
	if ctx.Err() != nil {
		res.Status, res.ExitCode, res.Message = api.StatusInterrupted, -1, "the command was interrupted before it started"
		return guestproto.Message{CommandResult: res}
	}
	before := s.root.snapshot()
	oom0 := s.oom.read()
	start := time.Now()
	pid, exit, err := procs().start(path, req.Cmd, &syscall.ProcAttr{Dir: dir, Env: env,
		Files: []uintptr{inR.Fd(), outW.Fd(), errW.Fd()}, Sys: &syscall.SysProcAttr{Credential: s.user}})
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		if abs != "" {
			if e := dirError(abs, s.user, err); e != nil {
				return guestproto.Message{Error: e}
			}
			if errors.Is(err, unix.EACCES) {
				return notStarted(fmt.Sprintf("cannot run %s in %q: permission denied (the program is not executable, or the sandbox's user may not enter the folder)", req.Cmd[0], abs))
			}
		}
		return notStarted(startError(req.Cmd[0], err))
	}
	oomFirst(pid)
	s.mu.Lock()
	closing := s.closing
	s.cmds[pid] = true
	s.mu.Unlock()
	if closing {
		killTree(pid, true)
	}

	limit := min(cfg.MaxOutputBytes, maxCommandStream)
	stdout, stderr := newCapture("stdout", limit), newCapture("stderr", limit)
	var sw *streamer
	if stream {
		sw = &streamer{w: w, streams: [2]*capture{stdout, stderr}}
	}
	go stdout.read(outR, sw)
	go stderr.read(errR, sw)
	if inW != nil {
		go func() {
			io.WriteString(inW, req.Stdin)
			inW.Close()
		}()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	timedOut, interrupted := false, false
	var ws unix.WaitStatus
	select {
	case ws = <-exit:
	case <-timer.C:
		timedOut = true
		killTree(pid, true)
		ws = <-exit
	case <-ctx.Done():
		interrupted = true
		killTree(pid, true)
		ws = <-exit
	}
	s.mu.Lock()
	delete(s.cmds, pid)
	s.mu.Unlock()
	// Everything it started goes with it.
	unix.Kill(-pid, unix.SIGKILL)
	deadline := time.Now().Add(afterExit)
	outR.SetReadDeadline(deadline)
	errR.SetReadDeadline(deadline)
	if inW != nil {
		inW.SetWriteDeadline(time.Now())
	}
	<-stdout.done
	<-stderr.done
	if sw != nil {
		sw.close()
	} else {
		res.Stdout, res.Stderr = string(stdout.buf), string(stderr.buf)
	}

	res.ExitCode = exitCode(ws)
	res.DurationMS = time.Since(start).Milliseconds()
	res.Files = diff(before, s.root.snapshot())
	switch {
	case interrupted:
		res.Status = api.StatusInterrupted
		res.Message = "the command was interrupted: it and every process it started were killed"
	case timedOut:
		res.Status = api.StatusTimeout
		res.Message = fmt.Sprintf("the command ran past its time limit of %s and was killed", timeout)
	case ws.Signaled() && ws.Signal() == unix.SIGKILL && s.oom.known() && s.oom.read() > oom0:
		res.Status = api.StatusOOM
		res.Message = "the command ran out of memory and was killed"
		if cfg.MemoryMB > 0 {
			res.Message = fmt.Sprintf("the command ran out of memory (limit %d MiB) and was killed", cfg.MemoryMB)
		}
	case ws.Exited() && ws.ExitStatus() == 0:
		res.Status = api.StatusOK
	default:
		res.Status = api.StatusError
		if ws.Signaled() {
			res.Message = "the command was killed by " + exitText(ws)
		}
	}
	var cut []string
	for _, c := range []*capture{stdout, stderr} {
		if c.dropped > 0 {
			res.Truncated = true
			cut = append(cut, fmt.Sprintf("%s of %s", byteSize(c.dropped), c.name))
		}
	}
	if len(cut) > 0 {
		note := fmt.Sprintf("output truncated: %s not shown (limit %s per stream)", strings.Join(cut, " and "), byteSize(int64(limit)))
		if res.Message != "" {
			note = res.Message + "; " + note
		}
		res.Message = note
	}
	return guestproto.Message{CommandResult: res}
}

// checkDir refuses a program's folder (Request.Dir) that is not an absolute path, or that
// comes with a workspace cwd too.
func checkDir(dir, cwd string) *guestproto.Error {
	switch {
	case cwd != "":
		return &guestproto.Error{Code: api.CodeInvalidArgument, Message: "give the command's folder once: as a workspace cwd or as an absolute folder, not both"}
	case !strings.HasPrefix(dir, "/") || strings.ContainsRune(dir, 0) || len(dir) >= unix.PathMax:
		return &guestproto.Error{Code: api.CodeInvalidArgument, Message: fmt.Sprintf("cwd %.200q must be an absolute path without NUL bytes, shorter than %d bytes", dir, unix.PathMax)}
	}
	return nil
}

// dirError explains a failed start whose cause was the folder dir, if it was: a folder
// that is not there (or not a folder) makes the child's chdir fail before its exec. The
// same errors can come from the exec (a script's interpreter that is missing), so the
// folder is tried again, as the user and never as the guest: a child started like the
// program enters dir and then execs "/", which fails with EACCES once the chdir worked.
// The guest's own look (a stat as root, through its own /proc/self) would tell the caller
// what the user may not see, and could be raced with a link swapped in after the chdir.
// A folder that exists but that the user may not enter is not told from a program the
// user may not run (both are EACCES); nil then.
func dirError(dir string, user *syscall.Credential, err error) *guestproto.Error {
	if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP) {
		return nil
	}
	var sys *syscall.SysProcAttr
	if user != nil {
		sys = &syscall.SysProcAttr{Credential: user}
	}
	_, _, perr := procs().start("/", []string{"/"}, &syscall.ProcAttr{Dir: dir, Sys: sys})
	switch {
	case perr == nil: // cannot be: "/" is a folder
		return nil
	case errors.Is(perr, unix.ENOENT):
		return &guestproto.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("cwd: no such folder: %q", dir)}
	case errors.Is(perr, unix.ENOTDIR):
		return &guestproto.Error{Code: api.CodeInvalidArgument, Message: fmt.Sprintf("cwd %q is not a folder (it, or a folder on its way, is a file)", dir)}
	case errors.Is(perr, unix.ELOOP):
		return &guestproto.Error{Code: api.CodeInvalidArgument, Message: fmt.Sprintf("cwd %q: too many levels of symbolic links", dir)}
	}
	return nil
}

// checkEnv refuses what cannot be put in an environment: a name that is empty or holds '='
// or NUL, a value that holds NUL. The server checks names more strictly.
func checkEnv(env map[string]string) *guestproto.Error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			name := k
			if len(name) > 64 {
				name = name[:64] + "..."
			}
			return &guestproto.Error{Code: api.CodeInvalidArgument,
				Message: fmt.Sprintf("env %q: names must be non-empty without '=' or NUL, values without NUL", name)}
		}
	}
	return nil
}

// startError explains why program could not be started.
// atLimit reports whether err is a fork's or an exec's at the sandbox's limits: its pids
// limit (EAGAIN) or its memory (ENOMEM).
func atLimit(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOMEM)
}

// atLimitAdvice says what to do about atLimit.
const atLimitAdvice = "the sandbox is at its limit of processes (pids) or of memory; " +
	"end some of its processes, or end the session and create one with higher limits"

func startError(program string, err error) string {
	switch {
	case errors.Is(err, unix.ENOENT):
		return "program not found: " + program
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return "cannot run " + program + ": permission denied (is it executable?)"
	case errors.Is(err, unix.ENOEXEC):
		return "cannot run " + program + ": not an executable format"
	case atLimit(err):
		return "cannot run " + program + ": " + atLimitAdvice
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return "cannot run " + program + ": " + errno.Error()
	}
	return "cannot run " + program
}

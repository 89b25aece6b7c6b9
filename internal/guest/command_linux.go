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

// capture reads a pipe to its end, keeping the first max bytes.
type capture struct {
	buf     []byte
	max     int
	dropped int64
	done    chan struct{}
}

func newCapture(f *os.File, limit int) *capture {
	c := &capture{max: limit, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		b := make([]byte, 32<<10)
		for {
			n, err := f.Read(b)
			keep := min(n, c.max-len(c.buf))
			c.buf = append(c.buf, b[:keep]...)
			c.dropped += int64(n - keep)
			if err != nil {
				return
			}
		}
	}()
	return c
}

// command runs a program. Its run ends, and its process tree is killed, when ctx does (the
// caller went away) or when an interrupt names runID, before or after it started.
func (s *server) command(ctx context.Context, runID string, req *api.CommandRequest) guestproto.Message {
	if req == nil || len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return errMsg(api.CodeInvalidArgument, "cmd must name a program to run, e.g. [\"ls\", \"-l\"]")
	}
	for _, a := range req.Cmd {
		if strings.ContainsRune(a, 0) {
			return errMsg(api.CodeInvalidArgument, "cmd arguments cannot contain NUL bytes")
		}
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
	env := mergeEnv(os.Environ(), cfg.Env, req.Env)

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
	// Through the open descriptor, the command starts in the folder that was checked, even
	// if a symbolic link is swapped in meanwhile.
	dir := filepath.Join(s.opts.Workspace, rel)
	if s.procFD {
		dir = "/proc/self/fd/" + strconv.Itoa(dfd)
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
	stdout, stderr := newCapture(outR, limit), newCapture(errR, limit)
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

	res.ExitCode = exitCode(ws)
	res.Stdout, res.Stderr = string(stdout.buf), string(stderr.buf)
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
	for _, c := range []struct {
		name string
		c    *capture
	}{{"stdout", stdout}, {"stderr", stderr}} {
		if c.c.dropped > 0 {
			res.Truncated = true
			cut = append(cut, fmt.Sprintf("%s of %s", byteSize(c.c.dropped), c.name))
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

// startError explains why program could not be started.
func startError(program string, err error) string {
	switch {
	case errors.Is(err, unix.ENOENT):
		return "program not found: " + program
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return "cannot run " + program + ": permission denied (is it executable?)"
	case errors.Is(err, unix.ENOEXEC):
		return "cannot run " + program + ": not an executable format"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return "cannot run " + program + ": " + errno.Error()
	}
	return "cannot run " + program
}

package guest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// templateTimeout bounds one request to the template, which may still be preparing (it
// takes the request once its imports are done).
const templateTimeout = 60 * time.Second

// forkKernel asks the template listening at socket for a kernel in this sandbox whose
// descriptors 0 to 4 are fds, running fr.Python (the template's must be the same) in fr.Cwd
// with fr.Env. It returns the kernel's pid, which the guest reaps (procTable.adopt), and
// whether the template ran the same pre-imports (fr.Preimport).
//
// The request carries a pidfd of the guest itself: the template puts the kernel into the
// namespaces and cgroups of the process that asks, and only that one (see template.py).
// forkRequest is the request's JSON line.
type forkRequest struct {
	Python    string   `json:"python"`
	Cwd       string   `json:"cwd"`
	Env       []string `json:"env"`
	Preimport string   `json:"preimport"`
}

func forkKernel(socket string, fr forkRequest, fds [5]int) (pid int, exit <-chan unix.WaitStatus, preimported bool, err error) {
	pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return 0, nil, false, fmt.Errorf("pidfd of the guest: %w", err)
	}
	defer unix.Close(pidfd)
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("unix", socket)
	if err != nil {
		return 0, nil, false, err
	}
	defer c.Close()
	conn := c.(*net.UnixConn)
	conn.SetDeadline(time.Now().Add(templateTimeout))
	req, err := json.Marshal(fr)
	if err != nil {
		return 0, nil, false, err
	}
	req = append(req, '\n')
	rights := unix.UnixRights(pidfd, fds[0], fds[1], fds[2], fds[3], fds[4])
	n, _, err := conn.WriteMsgUnix(req, rights, nil)
	if err != nil {
		return 0, nil, false, err
	}
	if n < len(req) {
		if _, err := conn.Write(req[n:]); err != nil {
			return 0, nil, false, err
		}
	}
	conn.CloseWrite()
	pid, preimported, err = readAnswer(conn)
	switch {
	case pid > 0:
		// The kernel runs, whatever else was said: it is ours to reap, and to kill if it
		// cannot be used.
		exit = procs().adopt(pid)
		if err != nil {
			killTree(pid, true)
			select {
			case <-exit:
			case <-time.After(5 * time.Second):
			}
			return 0, nil, false, err
		}
		return pid, exit, preimported, nil
	case err != nil:
		return 0, nil, false, err
	}
	return 0, nil, false, errors.New("the template closed the connection without an answer")
}

// errTemplateEnv is the template's "env" code: the request's environment differs from the
// template's where Python reads it at start, so the kernel must be started afresh.
var errTemplateEnv = errors.New("the environment differs from the kernel template's")

// readAnswer reads the template's answer to the end: "pid N" (and " preimported") from the
// template's child, "error CODE MESSAGE" lines from any of its processes, then EOF once each
// has closed its copy of the connection (the kernel closes its own before it runs
// anything). A pid with an error means a kernel that runs but cannot be used. The error
// wraps errTemplateEnv when a line's code is "env"; the messages are for people only.
func readAnswer(r io.Reader) (pid int, preimported bool, err error) {
	var msgs []string
	env := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pid ") && pid == 0:
			f := strings.Fields(line)
			p, err := strconv.Atoi(f[1])
			if err != nil || p <= 1 || len(f) > 3 || len(f) == 3 && f[2] != "preimported" {
				return pid, false, fmt.Errorf("the template answered %q", line)
			}
			pid, preimported = p, len(f) == 3
		case strings.HasPrefix(line, "error "):
			code, msg, _ := strings.Cut(strings.TrimPrefix(line, "error "), " ")
			env = env || code == "env"
			msgs = append(msgs, msg)
		default:
			msgs = append(msgs, "unexpected answer "+strconv.Quote(line))
		}
	}
	if err := sc.Err(); err != nil {
		msgs = append(msgs, err.Error())
	}
	switch {
	case len(msgs) == 0:
		return pid, preimported, nil
	case env:
		return pid, false, fmt.Errorf("%s: %w", strings.Join(msgs, "; "), errTemplateEnv)
	}
	return pid, false, errors.New(strings.Join(msgs, "; "))
}

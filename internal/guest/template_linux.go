package guest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
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
	// "pid N" from the template's child, errors from any of its processes, then EOF once
	// each has closed its copy of the connection (the kernel closes its own before it runs
	// anything).
	var msgs []string
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 4096), 4096)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pid ") && pid == 0:
			f := strings.Fields(line)
			p, err := strconv.Atoi(f[1])
			if err != nil || p <= 1 || len(f) > 3 || len(f) == 3 && f[2] != "preimported" {
				return 0, nil, false, fmt.Errorf("the template answered %q", line)
			}
			pid, preimported = p, len(f) == 3
		case strings.HasPrefix(line, "error "):
			msgs = append(msgs, strings.TrimPrefix(line, "error "))
		default:
			msgs = append(msgs, "unexpected answer "+strconv.Quote(line))
		}
	}
	if err := sc.Err(); err != nil {
		msgs = append(msgs, err.Error())
	}
	switch {
	case pid > 0:
		// The kernel runs, whatever else was said: it is ours to reap, and to kill if it
		// cannot be used.
		exit = procs().adopt(pid)
		if len(msgs) > 0 {
			killTree(pid, true)
			select {
			case <-exit:
			case <-time.After(5 * time.Second):
			}
			return 0, nil, false, errors.New(strings.Join(msgs, "; "))
		}
		return pid, exit, preimported, nil
	case len(msgs) > 0:
		return 0, nil, false, errors.New(strings.Join(msgs, "; "))
	}
	return 0, nil, false, errors.New("the template closed the connection without an answer")
}

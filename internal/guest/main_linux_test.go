package guest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/testbin"
)

// mainEnv makes the test binary run Main instead of the tests (see TestMain).
const mainEnv = "CELLBOX_GUEST_TEST_MAIN"

type guestProc struct {
	*guestproto.Client
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dir   string
}

// startGuestProcess runs Main in a child process, as a backend runs `cellbox guest`, with
// args before its own.
func startGuestProcess(t *testing.T, args ...string) *guestProc {
	t.Helper()
	needIPython(t)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], append(args, "-workspace", dir)...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := guestproto.Dial(ctx, struct {
		io.Reader
		io.WriteCloser
	}{stdout, stdin})
	if err != nil {
		t.Fatal(err)
	}
	if c.Hello().PID != cmd.Process.Pid {
		t.Errorf("hello pid %d, want %d", c.Hello().PID, cmd.Process.Pid)
	}
	if err := c.Configure(ctx, testConfig()); err != nil {
		t.Fatal(err)
	}
	return &guestProc{Client: c, cmd: cmd, stdin: stdin, dir: dir}
}

// procState is a process's state letter from /proc ("" when it is gone).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0]
}

// children lists pid's children and their states.
func children(pid int) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if readPPID(p, make([]byte, 512)) == pid {
			out[p] = procState(p)
		}
	}
	return out
}

func (g *guestProc) pids(t *testing.T, code string) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := g.Execute(ctx, api.ExecuteRequest{Code: code, TimeoutS: 20}, nil)
	if err != nil || r.Status != api.StatusOK {
		t.Fatalf("execute: %+v, %v", r, err)
	}
	var pids []int
	for _, o := range r.Outputs {
		for _, f := range strings.Fields(o.Text) {
			p, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("output %q", o.Text)
			}
			pids = append(pids, p)
		}
	}
	return pids
}

// spawnCode starts a process in a new session (out of the kernel's process group) and an
// orphan (reparented to the guest), and prints their pids and the kernel's.
const spawnCode = "import os, subprocess\n" +
	"p = subprocess.Popen(['sleep', '60'], start_new_session=True)\n" +
	"orphan = subprocess.run(['sh', '-c', 'setsid sleep 60 >/dev/null 2>&1 & echo $!'], capture_output=True, text=True).stdout\n" +
	"print(os.getpid(), p.pid, orphan)"

func TestMainProcess(t *testing.T) {
	t.Parallel()
	t.Run("reaps zombies", func(t *testing.T) {
		t.Parallel()
		g := startGuestProcess(t)
		guest := g.cmd.Process.Pid
		// An orphan grandchild of the kernel, reparented to the guest, that exits.
		g.pids(t, "import os, time\npid = os.fork()\nif pid == 0:\n    if os.fork() == 0:\n        time.sleep(0.2)\n        os._exit(0)\n    os._exit(0)\nos.waitpid(pid, 0)")
		// A command's background child, killed with its group when the command ends.
		if r, err := g.Command(context.Background(), api.CommandRequest{Cmd: []string{"sh", "-c", "sleep 10 & echo $!"}, TimeoutS: 5}); err != nil || r.Status != api.StatusOK {
			t.Fatalf("command: %+v %v", r, err)
		}
		testbin.WaitFor(t, 5*time.Second, "the kernel alone among the guest's children", func() error {
			kids := children(guest)
			zombies := 0
			for _, st := range kids {
				if st == "Z" {
					zombies++
				}
			}
			if zombies == 0 && len(kids) == 1 { // the kernel only
				return nil
			}
			return fmt.Errorf("guest's children: %v, want the kernel alone and no zombies", kids)
		})
	})
	t.Run("ignores catchable signals", func(t *testing.T) {
		t.Parallel()
		g := startGuestProcess(t)
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGPIPE, syscall.SIGQUIT} {
			if err := g.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
		}
		// Signals are asynchronous: the guest's answer after them says it lived through them,
		// and the kernel it starts has the default dispositions, not an inherited SIG_IGN.
		if pids := g.pids(t, "import os, signal\nprint(os.getpid(), end='') if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else print('SIGTERM is', signal.getsignal(signal.SIGTERM))"); len(pids) != 1 {
			t.Fatalf("after the signals: %v", pids)
		}
		if st := procState(g.cmd.Process.Pid); st == "" || st == "Z" {
			t.Fatalf("the guest is gone after catchable signals (state %q)", st)
		}
	})
	for _, how := range []string{"connection closed"} {
		t.Run("kills everything on "+how, func(t *testing.T) {
			t.Parallel()
			g := startGuestProcess(t)
			pids := g.pids(t, spawnCode)
			g.stdin.Close()
			done := make(chan error, 1)
			go func() { done <- g.cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("guest exited with %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("guest did not exit")
			}
			testbin.WaitFor(t, 3*time.Second, "the kernel and its child to end", func() error {
				for _, pid := range pids {
					if st := procState(pid); st != "" && st != "Z" {
						return fmt.Errorf("process %d (kernel or its child) still alive in state %s", pid, st)
					}
				}
				return nil
			})
		})
	}
}

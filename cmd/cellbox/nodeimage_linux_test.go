package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/testbin"
)

// TestNodeImage runs the image a Kubernetes node runs in (scripts/node-image.sh) under a real
// container runtime the way the DaemonSet does: privileged, the host's PID namespace, the
// state dir a host folder with shared mount propagation. A session runs the data stack and
// plots; its variables and files come through a graceful restart of the container (a
// rolling update) and a kill of it (a crash).
func TestNodeImage(t *testing.T) {
	needRunc(t)
	ref := os.Getenv("CELLBOX_TEST_NODE_IMAGE")
	if ref == "" {
		testbin.Missing(t, "no node image: run scripts/node-image.sh (in a Docker engine) and set CELLBOX_TEST_NODE_IMAGE to the reference it prints (make test does)")
	}
	// The state dir: a host folder, a mount of its own made shared, as a hostPath with
	// Bidirectional propagation needs (mounts the node makes in it reach the host and the
	// next container).
	state := t.TempDir()
	run(t, "mount", "--bind", state, state)
	run(t, "mount", "--make-rshared", state)
	t.Cleanup(func() { exec.Command("umount", "-R", "-l", state).Run() })

	key := "cbk_" + hex.EncodeToString(randBytes(t, 16))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	name := "cellbox-node-test-" + hex.EncodeToString(randBytes(t, 4))
	docker := func(args ...string) (string, error) {
		out, err := exec.Command("docker", args...).CombinedOutput()
		return string(out), err
	}
	logs := func() string { out, _ := docker("logs", "--tail", "60", name); return out }
	privileged := privilegedArgs(t)
	container := func(name string, args ...string) {
		t.Helper()
		runArgs := append([]string{"run", "-d", "--name", name, "--pid", "host", "--network", "host"}, privileged...)
		runArgs = append(runArgs, "-v", state+":/var/lib/cellbox:rshared", "-e", "CELLBOX_API_KEYS="+key,
			"-e", "CELLBOX_CGROUP_PARENT=/cellbox", // as the DaemonSet sets it
			ref, "serve", "--addr", addr, "--pool-size", "1")
		runArgs = append(runArgs, args...)
		if out, err := docker(runArgs...); err != nil {
			t.Fatalf("docker run %s: %v\n%s", ref, err, out)
		}
	}
	started := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node container's log (the end):\n%s", logs())
		}
		docker("rm", "-f", name)
		if !started {
			return
		}
		// Sessions outlive the container: a last one ends them.
		end := name + "-end"
		defer docker("rm", "-f", end)
		container(end, "--end-sessions-on-exit", "--pool-size", "0")
		c := client.New("http://"+addr, client.WithAPIKey(key))
		testbin.WaitFor(t, time.Minute, "the last node container answers", func() error { _, err := c.Health(context.Background()); return err })
		if out, err := docker("stop", "-t", "60", end); err != nil {
			t.Errorf("stop the last node container: %v\n%s", err, out)
		}
	})
	container(name)
	started = true
	c := client.New("http://"+addr, client.WithAPIKey(key))
	ctx := t.Context()
	healthy := func(what string) {
		t.Helper()
		testbin.WaitFor(t, time.Minute, what, func() error {
			if _, err := c.Health(ctx); err != nil {
				return fmt.Errorf("%v\n%s", err, logs())
			}
			return nil
		})
	}
	healthy("the node container answers")
	// gVisor's runsc is the pinned one (tools/runsc), not Debian's.
	mod, err := os.ReadFile("../../tools/runsc/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	_, pinned, _ := strings.Cut(string(mod), "gvisor.dev/gvisor v0.0.0-")
	pinned, _, _ = strings.Cut(pinned, "\n")
	pinned, _, _ = strings.Cut(pinned, " ") // "// indirect"
	if out, err := docker("exec", name, "runsc", "--version"); err != nil || pinned == "" || !strings.Contains(out, "runsc version "+pinned) {
		t.Errorf("runsc --version in the node: %v\n%s\nwant %s", err, out, pinned)
	}

	s, err := c.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatalf("create a session: %v\n%s", err, logs())
	}
	if _, err := c.UploadFile(ctx, s.ID, "in.txt", strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	res, err := c.Execute(ctx, s.ID, api.ExecuteRequest{Code: `import numpy as np, pandas as pd, matplotlib.pyplot as plt
x = int(np.array([20, 21]).sum())
plt.plot(pd.Series([1, 3, 2]))
plt.show()
print(x)`})
	if err != nil || res.Status != api.StatusOK || !strings.Contains(joinText(res), "41") || !hasImage(res) {
		t.Fatalf("numpy, pandas and a plot in the node image: %+v, %v\n%s", res, err, logs())
	}

	// A rolling update: SIGTERM, then the container again, on the same state dir. How long
	// the session was away is logged (docs/benchmarks.md), not asserted.
	t0 := time.Now()
	if out, err := docker("restart", "-t", "45", name); err != nil {
		t.Fatalf("docker restart: %v\n%s", err, out)
	}
	healthy("the node container answers after a restart")
	mustRun(t, c, s.ID, "print(x + 1, open('in.txt').read())", "42 kept\n")
	t.Logf("docker restart → the session answers with its variables: %v", time.Since(t0).Round(time.Millisecond))

	// A crash: SIGKILL, and the container started again.
	t0 = time.Now()
	if out, err := docker("kill", name); err != nil {
		t.Fatalf("docker kill: %v\n%s", err, out)
	}
	if out, err := docker("start", name); err != nil {
		t.Fatalf("docker start: %v\n%s", err, out)
	}
	healthy("the node container answers after a kill")
	mustRun(t, c, s.ID, "print(x + 2, open('in.txt').read())", "43 kept\n")
	t.Logf("docker kill, docker start → the session answers with its variables: %v", time.Since(t0).Round(time.Millisecond))

	// The image's CRIU pauses a pausable session under runc, and the paused session comes
	// through a restart of the container.
	p, err := c.CreateSession(ctx, api.CreateSessionRequest{IdleAction: api.IdleActionPause})
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, c, p.ID, "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})", "")
	if v, err := c.Pause(ctx, p.ID); err != nil || v.State != api.StatePaused {
		t.Fatalf("pause in the node image: %+v, %v\n%s", v, err, logs())
	}
	if out, err := docker("restart", "-t", "45", name); err != nil {
		t.Fatalf("docker restart: %v\n%s", err, out)
	}
	healthy("the node container answers after a restart with a paused session")
	mustRun(t, c, p.ID, "print(int(df.a.sum()))", "6\n")
}

// privilegedArgs is docker run's --privileged, or, where this process lacks capabilities
// (a machine whose root has a reduced bounding set: --privileged asks for every capability
// the kernel knows, and the runtime fails to apply them), what --privileged grants less
// those: every capability this process has, no seccomp or AppArmor profile, /proc and /sys
// unmasked, every device, the host's /dev and a writable cgroup tree.
func privilegedArgs(t *testing.T) []string {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var bounding uint64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			if bounding, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	last, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(last)))
	if err != nil || n >= len(capNames) {
		t.Fatalf("cap_last_cap %q: %v (a kernel newer than this test's list of capabilities)", last, err)
	}
	args := []string{"--cap-add", "ALL"}
	for c := 0; c <= n; c++ {
		if bounding&(1<<c) == 0 {
			args = append(args, "--cap-drop", capNames[c])
		}
	}
	if len(args) == 2 {
		return []string{"--privileged"}
	}
	t.Logf("this machine's root lacks capabilities (%s): the node container gets what --privileged grants less those", strings.Join(args[2:], " "))
	return append(args, "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
		"--security-opt", "systempaths=unconfined", "--device-cgroup-rule", "a *:* rwm",
		"-v", "/dev:/dev", "-v", "/sys/fs/cgroup:/sys/fs/cgroup")
}

// capNames are Linux's capabilities by number (linux/capability.h), as docker names them.
var capNames = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
	"SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE",
	"AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
	"BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE"}

func hasImage(res *api.ExecuteResult) bool {
	for _, o := range res.Outputs {
		if _, ok := o.Data["image/png"]; ok {
			return true
		}
	}
	return false
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

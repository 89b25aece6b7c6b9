package guest

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/api"
)

// refuseUnshare is a seccomp program of the machine that refuses unshare(2) with EPERM
// and allows everything else (the architecture is not checked: a test's program only).
func refuseUnshare() []byte {
	insns := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_UNSHARE, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	var b []byte
	for _, f := range insns {
		b = binary.NativeEndian.AppendUint16(b, f.Code)
		b = append(b, f.Jt, f.Jf)
		b = binary.NativeEndian.AppendUint32(b, f.K)
	}
	return b
}

// TestSeccompFlag: --seccomp installs the program before the guest serves, and what it
// starts inherits it; a program the kernel refuses ends the guest before it serves.
func TestSeccompFlag(t *testing.T) {
	t.Parallel()
	t.Run("installed", func(t *testing.T) {
		t.Parallel()
		prog := filepath.Join(t.TempDir(), "seccomp.bpf")
		if err := os.WriteFile(prog, refuseUnshare(), 0o600); err != nil {
			t.Fatal(err)
		}
		g := startGuestProcess(t, "-seccomp", prog)
		r, err := g.Command(context.Background(), api.CommandRequest{Cmd: []string{"sh", "-c",
			"grep '^Seccomp:' /proc/self/status; grep -h '^Seccomp:' /proc/" + strconv.Itoa(g.cmd.Process.Pid) + "/task/*/status | sort -u; unshare -U true 2>/dev/null || echo refused"}, TimeoutS: 10})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Join(strings.Fields(r.Stdout), " "), "Seccomp: 2 Seccomp: 2 refused"; got != want {
			t.Errorf("a command of the guest: %q, want %q", got, want)
		}
	})
	for name, data := range map[string][]byte{"empty": nil, "not whole instructions": {1, 2, 3}, "refused": make([]byte, 8)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prog := filepath.Join(t.TempDir(), "seccomp.bpf")
			if err := os.WriteFile(prog, data, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-seccomp", prog, "-workspace", t.TempDir())
			cmd.Env = append(os.Environ(), mainEnv+"=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "--seccomp") || stdout.Len() > 0 {
				t.Errorf("guest with a bad program: %v, stdout %q, stderr %q; want exit 1 before it serves", err, stdout.Bytes(), stderr.Bytes())
			}
		})
	}
}

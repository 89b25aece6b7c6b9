package runc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// gVisor's platforms: how the sentry takes over user code's system calls and page faults.
// systrap (seccomp's SIGSYS; gVisor's default since 2023) runs anywhere the host allows
// seccomp; kvm (hardware virtualization) is the fastest where /dev/kvm works, as on bare
// metal; ptrace is the slowest, and the last resort.
const (
	PlatformAuto    = "auto"
	PlatformSystrap = "systrap"
	PlatformKVM     = "kvm"
	PlatformPtrace  = "ptrace"
)

// kvmProbeTimeout bounds the probe sandbox of PlatformAuto. Where /dev/kvm is there but
// does not work (seen in a nested VM: the sentry hangs at the first exec), the probe fails
// by this timeout.
var kvmProbeTimeout = 5 * time.Second

// kvmDevice is the device that says the host has KVM (a variable for the tests).
var kvmDevice = "/dev/kvm"

// kvmProbes caches the probe's answer by runtime path: one probe a process.
var kvmProbes sync.Map // runtime path → error (nil: kvm works)

// CheckPlatform checks a --gvisor-platform value.
func CheckPlatform(p string) error {
	switch p {
	case "", PlatformAuto, PlatformSystrap, PlatformKVM, PlatformPtrace:
		return nil
	}
	return fmt.Errorf("gVisor platform %q: give auto, systrap, kvm or ptrace: %w", p, errdefs.ErrInvalidArgument)
}

// choosePlatform is the platform runsc (at runtime) runs sandboxes on: want, unless it is
// auto (or ""): then kvm where /dev/kvm opens and a probe sandbox runs on it, else
// systrap. why says what decided.
func choosePlatform(ctx context.Context, runtime, want string) (platform, why string) {
	if want != "" && want != PlatformAuto {
		return want, "as asked"
	}
	f, err := os.OpenFile(kvmDevice, os.O_RDWR, 0)
	if err != nil {
		return PlatformSystrap, "no usable /dev/kvm"
	}
	f.Close()
	v, ok := kvmProbes.Load(runtime)
	if !ok {
		v, _ = kvmProbes.LoadOrStore(runtime, probeKVM(ctx, runtime))
	}
	if err, _ := v.(error); err != nil {
		return PlatformSystrap, "/dev/kvm is there, but a sandbox on kvm did not run: " + err.Error()
	}
	return PlatformKVM, "/dev/kvm works"
}

// probeKVM runs /bin/true in a throwaway sandbox on kvm (runsc do: the host's root
// read-only, no network), within kvmProbeTimeout.
func probeKVM(ctx context.Context, runtime string) error {
	ctx, cancel := context.WithTimeout(ctx, kvmProbeTimeout)
	defer cancel()
	root, err := os.MkdirTemp("", "cellbox-kvm-probe-")
	if err != nil {
		return err
	}
	// runsc do keeps its bundle in a new folder of TMPDIR, and pins a network namespace
	// there, which it undoes only when it ends by itself.
	defer func() {
		dirs, _ := filepath.Glob(filepath.Join(root, "*"))
		for _, d := range append(dirs, root) {
			unpinNullNetns(d)
		}
		os.RemoveAll(root)
	}()
	cmd := exec.CommandContext(ctx, runtime, "--root", root, "--platform", PlatformKVM, "--network=none", "do", "/bin/true")
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TMPDIR=" + root} // nothing of the server's
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("no answer within %s", kvmProbeTimeout)
	case err != nil:
		return fmt.Errorf("%v: %s", err, runtimeMessage(out))
	}
	return nil
}

// runscDate finds the date in a runsc's version ("runsc version 20260905035102-160fafc42237",
// Debian's "runsc version 0.0~20221219.0", a release's "release-20250505.0").
var runscDate = regexp.MustCompile(`(20[0-9]{6})`)

// runscCurrent runs runtime --version and says whether it is a gVisor of 2025 or later,
// and which version it said.
func runscCurrent(runtime string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, runtime, "--version").Output()
	first, _, _ := strings.Cut(string(out), "\n")
	if err != nil {
		return false, first
	}
	return runscVersionCurrent(first), first
}

// runscCgroupV2 checks that runtime takes --in-sandbox-cgroup=v2 (argv), without which the
// guest cannot keep the sandbox's process limit: a gVisor of mid-2026 or later.
func runscCgroupV2(runtime string) error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, runtime, "--in-sandbox-cgroup=v2", "--version").CombinedOutput()
	if err != nil {
		first, _, _ := strings.Cut(string(out), "\n")
		return fmt.Errorf("%s does not take --in-sandbox-cgroup=v2 (%s), where the sandbox's process limit is kept: install the pinned gVisor (make deps, or scripts/runsc.sh): %w",
			runtime, strings.TrimSpace(first), errdefs.ErrUnavailable)
	}
	return nil
}

func runscVersionCurrent(version string) bool {
	m := runscDate.FindString(version)
	return m != "" && m >= "20250101"
}

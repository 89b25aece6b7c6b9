package runc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/internal/mountinfo"
	"github.com/cellbox/cellbox/internal/sandbox"
)

// Update sets the sandbox's memory, CPU and process limits by writing its cgroups: those of
// its guest, found in /proc (the runtime's `update` takes ~90 ms to start here, far more
// than the writes). Under gVisor it is unsupported: the limits are also inside the sentry.
func (s *Sandbox) Update(ctx context.Context, l sandbox.Limits) error {
	if s.b.gvisor {
		return fmt.Errorf("sandbox %s: limits of a gVisor sandbox cannot change: %w", s.id, errors.ErrUnsupported)
	}
	pid, err := s.readPid()
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	// The pid names the guest only while it lives: a pidfd taken before the lookup, still
	// alive after it, says the folders read were the guest's, and each one written must be
	// this sandbox's own cgroup (runc's CgroupsPath, see spec.go).
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("sandbox %s: the guest (pid %d): %w", s.id, pid, err)
	}
	defer unix.Close(pidfd)
	dirs, err := cgroupDirs(pid)
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return fmt.Errorf("sandbox %s: the guest (pid %d) is gone: %w", s.id, pid, err)
	}
	dir := func(ctrl string) (string, error) {
		d, ok := dirs[ctrl]
		switch {
		case !ok:
			return "", fmt.Errorf("sandbox %s: no %s cgroup", s.id, cmp.Or(ctrl, "v2"))
		case !ownCgroup(d, s.b.cgroups, s.id):
			return "", fmt.Errorf("sandbox %s: the guest's %s cgroup is %s, not the sandbox's", s.id, cmp.Or(ctrl, "v2"), d)
		}
		return d, nil
	}
	r := resources(l, s.b.limitSwap, false)
	memory, swap, pids := "max", "max", "max"
	if r.Memory != nil {
		memory = strconv.FormatInt(*r.Memory.Limit, 10)
		if r.Memory.Swap != nil {
			swap = strconv.FormatInt(*r.Memory.Swap, 10)
		}
	}
	if r.Pids != nil {
		pids = strconv.FormatInt(*r.Pids.Limit, 10)
	}
	quota := "max"
	if r.CPU != nil {
		quota = strconv.FormatInt(*r.CPU.Quota, 10)
	}
	if cgroupV2() {
		v2, err := dir("")
		if err != nil {
			return err
		}
		w := []struct{ file, value string }{
			{"memory.max", memory}, {"pids.max", pids}, {"cpu.max", quota + " " + strconv.Itoa(cpuPeriod)},
		}
		if s.b.limitSwap {
			w = append(w, struct{ file, value string }{"memory.swap.max", "0"})
		}
		for _, x := range w {
			if err := writeCgroup(v2, x.file, x.value); err != nil && !(x.file == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
				return fmt.Errorf("sandbox %s: %w", s.id, err)
			}
		}
		return nil
	}
	mem, err := dir("memory")
	if err != nil {
		return err
	}
	unlimited := func(v string) string {
		if v == "max" {
			return "-1"
		}
		return v
	}
	// memory.limit_in_bytes may not pass memory.memsw.limit_in_bytes: raise memsw first
	// when the limit grows, lower it last when it shrinks.
	order := []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"}
	if s.b.limitSwap {
		cur, _ := os.ReadFile(filepath.Join(mem, "memory.limit_in_bytes"))
		if n, err := strconv.ParseInt(strings.TrimSpace(string(cur)), 10, 64); err == nil && (memory == "max" || n < mustInt(memory)) {
			order = []string{"memory.memsw.limit_in_bytes", "memory.limit_in_bytes"}
		}
	} else {
		order = order[:1]
	}
	for _, f := range order {
		v := memory
		if f == "memory.memsw.limit_in_bytes" {
			v = swap
		}
		if err := writeCgroup(mem, f, unlimited(v)); err != nil {
			return fmt.Errorf("sandbox %s: %w", s.id, err)
		}
	}
	pd, err := dir("pids")
	if err != nil {
		return err
	}
	if err := writeCgroup(pd, "pids.max", pids); err != nil {
		return fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	cpu, err := dir("cpu")
	if err != nil {
		return err
	}
	if err := writeCgroup(cpu, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
		return fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	if err := writeCgroup(cpu, "cpu.cfs_quota_us", unlimited(quota)); err != nil {
		return fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	return nil
}

func mustInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func writeCgroup(dir, file, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("set %s: %w", file, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("set %s to %s: %w", file, value, err)
	}
	return nil
}

// ownCgroup reports whether the host folder dir is the cgroup runc made for sandbox id under
// parent (Config.CgroupParent): it ends with parent's names, then id.
func ownCgroup(dir, parent, id string) bool {
	return strings.HasSuffix(dir, "/"+strings.TrimPrefix(parent, "/")+"/"+id)
}

// cgroupDirs returns the host folders of process pid's cgroups, by controller ("" for
// cgroup v2's), from /proc/<pid>/cgroup and the mounts of this process.
func cgroupDirs(pid int) (map[string]string, error) {
	type mount struct{ root, point string }
	all, err := mountinfo.Mounts()
	if err != nil {
		return nil, err
	}
	mounts := map[string]mount{}
	for _, m := range all {
		keys := []string{""}
		switch m.FSType {
		case "cgroup2":
		case "cgroup":
			keys = m.Super
		default:
			continue
		}
		for _, k := range keys {
			if _, ok := mounts[k]; !ok {
				mounts[k] = mount{m.Root, m.Point}
			}
		}
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	dirs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		ctrls := []string{""}
		if f[0] != "0" {
			ctrls = strings.Split(f[1], ",")
		}
		for _, c := range ctrls {
			m, ok := mounts[c]
			if !ok {
				continue
			}
			rel, err := filepath.Rel(m.root, f[2])
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				continue
			}
			dirs[c] = filepath.Join(m.point, rel)
		}
	}
	return dirs, nil
}

// ownCgroups returns the host folders of the sandbox's own cgroups, read from its guest
// while it runs (nil when it does not): what stop removes should runc delete leave them.
func (s *Sandbox) ownCgroups() []string {
	pid, err := s.readPid()
	if err != nil || pid <= 0 {
		return nil
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(pidfd)
	dirs, err := cgroupDirs(pid)
	if err != nil || unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
		return nil // the pid may have named another process by then
	}
	var own []string
	for _, d := range dirs {
		if ownCgroup(d, s.b.cgroups, s.id) && !slices.Contains(own, d) {
			own = append(own, d)
		}
	}
	return own
}

// removeCgroups removes the empty cgroup folders dirs that runc delete left: one whose last
// process is a zombie its reaper has not reaped yet is busy, and is tried again for up to
// 30 s. rmdir removes only an empty cgroup.
func removeCgroups(dirs []string, log *slog.Logger) {
	left := dirs[:0:0]
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && err != unix.ENOENT {
			left = append(left, d)
		}
	}
	if len(left) == 0 {
		return
	}
	go func() {
		for wait := 50 * time.Millisecond; len(left) > 0; wait *= 2 {
			if wait > 30*time.Second {
				log.Warn("sandbox cgroups still in use after 30 s: left behind", "cgroups", left)
				return
			}
			time.Sleep(wait)
			next := left[:0]
			for _, d := range left {
				if err := unix.Rmdir(d); err != nil && err != unix.ENOENT {
					next = append(next, d)
				}
			}
			left = next
		}
	}()
}

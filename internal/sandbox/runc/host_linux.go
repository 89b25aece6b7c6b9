package runc

import (
	"os"
	"syscall"
)

const cgroup2SuperMagic = 0x63677270

// cgroupV2 reports whether the host runs the unified cgroup v2 hierarchy.
func cgroupV2() bool {
	var st syscall.Statfs_t
	return syscall.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == cgroup2SuperMagic
}

// swapLimitSupported reports whether a memory+swap limit can be set. On cgroup v1 that
// needs swap accounting (memory.memsw.* files; a runtime fails writing them otherwise). On
// v2 the runtime writes memory.swap.max 0 and skips it where swap accounting is off.
func swapLimitSupported() bool {
	if cgroupV2() {
		return true
	}
	_, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	return err == nil
}

const supported = true

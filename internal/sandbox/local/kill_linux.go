package local

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// killMarked kills every process whose environment carries a marker match accepts. It
// repeats until a pass finds none, so children forked during a pass are caught too.
func killMarked(match func(marker string) bool) {
	prefix := []byte(markerEnv + "=")
	for pass := 0; pass < 10; pass++ {
		killed := 0
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil {
				continue
			}
			for _, kv := range bytes.Split(env, []byte{0}) {
				if m, ok := bytes.CutPrefix(kv, prefix); ok && match(string(m)) {
					if syscall.Kill(pid, syscall.SIGKILL) == nil {
						killed++
					}
					break
				}
			}
		}
		if killed == 0 {
			return
		}
	}
}

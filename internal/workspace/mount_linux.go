package workspace

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
)

const noFollow = syscall.O_NOFOLLOW

// unmount unmounts dir once; when it is busy (a process still has a file open there), it
// detaches it: gone from the host's view now, freed by the kernel when the last user closes.
func unmount(dir string) error {
	err := syscall.Unmount(dir, 0)
	if errors.Is(err, syscall.EBUSY) {
		err = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	if err != nil {
		return &os.PathError{Op: "unmount", Path: dir, Err: err}
	}
	return nil
}

// isMountPoint reports whether something is mounted on path, as /proc/self/mountinfo says
// (a bind mount from the same file system included).
func isMountPoint(path string) (bool, error) {
	mounts, err := mountPoints()
	if err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m == path {
			return true, nil
		}
	}
	return false, nil
}

// mountPoints lists the mount points of this process's mount namespace.
func mountPoints() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountInfo(data), nil
}

// parseMountInfo returns field 5, the mount point, of each line of a mountinfo file.
func parseMountInfo(data []byte) []string {
	var mps []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 5 {
			mps = append(mps, unescapeOctal(f[4]))
		}
	}
	return mps
}

// unescapeOctal undoes the kernel's \ooo escapes of space, tab, newline and backslash.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }

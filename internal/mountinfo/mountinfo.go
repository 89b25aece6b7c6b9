// Package mountinfo lists the mounts of this process's mount namespace, as
// /proc/self/mountinfo shows them (real paths, the kernel's escapes undone).
//
// Not for: mounting or unmounting (the packages that mount do that themselves).
package mountinfo

import (
	"bufio"
	"bytes"
	"strings"
)

// Parse returns field 5, the mount point, of each line of a mountinfo file.
func Parse(data []byte) []string {
	var mps []string
	for _, m := range ParseMounts(data) {
		mps = append(mps, m.Point)
	}
	return mps
}

// Mount is one line of a mountinfo file.
type Mount struct {
	Root   string   // the folder of the file system mounted here
	Point  string   // the mount point
	FSType string   // e.g. "cgroup", "cgroup2", "ext4"
	Super  []string // the super block's options, e.g. "rw", "memory"
}

// ParseMounts returns each line of a mountinfo file.
func ParseMounts(data []byte) []Mount {
	var ms []Mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, _ := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 {
			continue
		}
		m := Mount{Root: unescapeOctal(f[3]), Point: unescapeOctal(f[4])}
		if len(g) >= 3 {
			m.FSType, m.Super = g[0], strings.Split(g[2], ",")
		}
		ms = append(ms, m)
	}
	return ms
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

package guest

import (
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// maxSnapshot caps the entries one workspace snapshot visits: past it, changes are
// reported only for what both snapshots saw, so a huge workspace costs time, not a hang.
var maxSnapshot = 10000 // a variable for tests

// snapshot walks the workspace without following symbolic links.
func (r *root) snapshot() snapshot {
	s := snapshot{files: map[string]fileState{}, complete: true}
	fd, err := unix.Openat(r.fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		s.complete = false
		return s
	}
	seen := 0
	buf := make([]byte, 16<<10)
	s.walk(fd, "", &seen, buf)
	unix.Close(fd)
	return s
}

func (s *snapshot) walk(dfd int, prefix string, seen *int, buf []byte) {
	names, err := readDirNames(dfd, maxSnapshot-*seen+1, buf)
	if err != nil {
		s.complete = false
		return
	}
	slices.Sort(names)
	for _, n := range names {
		if strings.HasPrefix(n, uploadPrefix) {
			continue
		}
		if *seen >= maxSnapshot {
			s.complete = false
			return
		}
		*seen++
		var st unix.Stat_t
		if unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		rel := prefix + n
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			cfd, err := unix.Openat(dfd, n, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			s.walk(cfd, rel+"/", seen, buf)
			unix.Close(cfd)
			continue
		}
		s.files[rel] = fileState{size: st.Size, mtime: st.Mtim.Nano(), ino: st.Ino, mode: st.Mode}
	}
}

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
	seen := 0
	buf := make([]byte, 16<<10)
	// The root is read through a descriptor of its own; r.fd (O_PATH) stays open until the
	// guest's calls have returned. Each folder below is opened once, for reading, and
	// serves both its listing and its entries' stat: every system call of a snapshot,
	// taken twice a cell, costs most under gVisor.
	names, err := readDirNames(r.fd, maxSnapshot+1, buf)
	if err != nil {
		s.complete = false
		return s
	}
	s.walk(r.fd, names, "", &seen, buf)
	return s
}

// walk records the files named in dfd (any descriptor of the folder, O_PATH included),
// and those of its folders below.
func (s *snapshot) walk(dfd int, names []string, prefix string, seen *int, buf []byte) {
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
			cfd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if err != unix.ENOENT && err != unix.ENOTDIR && err != unix.ELOOP {
					s.complete = false // a folder it cannot read: what changed there is not known
				}
				continue // else it is gone, or no folder any more
			}
			sub, err := readNames(cfd, maxSnapshot-*seen+1, buf)
			if err != nil {
				s.complete = false
			} else {
				s.walk(cfd, sub, rel+"/", seen, buf)
			}
			unix.Close(cfd)
			continue
		}
		s.files[rel] = fileState{size: st.Size, mtime: st.Mtim.Nano(), ino: st.Ino, mode: st.Mode}
	}
}

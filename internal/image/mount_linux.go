package image

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/internal/mountinfo"
)

// unmountBelow detaches every mount at or below dir (deepest first): what a build that
// stopped half-way (debootstrap mounts /proc and /sys in its chroot) left behind.
func unmountBelow(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	all, err := mountinfo.Points()
	if err != nil {
		return err
	}
	var points []string
	for _, p := range all {
		if p == abs || strings.HasPrefix(p, abs+"/") {
			points = append(points, p)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points))) // children before parents
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

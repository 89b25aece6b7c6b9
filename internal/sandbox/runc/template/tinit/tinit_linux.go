// Package tinit is a kernel template's start, `template-init` (package template's Start
// runs it): apart from package template so that the guest's own binary (cmd/cellbox-guest)
// links none of the server's packages.
package tinit

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/internal/guest/pyrunner"
	"github.com/cellbox/cellbox/internal/mountinfo"
)

// Main is `cellbox template-init`, which Start runs in new mount, network, ipc and uts
// namespaces: it makes the template's file system (the image's root with the host's /proc,
// /dev and /sys in it, or the host's; a private /tmp either way; the kernel's folders with
// matplotlib's font cache) and execs Python on the template script. Its environment and
// descriptors are Start's, passed on.
func Main(args []string) int {
	fs := flag.NewFlagSet("template-init", flag.ContinueOnError)
	python := fs.String("python", "", "the interpreter, inside the root")
	root := fs.String("root", "", "the root filesystem (default: the host's)")
	mplCache := fs.String("mpl-cache", "", "matplotlib's font cache folder (inside the root)")
	hostname := fs.String("hostname", "", "the host name the template sees (the sandboxes')")
	var detach []string
	fs.Func("detach", "a host folder whose mounts the template's mount namespace drops (repeatable)", func(s string) error {
		// mountinfo names mount points absolute, links resolved.
		if r, err := filepath.EvalSymlinks(s); err == nil {
			s = r
		}
		abs, err := filepath.Abs(s)
		detach = append(detach, abs)
		return err
	})
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *python == "" || *hostname == "" {
		fmt.Fprintln(os.Stderr, "cellbox template-init: started by the server, not by hand")
		return 2
	}
	if err := setup(*root, *mplCache, *hostname, detach); err != nil {
		fmt.Fprintln(os.Stderr, "cellbox template-init:", err)
		return 1
	}
	err := syscall.Exec(*python, []string{*python, "-c", pyrunner.TemplateBootstrap}, os.Environ())
	fmt.Fprintf(os.Stderr, "cellbox template-init: run %s: %v\n", *python, err)
	return 1
}

func setup(root, mplCache, hostname string, detach []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	if err := detachUnder(detach); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		return fmt.Errorf("set the host name: %w", err)
	}
	if root != "" {
		for _, m := range []struct {
			src, dst, fstype string
			flags            uintptr
		}{
			{"proc", "proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
			{"/dev", "dev", "", unix.MS_BIND | unix.MS_REC},
			{"/sys", "sys", "", unix.MS_BIND | unix.MS_REC},
		} {
			if err := unix.Mount(m.src, filepath.Join(root, m.dst), m.fstype, m.flags, ""); err != nil {
				return fmt.Errorf("mount %s in %s: %w", m.src, root, err)
			}
		}
	}
	if err := unix.Mount("tmpfs", filepath.Join(root+"/", "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	if root != "" {
		if err := unix.Chroot(root); err != nil {
			return fmt.Errorf("chroot %s: %w", root, err)
		}
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	for _, d := range []string{pyrunner.KernelTmp, pyrunner.KernelTmp + "/ipython", pyrunner.KernelTmp + "/matplotlib"} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if mplCache != "" {
		entries, _ := os.ReadDir(mplCache)
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			if b, err := os.ReadFile(filepath.Join(mplCache, e.Name())); err == nil {
				os.WriteFile(filepath.Join(pyrunner.KernelTmp, "matplotlib", e.Name()), b, 0o600)
			}
		}
	}
	return nil
}

// detachUnder detaches, in this mount namespace, every mount below the folders dirs (the
// copies of the workspaces' mounts that the namespace got when it was made), and every
// workspace of another cellbox server on the host (a mount at .../workspaces/<id>, the
// store's layout), deepest first: a copy held here keeps a workspace's file system mounted
// after its own server unmounted it, its last writes not yet in its image.
func detachUnder(dirs []string) error {
	all, err := mountinfo.Points()
	if err != nil {
		return fmt.Errorf("read the mounts: %w", err)
	}
	var points []string
	for _, mp := range all {
		under := filepath.Base(filepath.Dir(mp)) == "workspaces"
		for _, d := range dirs {
			under = under || strings.HasPrefix(mp, d+"/")
		}
		if under {
			points = append(points, mp)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, mp := range points {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("detach %s: %w", mp, err)
		}
	}
	return nil
}

package runc

import (
	"os"
	"path/filepath"

	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/statefile"
)

// hostRoot is the host's root, a variable for tests.
var hostRoot = "/"

// hostTop are the top-level system folders taken from the host: bind-mounted when they are
// folders, recreated as the same symlinks when they are symlinks (merged /usr).
var hostTop = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// hostEtc is what the kernels and their libraries need from /etc: the loader cache,
// Debian's alternatives (libblas), fonts, certificates, matplotlib's config, python3*/,
// mime types, and R's configuration (R/, which /usr/lib/R/etc links to). Globs are allowed.
// localtime is handled apart (usually a symlink into /usr).
var hostEtc = []string{"ld.so.cache", "alternatives", "fonts", "ssl", "matplotlibrc", "python3*", "mime.types", "R"}

// buildRootfs makes (or refreshes) the shared skeleton root filesystem at dir and returns
// the host paths to bind-mount read-only into it at the same place. It is idempotent: a
// sandbox still running on an older skeleton keeps working.
func buildRootfs(dir string, uid, gid uint32) (binds []string, err error) {
	for _, d := range []string{"", "proc", "dev", "sys", "tmp", "mnt/data", "home/user", "etc", ".cellbox/mpl-cache", ".cellbox/run"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	// A runtime gives a tmpfs the mode of the folder it is mounted on.
	if err := os.Chmod(filepath.Join(dir, "tmp"), os.ModeSticky|0o777); err != nil {
		return nil, err
	}
	if err := touch(filepath.Join(dir, guestPath)); err != nil {
		return nil, err
	}
	for _, name := range hostTop {
		src := filepath.Join(hostRoot, name)
		fi, err := os.Lstat(src)
		if err != nil {
			continue
		}
		dst := filepath.Join(dir, name)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return nil, err
			}
			if err := symlink(target, dst); err != nil {
				return nil, err
			}
		case fi.IsDir():
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return nil, err
			}
			binds = append(binds, "/"+name)
		}
	}
	for _, pattern := range hostEtc {
		matches, _ := filepath.Glob(filepath.Join(hostRoot, "etc", pattern))
		for _, src := range matches {
			fi, err := os.Stat(src)
			if err != nil {
				continue
			}
			dst := filepath.Join(dir, "etc", filepath.Base(src))
			if fi.IsDir() {
				err = os.MkdirAll(dst, 0o755)
			} else {
				err = touch(dst)
			}
			if err != nil {
				return nil, err
			}
			binds = append(binds, "/etc/"+filepath.Base(src))
		}
	}
	if target, err := os.Readlink(filepath.Join(hostRoot, "etc/localtime")); err == nil {
		if err := symlink(target, filepath.Join(dir, "etc/localtime")); err != nil {
			return nil, err
		}
	} else if fi, err := os.Stat(filepath.Join(hostRoot, "etc/localtime")); err == nil && fi.Mode().IsRegular() {
		if err := touch(filepath.Join(dir, "etc/localtime")); err != nil {
			return nil, err
		}
		binds = append(binds, "/etc/localtime")
	}
	files := sandbox.EtcFiles(int(uid), int(gid))
	for name, content := range files {
		if err := statefile.Update(filepath.Join(dir, "etc", name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	return binds, nil
}

// touch creates an empty file (a mount point) if nothing is there.
func touch(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// symlink makes dst a symlink to target, replacing whatever else is there.
func symlink(target, dst string) error {
	if cur, err := os.Readlink(dst); err == nil && cur == target {
		return nil
	}
	if err := os.Remove(dst); err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.Symlink(target, dst)
}

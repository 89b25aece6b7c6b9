package guest

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Errors of path resolution beneath the workspace root.
var (
	// errEscape: resolving the path would leave the workspace through a symbolic link.
	errEscape = errors.New("path leaves the workspace through a symbolic link")
	// errSymlink: the fallback resolver (no openat2) refuses every symbolic link.
	errSymlink = errors.New("path goes through a symbolic link, which this sandbox does not follow")
)

// root is the workspace folder, held open; every path is opened beneath it.
type root struct {
	fd int // O_PATH|O_DIRECTORY
	// owner, when set, gets every file and folder the guest creates here: user code runs
	// under another uid than the guest.
	owner *syscall.Credential
	// noOpenat2 is set when the kernel (or a seccomp filter) lacks openat2; paths are then
	// walked a component at a time and symbolic links refused.
	noOpenat2 atomic.Bool
}

func openRoot(dir string, owner *syscall.Credential) (*root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	r := &root{fd: fd, owner: owner}
	probe, err := unix.Openat2(fd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS})
	if err == nil {
		unix.Close(probe)
	} else {
		r.noOpenat2.Store(true)
	}
	return r, nil
}

func (r *root) close() { unix.Close(r.fd) }

// chown gives what fd (any kind of descriptor, O_PATH included) refers to the owner, if any.
func (r *root) chown(fd int) error {
	if r.owner == nil {
		return nil
	}
	uid, gid := int(r.owner.Uid), int(r.owner.Gid)
	err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH)
	if err != unix.EBADF {
		return err
	}
	// gVisor refuses an O_PATH descriptor here; a folder can be opened through it.
	dfd, oerr := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if oerr != nil {
		return err
	}
	defer unix.Close(dfd)
	return unix.Fchown(dfd, uid, gid)
}

// open opens rel, a path from workspace.Clean ("." or a/b/c), beneath the root.
// Symbolic links inside the workspace are followed as long as they stay inside it.
func (r *root) open(rel string, flags int, mode uint32) (int, error) {
	flags |= unix.O_CLOEXEC
	if !r.noOpenat2.Load() {
		how := &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
		for range 16 {
			fd, err := unix.Openat2(r.fd, rel, how)
			switch err {
			case nil:
				return fd, nil
			case unix.EAGAIN, unix.EINTR: // a concurrent rename or mount: try again
				continue
			case unix.EXDEV:
				return -1, errEscape
			case unix.ENOSYS:
				r.noOpenat2.Store(true)
				return r.walk(rel, flags, mode)
			}
			return -1, err
		}
		return -1, unix.EAGAIN
	}
	return r.walk(rel, flags, mode)
}

// walk opens rel one component at a time with O_NOFOLLOW, refusing symbolic links.
func (r *root) walk(rel string, flags int, mode uint32) (int, error) {
	if rel == "." || rel == "" {
		return unix.Openat(r.fd, ".", flags, mode)
	}
	parts := strings.Split(rel, "/")
	dir := r.fd
	defer func() {
		if dir != r.fd {
			unix.Close(dir)
		}
	}()
	for i, name := range parts {
		if name == "" || name == "." || name == ".." {
			return -1, fmt.Errorf("bad path component %q: %w", name, unix.EINVAL)
		}
		last := i == len(parts)-1
		const pathDir = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		f := pathDir
		// gVisor follows a symbolic link to a folder despite O_NOFOLLOW when O_DIRECTORY
		// comes without O_PATH: such a folder is opened with O_PATH first, then reopened
		// through that descriptor.
		reopen := last && flags&unix.O_DIRECTORY != 0 && flags&unix.O_PATH == 0
		if last && !reopen {
			f = flags | unix.O_NOFOLLOW
		}
		fd, err := unix.Openat(dir, name, f, mode)
		if err != nil {
			if err == unix.ELOOP || err == unix.ENOTDIR {
				var st unix.Stat_t
				if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					return -1, errSymlink
				}
			}
			return -1, err
		}
		// O_PATH|O_NOFOLLOW opens a symbolic link itself instead of failing.
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd)
			return -1, errSymlink
		}
		if reopen {
			rfd, err := unix.Openat(fd, ".", flags, 0)
			unix.Close(fd)
			return rfd, err
		}
		if last {
			return fd, nil
		}
		if dir != r.fd {
			unix.Close(dir)
		}
		dir = fd
	}
	return -1, unix.ENOENT // not reached
}

// mkdirAll opens folder rel beneath the root, creating it and its parents as needed.
func (r *root) mkdirAll(rel string) (int, error) {
	const dirFlags = unix.O_PATH | unix.O_DIRECTORY
	fd, err := r.open(rel, dirFlags, 0)
	if err != unix.ENOENT || rel == "." {
		return fd, err
	}
	parts := strings.Split(rel, "/")
	cur, err := r.open(".", dirFlags, 0)
	if err != nil {
		return -1, err
	}
	for i, name := range parts {
		err := unix.Mkdirat(cur, name, 0o755)
		if err != nil && err != unix.EEXIST {
			unix.Close(cur)
			return -1, err
		}
		made := err == nil
		unix.Close(cur)
		// Resolve again from the root: what exists now may be a symbolic link.
		if cur, err = r.open(strings.Join(parts[:i+1], "/"), dirFlags, 0); err != nil {
			return -1, err
		}
		if made {
			if err := r.chown(cur); err != nil {
				unix.Close(cur)
				return -1, err
			}
		}
	}
	return cur, nil
}

// split returns the parent folder and the last name of a clean relative path.
func split(rel string) (dir, name string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

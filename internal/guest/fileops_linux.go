package guest

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/workspace"
)

// maxRemoveDepth caps how deep a recursive remove goes: it holds one descriptor a level.
const maxRemoveDepth = 512

// errTooDeep: a folder tree is deeper than maxRemoveDepth.
var errTooDeep = errors.New("folder tree too deep")

// testHookRemove, when set by a test, is called as a remove goes into folder name: after
// it found a folder there (opened false) and after it opened it (opened true). A test swaps
// the folder for a symbolic link there.
var testHookRemove func(name string, opened bool)

// entryAt describes name in the folder open as dfd (rel is that folder's workspace path),
// its symbolic link not followed.
func entryAt(dfd int, rel, name string) (*guestproto.Entry, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	e := &guestproto.Entry{FileInfo: fileInfo(rel, name, &st), Mode: st.Mode & 0o7777}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return nil, err
		}
		e.Target = string(buf[:n])
	}
	return e, nil
}

// stat describes one workspace entry; a symbolic link is described, not followed (the
// folders above it are resolved beneath the workspace, as everywhere).
func (s *server) stat(path string) guestproto.Message {
	rel, perr := cleanPath(path)
	if perr != nil {
		return guestproto.Message{Error: perr}
	}
	e, err := s.entry(rel)
	if err != nil {
		return guestproto.Message{Error: fsError(rel, err)}
	}
	return guestproto.Message{Entry: e}
}

// entry describes the entry at clean workspace path rel, not following a link there.
func (s *server) entry(rel string) (*guestproto.Entry, error) {
	if rel == "." {
		return entryAt(s.root.fd, ".", ".")
	}
	dir, name := split(rel)
	dfd, err := s.root.open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return entryAt(dfd, dir, name)
}

// makeDir makes a folder and its missing parents, each given to the sandbox's user, and
// says whether it made the folder itself.
func (s *server) makeDir(path string) guestproto.Message {
	rel, perr := cleanPath(path)
	if perr != nil {
		return guestproto.Message{Error: perr}
	}
	notDir := func() guestproto.Message {
		return errMsg(api.CodeFailedPrecondition, fmt.Sprintf("%q, or a folder above it, exists and is not a folder", workspace.GuestPath(rel)))
	}
	answer := func(created bool) guestproto.Message {
		e, err := s.entry(rel)
		if err != nil {
			return guestproto.Message{Error: fsError(rel, err)}
		}
		e.Created = created
		return guestproto.Message{Entry: e}
	}
	fd, err := s.root.open(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	switch {
	case err == nil:
		unix.Close(fd)
		return answer(false)
	case errors.Is(err, unix.ENOTDIR):
		return notDir()
	case !errors.Is(err, unix.ENOENT):
		return guestproto.Message{Error: fsError(rel, err)}
	}
	dir, name := split(rel)
	dfd, err := s.root.mkdirAll(dir)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EEXIST) {
			return notDir()
		}
		return guestproto.Message{Error: fsError(dir, err)}
	}
	defer unix.Close(dfd)
	err = unix.Mkdirat(dfd, name, 0o755)
	created := err == nil
	if err != nil && err != unix.EEXIST {
		return guestproto.Message{Error: fsError(rel, err)}
	}
	// Open what is there now beneath the root: it may be a symbolic link by now.
	fd, err = s.root.open(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			return notDir()
		}
		return guestproto.Message{Error: fsError(rel, err)}
	}
	if created {
		err = s.root.chown(fd)
	}
	unix.Close(fd)
	if err != nil {
		return guestproto.Message{Error: fsError(rel, err)}
	}
	return answer(created)
}

// move renames from to to (a file, a symbolic link itself, or a folder), like mv -T:
// to's missing parents are made first; a file at to, or an empty folder when from is a
// folder, is replaced. Both parents are resolved beneath the workspace and the names
// renamed within them, so nothing moves in from outside or out from inside.
func (s *server) move(from, to string) guestproto.Message {
	src, perr := cleanPath(from)
	if perr != nil {
		return guestproto.Message{Error: perr}
	}
	dst, perr := cleanPath(to)
	if perr != nil {
		return guestproto.Message{Error: perr}
	}
	if src == "." || dst == "." {
		return errMsg(api.CodeInvalidArgument, "the workspace itself cannot be moved or replaced")
	}
	sdir, sname := split(src)
	sfd, err := s.root.open(sdir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return guestproto.Message{Error: fsError(src, err)}
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, sname, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return guestproto.Message{Error: fsError(src, err)}
	}
	ddir, dname := split(dst)
	dfd, err := s.root.mkdirAll(ddir)
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = unix.ENOTDIR
		}
		return guestproto.Message{Error: fsError(ddir, err)}
	}
	defer unix.Close(dfd)
	if err := unix.Renameat(sfd, sname, dfd, dname); err != nil {
		return guestproto.Message{Error: moveError(src, dst, err)}
	}
	e, err := entryAt(dfd, ddir, dname)
	if err != nil {
		return guestproto.Message{Error: fsError(dst, err)}
	}
	return guestproto.Message{Entry: e}
}

// moveError explains a failed rename of src to dst.
func moveError(src, dst string, err error) *guestproto.Error {
	from, to := workspace.GuestPath(src), workspace.GuestPath(dst)
	e := func(code, msg string) *guestproto.Error { return &guestproto.Error{Code: code, Message: msg} }
	switch {
	case errors.Is(err, unix.ENOENT):
		return e(api.CodeNotFound, fmt.Sprintf("no such file or folder: %q", from))
	case errors.Is(err, unix.EISDIR):
		return e(api.CodeFailedPrecondition, fmt.Sprintf("%q is a folder and %q is not: a folder can replace only an empty folder", to, from))
	case errors.Is(err, unix.ENOTDIR):
		return e(api.CodeFailedPrecondition, fmt.Sprintf("%q is a folder and %q is not: only a folder can replace a folder", from, to))
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return e(api.CodeFailedPrecondition, fmt.Sprintf("folder %q is not empty: it cannot be replaced", to))
	case errors.Is(err, unix.EINVAL):
		return e(api.CodeInvalidArgument, fmt.Sprintf("%q cannot be moved into itself (%q)", from, to))
	case errors.Is(err, unix.EXDEV):
		return e(api.CodeFailedPrecondition, fmt.Sprintf("%q and %q are on different file systems", from, to))
	case errors.Is(err, unix.EBUSY):
		return e(api.CodeFailedPrecondition, fmt.Sprintf("%q or %q is in use (a mount point)", from, to))
	}
	return fsError(dst, err)
}

// remove removes a file, a symbolic link (never what it points to) or a folder with
// everything in it. It never follows a link: each folder is opened without following one
// from the folder above it, and everything in it is removed through that descriptor, so a
// folder swapped for a link meanwhile is at worst unlinked itself. It stops when ctx ends.
func (s *server) remove(ctx context.Context, path string) guestproto.Message {
	rel, perr := cleanPath(path)
	if perr != nil {
		return guestproto.Message{Error: perr}
	}
	if rel == "." {
		return errMsg(api.CodeInvalidArgument, "the workspace itself cannot be removed; remove what is in it")
	}
	dir, name := split(rel)
	dfd, err := s.root.open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return guestproto.Message{Error: fsError(rel, err)}
	}
	defer unix.Close(dfd)
	if err := removeAt(ctx, dfd, name, 0); err != nil {
		switch {
		case errors.Is(err, errTooDeep):
			return errMsg(api.CodeFailedPrecondition, fmt.Sprintf("%q is more than %d folders deep; remove its deepest folders first", workspace.GuestPath(rel), maxRemoveDepth))
		case errors.Is(err, context.Canceled):
			return errMsg(api.CodeCanceled, "the remove was canceled; part of "+fmt.Sprintf("%q", workspace.GuestPath(rel))+" may be gone")
		case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
			return errMsg(api.CodeFailedPrecondition, fmt.Sprintf("%q changed while it was removed (something was added to it); try again", workspace.GuestPath(rel)))
		}
		return guestproto.Message{Error: fsError(rel, err)}
	}
	return guestproto.Message{OK: true}
}

// removeAt removes name in the folder open as parent, and everything in it if it is a
// folder, depth folders below where the remove began.
func removeAt(ctx context.Context, parent int, name string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(parent, name, 0)
	}
	if depth >= maxRemoveDepth {
		return errTooDeep
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if testHookRemove != nil {
		testHookRemove(name, false)
	}
	// O_PATH|O_NOFOLLOW opens a link itself (gVisor would follow one with O_DIRECTORY and
	// without O_PATH); what was opened is checked, and the folder reopened through it.
	pfd, err := unix.Openat(parent, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.Fstat(pfd, &st); err != nil {
		unix.Close(pfd)
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// Swapped for something else meanwhile: that thing itself goes.
		unix.Close(pfd)
		return unix.Unlinkat(parent, name, 0)
	}
	if testHookRemove != nil {
		testHookRemove(name, true)
	}
	err = emptyDir(ctx, pfd, depth)
	unix.Close(pfd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
}

// emptyDir removes everything in the folder open as fd. It reads a batch of names afresh
// each round (removing shifts the folder's offsets) until a read finds none, and gives up
// on a round that removed nothing. It checks ctx every round: user code that keeps adding
// files as fast as they go would otherwise hold the remove (and the guest) for ever.
func emptyDir(ctx context.Context, fd int, depth int) error {
	buf := make([]byte, 8<<10)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		names, err := readDirNames(fd, 256, buf)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		var first error
		removed := 0
		for _, n := range names {
			err := removeAt(ctx, fd, n, depth+1)
			switch {
			case err == nil, errors.Is(err, unix.ENOENT): // gone meanwhile is gone
				removed++
			case errors.Is(err, errTooDeep), errors.Is(err, context.Canceled):
				return err
			case first == nil:
				first = err
			}
		}
		if removed == 0 {
			return first
		}
	}
}

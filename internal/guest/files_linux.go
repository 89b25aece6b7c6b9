package guest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/workspace"
)

// uploadPrefix names the temporary files of uploads in progress; listings and change
// reports skip them.
const uploadPrefix = ".cellbox-upload-"

// maxListing caps the entries of one folder listing (the answer is one protocol line).
const maxListing = 10000

// cleanPath runs workspace.Clean and turns its error into a protocol error.
func cleanPath(p string) (string, *guestproto.Error) {
	rel, err := workspace.Clean(p)
	if err != nil {
		return "", &guestproto.Error{Code: errdefs.Code(err), Message: errText(err)}
	}
	return rel, nil
}

// errText is err's message without the trailing sentinel (": invalid argument").
func errText(err error) string {
	msg := err.Error()
	for _, s := range []error{errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrTooLarge,
		errdefs.ErrResourceExhausted, errdefs.ErrFailedPrecondition, errdefs.ErrUnavailable, errdefs.ErrCanceled} {
		if m, ok := strings.CutSuffix(msg, ": "+s.Error()); ok && errors.Is(err, s) {
			return m
		}
	}
	return msg
}

// fsError classifies a file-system error on workspace path rel for a person or a model.
func fsError(rel string, err error) *guestproto.Error {
	p := fmt.Sprintf("%q", workspace.GuestPath(rel))
	e := func(code, msg string) *guestproto.Error { return &guestproto.Error{Code: code, Message: msg} }
	switch {
	case errors.Is(err, errEscape):
		return e(api.CodeInvalidArgument, p+": path leaves the workspace through a symbolic link")
	case errors.Is(err, errSymlink):
		return e(api.CodeInvalidArgument, p+": path goes through a symbolic link, which this sandbox does not follow")
	case errors.Is(err, unix.ENOENT):
		return e(api.CodeNotFound, "no such file or folder: "+p)
	case errors.Is(err, unix.ENOTDIR):
		return e(api.CodeNotFound, "no such file or folder: "+p+" (a part of the path is not a folder)")
	case errors.Is(err, unix.EISDIR):
		return e(api.CodeInvalidArgument, p+" is a folder")
	case errors.Is(err, unix.ELOOP):
		return e(api.CodeInvalidArgument, p+": too many levels of symbolic links")
	case errors.Is(err, unix.ENAMETOOLONG):
		return e(api.CodeInvalidArgument, p+": a name in the path is too long")
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return e(api.CodeInvalidArgument, p+": permission denied")
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return e(api.CodeResourceExhausted, "the workspace is full (no space left for "+p+")")
	case errors.Is(err, unix.EROFS):
		return e(api.CodeFailedPrecondition, "the workspace is read-only")
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return e(api.CodeFailedPrecondition, "folder "+p+" is not empty; delete what is in it first")
	case errors.Is(err, guestproto.ErrAborted):
		return e(api.CodeCanceled, "the upload of "+p+" ended before all of it arrived; nothing was written")
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return e(api.CodeInternal, p+": "+errno.Error())
	}
	return e(api.CodeInternal, p+": the file operation failed")
}

// fileInfo describes entry name of folder rel from its lstat.
func fileInfo(rel, name string, st *unix.Stat_t) api.FileInfo {
	p := name
	if rel != "." {
		p = rel + "/" + name
	}
	if rel == "." && name == "." {
		p = "."
	}
	fi := api.FileInfo{Path: workspace.GuestPath(p), Name: name, Size: st.Size,
		ModTime: time.Unix(st.Mtim.Unix()).UTC()}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		fi.Type = "file"
	case unix.S_IFDIR:
		fi.Type = "dir"
	case unix.S_IFLNK:
		fi.Type = "symlink"
	default:
		fi.Type = "other"
	}
	return fi
}

// putFile writes the upload that follows the request on br to rel. On any failure it
// reads the body to its end before answering, so the sender is never left blocked.
func (s *server) putFile(path string, br *bufio.Reader) guestproto.Message {
	body := &guestproto.ChunkReader{R: br}
	fail := func(e *guestproto.Error) guestproto.Message {
		io.Copy(io.Discard, body)
		return guestproto.Message{Error: e}
	}
	rel, perr := cleanPath(path)
	if perr != nil {
		return fail(perr)
	}
	if rel == "." {
		return fail(&guestproto.Error{Code: api.CodeInvalidArgument, Message: "give the path of a file to write, not the workspace itself"})
	}
	dir, name := split(rel)
	dfd, err := s.root.mkdirAll(dir)
	if err != nil {
		return fail(fsError(dir, err))
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			return fail(fsError(rel, unix.EISDIR))
		case unix.S_IFLNK:
			// Replacing the link is harmless, but one that leads out is refused, as it is
			// everywhere else.
			fd, err := s.root.open(rel, unix.O_PATH, 0)
			if errors.Is(err, errEscape) || errors.Is(err, errSymlink) {
				return fail(fsError(rel, err))
			}
			if err == nil {
				unix.Close(fd)
			}
		}
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := uploadPrefix + hex.EncodeToString(rnd[:])
	tfd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fail(fsError(rel, err))
	}
	f := os.NewFile(uintptr(tfd), tmp)
	err = s.root.chown(tfd)
	if err == nil {
		buf := make([]byte, 256<<10)
		_, err = io.CopyBuffer(writerOnly{f}, body, buf)
	}
	if err == nil {
		err = unix.Fstat(tfd, &st)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return fail(fsError(rel, err))
	}
	fi := fileInfo(dir, name, &st)
	return guestproto.Message{File: &fi}
}

type writerOnly struct{ w io.Writer }

func (w writerOnly) Write(p []byte) (int, error) { return w.w.Write(p) }

// getFile answers with the File message and then exactly its size in bytes, streamed.
func (s *server) getFile(w io.Writer, path string) {
	rel, perr := cleanPath(path)
	if perr != nil {
		writeMsg(w, guestproto.Message{Error: perr})
		return
	}
	// O_NONBLOCK: opening a FIFO must not hang; it is refused below.
	fd, err := s.root.open(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		writeMsg(w, guestproto.Message{Error: fsError(rel, err)})
		return
	}
	f := os.NewFile(uintptr(fd), "file")
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		writeMsg(w, guestproto.Message{Error: fsError(rel, err)})
		return
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		writeMsg(w, guestproto.Message{Error: &guestproto.Error{Code: api.CodeInvalidArgument,
			Message: fmt.Sprintf("%q is a folder; list it instead", workspace.GuestPath(rel))}})
		return
	default:
		writeMsg(w, guestproto.Message{Error: &guestproto.Error{Code: api.CodeInvalidArgument,
			Message: fmt.Sprintf("%q is not a regular file", workspace.GuestPath(rel))}})
		return
	}
	unix.SetNonblock(fd, false)
	dir, name := split(rel)
	fi := fileInfo(dir, name, &st)
	if writeMsg(w, guestproto.Message{File: &fi}) != nil {
		return
	}
	// A file that shrinks meanwhile ends the stream early: the reader sees a short body.
	io.CopyBuffer(w, io.LimitReader(f, st.Size), make([]byte, 256<<10))
}

// listFiles lists one folder (not recursively), sorted by name.
func (s *server) listFiles(path string) guestproto.Message {
	rel, perr := cleanPath(path)
	if perr != nil {
		return guestproto.Message{Error: perr}
	}
	fd, err := s.root.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) {
			var st unix.Stat_t
			if pfd, perr := s.root.open(rel, unix.O_PATH, 0); perr == nil {
				serr := unix.Fstat(pfd, &st)
				unix.Close(pfd)
				if serr == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
					return guestproto.Message{Error: &guestproto.Error{Code: api.CodeInvalidArgument,
						Message: fmt.Sprintf("%q is a file, not a folder", workspace.GuestPath(rel))}}
				}
			}
		}
		return guestproto.Message{Error: fsError(rel, err)}
	}
	defer unix.Close(fd)
	names, err := readDirNames(fd, maxListing+64, make([]byte, 32<<10))
	if err != nil {
		return guestproto.Message{Error: fsError(rel, err)}
	}
	slices.Sort(names)
	files := make([]api.FileInfo, 0, len(names))
	for _, n := range names {
		if strings.HasPrefix(n, uploadPrefix) {
			continue
		}
		if len(files) == maxListing {
			break
		}
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // gone meanwhile
		}
		files = append(files, fileInfo(rel, n, &st))
	}
	return guestproto.Message{Listing: &api.FileList{Path: workspace.GuestPath(rel), Files: files}}
}

// deleteFile removes a file, a symbolic link (not what it points to) or an empty folder.
func (s *server) deleteFile(path string) guestproto.Message {
	rel, perr := cleanPath(path)
	if perr != nil {
		return guestproto.Message{Error: perr}
	}
	if rel == "." {
		return guestproto.Message{Error: &guestproto.Error{Code: api.CodeInvalidArgument,
			Message: "the workspace itself cannot be deleted; delete the files in it"}}
	}
	dir, name := split(rel)
	dfd, err := s.root.open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return guestproto.Message{Error: fsError(rel, err)}
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return guestproto.Message{Error: fsError(rel, err)}
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(dfd, name, flags); err != nil {
		return guestproto.Message{Error: fsError(rel, err)}
	}
	return guestproto.Message{OK: true}
}

// readDirNames reads the names in an open folder (without . and ..), at most about max of
// them, using buf for the reads.
func readDirNames(fd int, max int, buf []byte) ([]string, error) {
	// Read through a fresh descriptor: fd may be O_PATH, and its offset must not move.
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return readNames(dfd, max, buf)
}

// readNames reads up to about max names from dfd, a directory opened for reading whose
// offset is at its start, and leaves it at the end.
func readNames(dfd int, max int, buf []byte) ([]string, error) {
	var names []string
	for len(names) < max {
		n, err := unix.Getdents(dfd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	return names, nil
}

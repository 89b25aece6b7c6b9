// Package move moves paused sessions between the nodes of a cluster: a node being drained
// (its Kubernetes Node cordoned) sends each of its sessions to a node that takes new ones,
// as one tar stream of the session's record, checkpoint and workspace, over HTTP with the
// cluster's shared secret (docs/kubernetes.md, "Draining a node").
//
// The stream is a security boundary twice over. The sender walks a workspace that
// untrusted code wrote: it never follows a symlink (they travel as symlinks), opens files
// with O_NOFOLLOW, and sends only folders, regular files and symlinks. The receiver writes
// under os.Root (nothing escapes the two folders it is given, whatever the names or links
// say), caps sizes and counts, and keeps owners within the sandbox's range.
//
// Not for: pausing and restoring (package session), or routing requests to where a
// session went (package cluster).
package move

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
)

// The stream's parts: the record first, then the checkpoint's files, then the workspace's.
const (
	recordName    = "record.json"
	checkpointDir = "checkpoint/"
	workspaceDir  = "workspace/"
)

const (
	maxRecord  = 1 << 20   // a session's record (env, tools, CA) fits in far less
	maxEntries = 1_000_000 // files, folders and links in one move
	maxOwner   = 65535     // a sandbox's files belong to ids it maps: 0..65535 at most
)

// Path is where a node takes a moved session: PUT Path + id.
const Path = "/v1/cluster/sessions/"

// write writes o as the stream: its record, then its checkpoint (files the host wrote),
// then its workspace (what the session's code wrote: see the package comment).
func write(w io.Writer, o *session.Outgoing) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: recordName, Mode: 0o600, Size: int64(len(o.Record))}); err != nil {
		return err
	}
	if _, err := tw.Write(o.Record); err != nil {
		return err
	}
	if err := writeTree(tw, o.Checkpoint, checkpointDir, false); err != nil {
		return fmt.Errorf("the checkpoint: %w", err)
	}
	if err := writeTree(tw, o.Workspace, workspaceDir, true); err != nil {
		return fmt.Errorf("the workspace: %w", err)
	}
	return tw.Close()
}

// writeTree adds the tree under dir (not dir itself) as prefix and its relative paths.
// links: symlinks travel as such; else a symlink is an error. Anything but folders,
// regular files and symlinks (a FIFO, a socket) is left out.
func writeTree(tw *tar.Writer, dir, prefix string, links bool) error {
	type inode struct{ dev, ino uint64 }
	sent := map[inode]string{} // files of more than one link, by the name they went as
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := prefix + filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st != nil {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
		}
		if links && st != nil && st.Nlink > 1 && d.Type().IsRegular() {
			// A hard link travels as one (a Python environment has many): its file once.
			key := inode{uint64(st.Dev), st.Ino}
			if first, ok := sent[key]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				return tw.WriteHeader(h)
			}
			sent[key] = name
		}
		if fi.Mode()&fs.ModeSticky != 0 {
			h.Mode = int64(fi.Mode().Perm()) | 0o1000
		}
		switch {
		case d.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
			return tw.WriteHeader(h)
		case d.Type()&fs.ModeSymlink != 0:
			if !links {
				return fmt.Errorf("%s is a symlink", rel)
			}
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(h)
		case d.Type().IsRegular():
			return writeFile(tw, p, h)
		}
		return nil
	})
}

// writeFile adds the regular file at p, opened without following a link and checked to
// be the file walked.
func writeFile(tw *tar.Writer, p string, h *tar.Header) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s changed while it was sent", h.Name)
	}
	h.Typeflag, h.Size = tar.TypeReg, fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(f, fi.Size()))
	if err == nil && n != fi.Size() {
		err = fmt.Errorf("%s changed while it was sent", h.Name)
	}
	return err
}

// Receive takes the session of a stream (write) into m: body is the request's, as
// Verifier.Check returns it (its end fails unless it is the body signed). stayPaused: it
// was paused before it moved, and is paused again here once it has been seen to resume.
// tenant reports whether a tenant exists on this node.
func Receive(ctx context.Context, m *session.Manager, id string, body io.Reader, stayPaused bool, tenant func(string) bool) (*api.Session, error) {
	tr := tar.NewReader(body)
	h, err := tr.Next()
	if err != nil || h.Name != recordName || h.Typeflag != tar.TypeReg || h.Size > maxRecord {
		return nil, fmt.Errorf("the stream does not begin with the session's record: %w", errdefs.ErrInvalidArgument)
	}
	rec, err := io.ReadAll(tr)
	if err != nil {
		return nil, fmt.Errorf("read the session's record: %w", errdefs.ErrInvalidArgument)
	}
	return m.MoveIn(ctx, session.Incoming{ID: id, Record: rec, StayPaused: stayPaused, Tenant: tenant,
		Fill: func(checkpoint, workspace string, maxCheckpoint, maxWorkspace int64) error {
			if err := readTrees(tr, checkpoint, workspace, maxCheckpoint, maxWorkspace); err != nil {
				return err
			}
			return end(body)
		}})
}

// maxTail is what may follow a stream's last entry: a tar's end (two zero blocks, which
// the tar reader has read) and padding to a record of 10 KiB at most.
const maxTail = 10 << 10

// end reads the body to its end, past the tar's: only there does it say whether the
// stream was the one signed.
func end(body io.Reader) error {
	n, err := io.Copy(io.Discard, io.LimitReader(body, maxTail+1))
	switch {
	case errors.Is(err, errBody):
		return fmt.Errorf("%w: %w", err, errdefs.ErrUnauthenticated)
	case err != nil:
		return fmt.Errorf("read the stream: %v: %w", err, errdefs.ErrInvalidArgument)
	case n > maxTail:
		return fmt.Errorf("the stream goes on after its last entry: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// readTrees writes the stream's remaining entries into the two folders (see the package
// comment).
func readTrees(tr *tar.Reader, checkpoint, workspace string, maxCheckpoint, maxWorkspace int64) error {
	cp, err := os.OpenRoot(checkpoint)
	if err != nil {
		return err
	}
	defer cp.Close()
	ws, err := os.OpenRoot(workspace)
	if err != nil {
		return err
	}
	defer ws.Close()
	var cpBytes, wsBytes int64
	written := map[string]bool{} // the workspace's regular files written from the stream
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read the stream: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if n >= maxEntries {
			return fmt.Errorf("more than %d files in one move: %w", maxEntries, errdefs.ErrResourceExhausted)
		}
		root, budget, used, inWorkspace := cp, maxCheckpoint, &cpBytes, false
		name, ok := strings.CutPrefix(h.Name, checkpointDir)
		if !ok {
			name, ok = strings.CutPrefix(h.Name, workspaceDir)
			root, budget, used, inWorkspace = ws, maxWorkspace, &wsBytes, true
		}
		name = strings.TrimSuffix(name, "/")
		if !ok || name == "" || !filepath.IsLocal(name) || path.Clean(name) != name {
			return fmt.Errorf("the stream names %q, outside the session's folders: %w", h.Name, errdefs.ErrInvalidArgument)
		}
		mode := fs.FileMode(h.Mode) & (fs.ModePerm | 0o1000)
		if mode&0o1000 != 0 {
			mode = mode&fs.ModePerm | fs.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err = root.Mkdir(name, 0o700); err == nil {
				err = root.Chmod(name, mode)
			}
		case tar.TypeReg:
			if h.Size < 0 || *used+h.Size > budget {
				return fmt.Errorf("the moved session's files are larger than its disk quota: %w", errdefs.ErrResourceExhausted)
			}
			*used += h.Size
			err = writeEntry(root, name, mode, h.ModTime, tr, h.Size)
			if inWorkspace {
				written[name] = true
			}
		case tar.TypeLink:
			// Only to a file of the workspace this stream wrote: never to anything else.
			target, ok := strings.CutPrefix(h.Linkname, workspaceDir)
			if !inWorkspace || !ok || !written[target] {
				return fmt.Errorf("the stream links %q to %q, not a file it sent: %w", h.Name, h.Linkname, errdefs.ErrInvalidArgument)
			}
			err = root.Link(target, name)
		case tar.TypeSymlink:
			if !inWorkspace {
				return fmt.Errorf("the checkpoint holds a symlink: %w", errdefs.ErrInvalidArgument)
			}
			// The target is not followed here, ever: it is text the session's code reads.
			err = root.Symlink(h.Linkname, name)
		default:
			return fmt.Errorf("the stream holds %q of a kind a move does not send: %w", h.Name, errdefs.ErrInvalidArgument)
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTDIR) {
			// A name in a folder the stream did not send, or sent twice: the sender's doing.
			return fmt.Errorf("the stream cannot be written as sent (%s: %v): %w", h.Name, errors.Unwrap(err), errdefs.ErrInvalidArgument)
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", h.Name, err)
		}
		if inWorkspace {
			if h.Uid < 0 || h.Uid > maxOwner || h.Gid < 0 || h.Gid > maxOwner {
				return fmt.Errorf("%s belongs to an id outside a sandbox's: %w", h.Name, errdefs.ErrInvalidArgument)
			}
			if err := root.Lchown(name, h.Uid, h.Gid); err != nil {
				return fmt.Errorf("write %s: %w", h.Name, err)
			}
		}
	}
	return nil
}

// writeEntry writes a new regular file of size bytes from r, of the mode and time sent
// (nothing later in the stream changes a file's mtime: a hard link changes its ctime).
func writeEntry(root *os.Root, name string, mode fs.FileMode, mtime time.Time, r io.Reader, size int64) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, r, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil { // exactly the mode sent, whatever this process's umask
		err = root.Chmod(name, mode)
	}
	if err == nil {
		root.Chtimes(name, mtime, mtime)
	}
	return err
}

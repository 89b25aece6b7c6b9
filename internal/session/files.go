package session

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/workspace"
)

// File calls go to the session's guest beside whatever runs in it: they take no turn and
// count as activity.

// fileTarget finds the session's guest, resuming the session if it is paused, and cleans a
// workspace path for it. whole is the refusal when the workspace itself (".") is not a
// valid target; "" when it is. done ends the call's use of the sandbox (a pause waits for it).
func (m *Manager) fileTarget(ctx context.Context, id, path, whole string) (_ *guestproto.Client, _ string, done func(), _ error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, "", nil, err
	}
	rel, err := cleanTarget(path, whole)
	if err != nil {
		return nil, "", nil, err
	}
	_, done, err = m.use(ctx, s)
	if err != nil {
		return nil, "", nil, err
	}
	return m.current(s).guest, rel, done, nil
}

// cleanTarget cleans a workspace path (see fileTarget).
func cleanTarget(path, whole string) (string, error) {
	rel, err := workspace.Clean(path)
	if err != nil {
		return "", err
	}
	if rel == "." && whole != "" {
		return "", fmt.Errorf("%s: %w", whole, errdefs.ErrInvalidArgument)
	}
	return rel, nil
}

// PutFile writes a workspace file from r.
func (m *Manager) PutFile(ctx context.Context, id, path string, r io.Reader) (*api.FileInfo, error) {
	g, rel, done, err := m.fileTarget(ctx, id, path, "give a file name to upload to")
	if err != nil {
		return nil, err
	}
	defer done()
	return g.PutFile(ctx, rel, r)
}

// GetFile opens a workspace file; the caller closes the reader.
func (m *Manager) GetFile(ctx context.Context, id, path string) (*api.FileInfo, io.ReadCloser, error) {
	g, rel, done, err := m.fileTarget(ctx, id, path, "")
	if err != nil {
		return nil, nil, err
	}
	info, rc, err := g.GetFile(ctx, rel)
	if err != nil {
		done()
		return nil, nil, err
	}
	return info, &doneReader{ReadCloser: rc, done: done}, nil
}

// ListFiles lists a workspace folder.
func (m *Manager) ListFiles(ctx context.Context, id, path string) (*api.FileList, error) {
	g, rel, done, err := m.fileTarget(ctx, id, path, "")
	if err != nil {
		return nil, err
	}
	defer done()
	return g.ListFiles(ctx, rel)
}

// DeleteFile removes a workspace file or empty folder.
func (m *Manager) DeleteFile(ctx context.Context, id, path string) error {
	g, rel, done, err := m.fileTarget(ctx, id, path, "the workspace itself cannot be deleted")
	if err != nil {
		return err
	}
	defer done()
	return g.DeleteFile(ctx, rel)
}

// doneReader calls done once, when it is closed.
type doneReader struct {
	io.ReadCloser
	done func()
	once sync.Once
}

func (r *doneReader) Close() error {
	err := r.ReadCloser.Close()
	r.once.Do(r.done)
	return err
}

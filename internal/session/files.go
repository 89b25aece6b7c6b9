package session

import (
	"context"
	"fmt"
	"io"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/workspace"
)

// File calls go to the session's guest beside whatever runs in it: they take no turn and
// count as activity.

// fileTarget finds the session's guest and cleans a workspace path for it. whole is the
// refusal when the workspace itself (".") is not a valid target; "" when it is.
func (m *Manager) fileTarget(ctx context.Context, id, path, whole string) (*guestproto.Client, string, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, "", err
	}
	rel, err := workspace.Clean(path)
	if err != nil {
		return nil, "", err
	}
	if rel == "." && whole != "" {
		return nil, "", fmt.Errorf("%s: %w", whole, errdefs.ErrInvalidArgument)
	}
	return m.current(s).guest, rel, nil
}

// PutFile writes a workspace file from r.
func (m *Manager) PutFile(ctx context.Context, id, path string, r io.Reader) (*api.FileInfo, error) {
	g, rel, err := m.fileTarget(ctx, id, path, "give a file name to upload to")
	if err != nil {
		return nil, err
	}
	return g.PutFile(ctx, rel, r)
}

// GetFile opens a workspace file; the caller closes the reader.
func (m *Manager) GetFile(ctx context.Context, id, path string) (*api.FileInfo, io.ReadCloser, error) {
	g, rel, err := m.fileTarget(ctx, id, path, "")
	if err != nil {
		return nil, nil, err
	}
	return g.GetFile(ctx, rel)
}

// ListFiles lists a workspace folder.
func (m *Manager) ListFiles(ctx context.Context, id, path string) (*api.FileList, error) {
	g, rel, err := m.fileTarget(ctx, id, path, "")
	if err != nil {
		return nil, err
	}
	return g.ListFiles(ctx, rel)
}

// DeleteFile removes a workspace file or empty folder.
func (m *Manager) DeleteFile(ctx context.Context, id, path string) error {
	g, rel, err := m.fileTarget(ctx, id, path, "the workspace itself cannot be deleted")
	if err != nil {
		return err
	}
	return g.DeleteFile(ctx, rel)
}

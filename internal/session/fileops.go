package session

import (
	"context"

	"github.com/cellbox/cellbox/internal/guestproto"
)

// MakeDir makes a workspace folder and its missing parents; the entry's Created says
// whether it was made now. Something else at the path fails with ErrFailedPrecondition.
func (m *Manager) MakeDir(ctx context.Context, id, path string) (*guestproto.Entry, error) {
	g, rel, done, err := m.fileTarget(ctx, id, path, "")
	if err != nil {
		return nil, err
	}
	defer done()
	return g.MakeDir(ctx, rel)
}

// Move renames a workspace file, symbolic link or folder, making the destination's missing
// parents; a file there, or an empty folder when from is a folder, is replaced.
func (m *Manager) Move(ctx context.Context, id, from, to string) (*guestproto.Entry, error) {
	dst, err := cleanTarget(to, "the workspace itself cannot be replaced")
	if err != nil {
		return nil, err
	}
	g, src, done, err := m.fileTarget(ctx, id, from, "the workspace itself cannot be moved")
	if err != nil {
		return nil, err
	}
	defer done()
	return g.Move(ctx, src, dst)
}

// Remove removes a workspace file, symbolic link or folder with everything in it.
func (m *Manager) Remove(ctx context.Context, id, path string) error {
	g, rel, done, err := m.fileTarget(ctx, id, path, "the workspace itself cannot be removed")
	if err != nil {
		return err
	}
	defer done()
	return g.Remove(ctx, rel)
}

// Stat describes one workspace entry, its symbolic link not followed.
func (m *Manager) Stat(ctx context.Context, id, path string) (*guestproto.Entry, error) {
	g, rel, done, err := m.fileTarget(ctx, id, path, "")
	if err != nil {
		return nil, err
	}
	defer done()
	return g.Stat(ctx, rel)
}

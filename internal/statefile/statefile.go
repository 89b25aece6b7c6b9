// Package statefile writes the small files of cellbox's state dir (session records, E2B
// contexts, conversations, runc's rootfs files) whole or not at all: a reader, or the next
// server after a crash, sees the old content or the new, never a part.
//
// Not for: workspace files (package workspace) or anything user code can reach.
package statefile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path's content with data: a new file in the same folder, renamed over the
// old. The folder must exist.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync() // on disk before the rename makes it the file: old or new after a power cut too
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// Update is Write, unless path holds data already: then it leaves the file as it is.
func Update(path string, data []byte, perm os.FileMode) error {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	return Write(path, data, perm)
}

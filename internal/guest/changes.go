package guest

import (
	"slices"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/workspace"
)

// fileState is what change detection compares.
type fileState struct {
	size  int64
	mtime int64
	ino   uint64
	mode  uint32
}

// snapshot is the state of the workspace's files (not folders) by relative path.
type snapshot struct {
	files    map[string]fileState
	complete bool
}

// diff lists what changed from a to b, sorted by path. When either snapshot is incomplete
// only files both saw are compared.
func diff(a, b snapshot) []api.FileChange {
	out := []api.FileChange{}
	both := a.complete && b.complete
	for p, nb := range b.files {
		na, ok := a.files[p]
		switch {
		case !ok && both:
			out = append(out, api.FileChange{Path: workspace.GuestPath(p), Size: nb.size, Change: api.ChangeCreated})
		case ok && na != nb:
			out = append(out, api.FileChange{Path: workspace.GuestPath(p), Size: nb.size, Change: api.ChangeModified})
		}
	}
	if both {
		for p := range a.files {
			if _, ok := b.files[p]; !ok {
				out = append(out, api.FileChange{Path: workspace.GuestPath(p), Change: api.ChangeDeleted})
			}
		}
	}
	slices.SortFunc(out, func(x, y api.FileChange) int { return strings.Compare(x.Path, y.Path) })
	return out
}

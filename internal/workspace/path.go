// Package workspace handles the workspace, the folder a session sees as /mnt/data: safe
// resolution of the paths users and models give, host-side folders with disk quotas, and
// retention of workspaces after their session ends.
//
// Every path here is a security boundary: a path from a request must never name anything
// outside the workspace. Not for: reading or writing workspace files on the server's side
// (the guest does that, inside the sandbox).
package workspace

import (
	"fmt"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// MaxPathLen caps a workspace path as given by a user.
const MaxPathLen = 4096

// Clean turns a user's workspace path into a clean relative path ("." for the workspace
// itself). Accepted: relative paths and absolute paths under /mnt/data. Refused, with an
// error matching errdefs.ErrInvalidArgument: other absolute paths, any ".." component,
// NUL bytes, backslashes, and paths longer than MaxPathLen.
// Symlinks are not a lexical matter: whoever opens the path must refuse to follow one out
// of the workspace (the guest opens with RESOLVE_BENEATH).
func Clean(p string) (string, error) {
	if len(p) > MaxPathLen {
		return "", fmt.Errorf("path is longer than %d bytes: %w", MaxPathLen, errdefs.ErrInvalidArgument)
	}
	if strings.ContainsAny(p, "\x00\\") {
		return "", fmt.Errorf("path %q contains a NUL byte or a backslash: %w", p, errdefs.ErrInvalidArgument)
	}
	rel := p
	if strings.HasPrefix(p, "/") {
		switch {
		case p == api.WorkspaceDir || p == api.WorkspaceDir+"/":
			rel = ""
		case strings.HasPrefix(p, api.WorkspaceDir+"/"):
			rel = p[len(api.WorkspaceDir)+1:]
		default:
			return "", fmt.Errorf("path %q is outside the workspace: give a path relative to %s or under it: %w",
				p, api.WorkspaceDir, errdefs.ErrInvalidArgument)
		}
	}
	var parts []string
	for _, c := range strings.Split(rel, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("path %q contains \"..\": paths must stay inside %s: %w",
				p, api.WorkspaceDir, errdefs.ErrInvalidArgument)
		}
		parts = append(parts, c)
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

// GuestPath is the absolute path under /mnt/data of a clean relative path.
func GuestPath(rel string) string {
	if rel == "." || rel == "" {
		return api.WorkspaceDir
	}
	return api.WorkspaceDir + "/" + rel
}

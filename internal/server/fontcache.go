package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// prepareFontCache builds matplotlib's font cache into dir with the given interpreter,
// once: without it every new kernel spends about a second rebuilding it and warns on
// stderr. The guest seeds each kernel's MPLCONFIGDIR from it. Returns dir.
func prepareFontCache(ctx context.Context, python, dir string) (string, error) {
	if m, _ := filepath.Glob(filepath.Join(dir, "fontlist-*.json")); len(m) > 0 {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", "import matplotlib.font_manager")
	cmd.Env = append(os.Environ(), "MPLCONFIGDIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build matplotlib font cache with %s: %w: %s", python, err, out)
	}
	// The sandbox user reads it.
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range append(files, dir) {
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		mode := fi.Mode().Perm() | 0o444
		if fi.IsDir() {
			mode |= 0o111
		}
		os.Chmod(f, mode)
	}
	return dir, nil
}

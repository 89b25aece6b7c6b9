//go:build !linux

package workspace

import (
	"os"
	"path/filepath"
	"testing"
)

// writeAsOwner writes a file into a workspace (no quotas here: as the test's own user).
func writeAsOwner(t *testing.T, dir, name, data string) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
}

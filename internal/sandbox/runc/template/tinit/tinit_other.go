//go:build !linux

package tinit

import (
	"fmt"
	"os"
)

// Main is `cellbox template-init`: Linux only, as kernel templates are.
func Main(args []string) int {
	fmt.Fprintln(os.Stderr, "cellbox template-init: kernel templates run on Linux only")
	return 2
}

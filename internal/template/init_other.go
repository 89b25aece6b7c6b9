//go:build !linux

package template

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Main is `cellbox template-init`: Linux only, as kernel templates are.
func Main(args []string) int {
	fmt.Fprintln(os.Stderr, "cellbox template-init: kernel templates run on Linux only")
	return 2
}

func sysProcAttr() (*syscall.SysProcAttr, error) {
	return nil, fmt.Errorf("kernel templates run on Linux only: %w", errors.ErrUnsupported)
}

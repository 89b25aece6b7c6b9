//go:build !linux

package template

import (
	"errors"
	"fmt"
	"syscall"
)

func sysProcAttr() (*syscall.SysProcAttr, error) {
	return nil, fmt.Errorf("kernel templates run on Linux only: %w", errors.ErrUnsupported)
}

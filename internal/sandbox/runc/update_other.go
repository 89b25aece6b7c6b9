//go:build !linux

package runc

import (
	"context"
	"errors"

	"github.com/cellbox/cellbox/internal/sandbox"
)

// Update is Linux only, as the backend is.
func (s *Sandbox) Update(ctx context.Context, l sandbox.Limits) error { return errors.ErrUnsupported }

//go:build !linux

package runc

import (
	"context"
	"errors"
	"log/slog"

	"github.com/cellbox/cellbox/internal/sandbox"
)

// Update is Linux only, as the backend is.
func (s *Sandbox) Update(ctx context.Context, l sandbox.Limits) error { return errors.ErrUnsupported }

func (s *Sandbox) ownCgroups() []string { return nil }

func removeCgroups(dirs []string, log *slog.Logger) {}

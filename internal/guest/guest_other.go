//go:build !linux

package guest

import (
	"context"
	"errors"
	"io"
)

// Serve serves the guest protocol on conn. The guest runs only on Linux.
func Serve(ctx context.Context, conn io.ReadWriteCloser, opts Options) error {
	conn.Close()
	return errors.New("the cellbox guest runs only on Linux")
}

func killAll() {}

//go:build !linux

package guest

import (
	"context"
	"errors"
	"io"
	"net"
)

// Serve serves the guest protocol on conn. The guest runs only on Linux.
func Serve(ctx context.Context, conn io.ReadWriteCloser, opts Options) error {
	conn.Close()
	return errors.New("the cellbox guest runs only on Linux")
}

// Listen serves the guest protocol on the listener listen makes. The guest runs only on Linux.
func Listen(ctx context.Context, listen func() (net.Listener, error), token string, opts Options) error {
	return errors.New("the cellbox guest runs only on Linux")
}

func listenUnix(path string) (net.Listener, error) {
	return nil, errors.New("the cellbox guest runs only on Linux")
}

func nullStdin() error { return nil }

func logTo(string) error { return nil }

func killAll() {}

func installSeccomp(string) error { return errors.New("seccomp filters are Linux's") }

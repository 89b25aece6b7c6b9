//go:build !linux

package runc

import (
	"context"
	"errors"
	"net"
)

func cgroupV2() bool           { return false }
func swapLimitSupported() bool { return false }

const supported = false

func adoptOrphans() error { return errors.ErrUnsupported }

func watchExit(pid int) (<-chan struct{}, func(), func() error, error) {
	return nil, nil, nil, errors.ErrUnsupported
}

func childrenWith(marker string, skip int) []int { return nil }

func dialUnixIn(ctx context.Context, dir, name string) (net.Conn, error) {
	return nil, errors.ErrUnsupported
}

func unpinNullNetns(string) {}

func readRunFile(dir, name string, max int64) ([]byte, error) { return nil, errors.ErrUnsupported }

func bindRoot(src, dst string) error { return errors.ErrUnsupported }

func unbindRoot(dst string) error { return nil }

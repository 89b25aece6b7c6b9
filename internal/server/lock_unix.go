//go:build unix

package server

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an exclusive lock on the file at path, held until unlock or the process ends
// (even by a crash). ok is false when another open of the file holds it, in another process
// or in this one.
func tryLock(path string) (unlock func(), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return func() { f.Close() }, true, nil
}

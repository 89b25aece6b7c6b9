package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// ErrStateDirInUse matches (errors.Is) the error of Start when another server holds its state
// dir.
var ErrStateDirInUse = errors.New("state dir in use")

// inUseError names the state dir and the holder's pid, and matches ErrStateDirInUse.
type inUseError struct{ msg string }

func (e *inUseError) Error() string        { return e.msg }
func (e *inUseError) Is(target error) bool { return target == ErrStateDirInUse }

// lockStateDir takes the lock of the state dir dir (its file "lock", which holds the pid of
// the server that has it). A server cleans up every sandbox of its state dir when it
// starts, so two must never share one.
func lockStateDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "lock")
	unlock, ok, err := tryLock(path)
	if err != nil {
		return nil, fmt.Errorf("lock state dir %s: %w", dir, err)
	}
	if !ok {
		msg := "another cellbox server uses state dir " + dir
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				msg += fmt.Sprintf(" (pid %d)", pid)
			}
		}
		return nil, &inUseError{msg}
	}
	// Writing through another descriptor keeps the lock: it belongs to tryLock's.
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		unlock()
		return nil, fmt.Errorf("lock state dir %s: %w", dir, err)
	}
	return sync.OnceFunc(unlock), nil
}

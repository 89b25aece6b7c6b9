//go:build !unix

package main

import "os"

// tryLock cannot lock here: it takes the file when it can create it, so a crashed run's
// folder is not reused.
func tryLock(path string) (unlock func(), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if os.IsExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	f.Close()
	return func() { os.Remove(path) }, true, nil
}

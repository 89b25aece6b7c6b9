//go:build !unix

package server

import "os"

// tryLock cannot lock here: it takes the file when it can create it. A crashed server's
// file stays, so its state dir must be freed by removing the file.
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

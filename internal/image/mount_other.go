//go:build !linux

package image

// unmountBelow: images are built on Linux only; elsewhere nothing is mounted.
func unmountBelow(string) error { return nil }

// lockDir: images are built on Linux only.
func lockDir(string) (func(), error) { return func() {}, nil }

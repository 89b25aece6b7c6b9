//go:build !linux

package image

// unmountBelow: images are built on Linux only; elsewhere nothing is mounted.
func unmountBelow(string) error { return nil }

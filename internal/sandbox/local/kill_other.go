//go:build !linux

package local

// killMarked is Linux-only (it reads /proc); elsewhere Stop kills the process group only.
func killMarked(match func(marker string) bool) {}

//go:build !linux

package runc

func cgroupV2() bool           { return false }
func swapLimitSupported() bool { return false }

const supported = false

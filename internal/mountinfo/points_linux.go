package mountinfo

import "os"

// Points lists the mount points of this process's mount namespace.
func Points() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return Parse(data), nil
}

// Mounts lists the mounts of this process's mount namespace.
func Mounts() ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return ParseMounts(data), nil
}

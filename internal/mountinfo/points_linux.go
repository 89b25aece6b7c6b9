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

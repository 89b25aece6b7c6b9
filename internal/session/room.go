package session

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
)

// startsAtOnce is how many sandboxes start at once (see starts): two per core.
var startsAtOnce = 2 * runtime.NumCPU()

// hostMemoryRoom reports whether the host has at least a quarter of its memory available
// (MemAvailable of /proc/meminfo): below that, warm pools do not grow past their size.
// Where it cannot tell (not Linux), it says yes.
func hostMemoryRoom() bool {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return true
	}
	var total, avail int64 = -1, -1
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			continue
		}
		switch string(f[0]) {
		case "MemTotal:":
			total = v
		case "MemAvailable:":
			avail = v
		}
	}
	return total <= 0 || avail < 0 || avail*4 >= total
}

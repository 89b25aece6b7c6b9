package guest

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxSeccompInsns is the kernel's limit on a classic BPF program (BPF_MAXINSNS).
const maxSeccompInsns = 4096

// installSeccomp installs the seccomp program in the file path on every thread of the guest
// (SECCOMP_FILTER_FLAG_TSYNC), as runc's own filter would have been: everything the guest
// starts inherits it. The program is what the backend wrote (seccomp.Program on the
// server's side): struct sock_filter entries in the machine's byte order. The guest only
// installs it; it knows nothing of what it allows. no_new_privs must be set already (the
// runtime's spec sets it): without it, and without CAP_SYS_ADMIN, the kernel refuses.
func installSeccomp(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	n := len(raw) / 8
	if len(raw) == 0 || len(raw)%8 != 0 || n > maxSeccompInsns {
		return fmt.Errorf("%s is not a seccomp program (%d bytes)", path, len(raw))
	}
	filter := make([]unix.SockFilter, n)
	for i := range filter {
		b := raw[8*i:]
		filter[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	prog := unix.SockFprog{Len: uint16(n), Filter: &filter[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	switch {
	case errno != 0:
		return fmt.Errorf("install the seccomp filter: %w", errno)
	case r != 0: // TSYNC: the thread that could not take the filter
		return fmt.Errorf("install the seccomp filter: thread %d could not take it", r)
	}
	return nil
}

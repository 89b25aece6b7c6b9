// Package guestbin carries the guest's own binary at the end of cellbox's: a sandbox runs
// that small binary (cmd/cellbox-guest) rather than the whole of cellbox, whose packages'
// initialisation (the model SDKs, Docker's and Kubernetes' clients, Prometheus) leaves
// ~2.4 MiB of private memory in every guest. The build (scripts/build.sh) appends it with
// a trailer; the server writes it out once into its state dir and runs it. A cellbox built
// without it (a plain `go build`) runs itself as the guest, as before.
package guestbin

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// The trailer after the guest binary: its sha256, its length (little-endian) and magic.
const (
	magic      = "cellbox-guest/1\n"
	trailerLen = sha256.Size + 8 + 16 // 16: len(magic)
	maxGuest   = 256 << 20
)

// Attach appends the guest binary at guest to the executable at exe, replacing one
// attached before.
func Attach(exe, guest string) error {
	g, err := os.ReadFile(guest)
	if err != nil {
		return err
	}
	if len(g) == 0 || len(g) > maxGuest {
		return fmt.Errorf("guest binary %s: %d bytes", guest, len(g))
	}
	f, err := os.OpenFile(exe, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	off, _, _, ok, err := find(f)
	if err != nil {
		return err
	}
	if !ok {
		if off, err = f.Seek(0, io.SeekEnd); err != nil {
			return err
		}
	}
	if err := f.Truncate(off); err != nil {
		return err
	}
	sum := sha256.Sum256(g)
	t := make([]byte, 0, trailerLen)
	t = append(t, sum[:]...)
	t = binary.LittleEndian.AppendUint64(t, uint64(len(g)))
	t = append(t, magic...)
	if _, err := f.WriteAt(append(g, t...), off); err != nil {
		return err
	}
	return f.Close()
}

// find reads f's trailer: where the guest binary starts, its length and sum; ok false (and
// off the file's size) when f carries none.
func find(f *os.File) (off, n int64, sum [sha256.Size]byte, ok bool, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, 0, sum, false, err
	}
	size := st.Size()
	if size < trailerLen {
		return size, 0, sum, false, nil
	}
	t := make([]byte, trailerLen)
	if _, err := f.ReadAt(t, size-trailerLen); err != nil {
		return 0, 0, sum, false, err
	}
	if !bytes.Equal(t[trailerLen-len(magic):], []byte(magic)) {
		return size, 0, sum, false, nil
	}
	copy(sum[:], t)
	n = int64(binary.LittleEndian.Uint64(t[sha256.Size:]))
	if n <= 0 || n > maxGuest || n > size-trailerLen {
		return 0, 0, sum, false, fmt.Errorf("%s: the attached guest binary's trailer is damaged (length %d)", f.Name(), n)
	}
	return size - trailerLen - n, n, sum, true, nil
}

// Extract writes the guest binary that exe carries into dir, once per content (a file
// named by its sum, checked each time), and returns its path: "" when exe carries none.
func Extract(exe, dir string) (string, error) {
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	off, n, sum, ok, err := find(f)
	if err != nil || !ok {
		return "", err
	}
	path := filepath.Join(dir, Name(sum))
	// It runs as root, on the host and in every sandbox: only a folder and a file of this
	// process's user, that no one else may write, are used as they are.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := ownedSafe(dir, true); err != nil {
		return "", err
	}
	if have, err := fileSum(path); err == nil && have == sum {
		return path, nil
	}
	tmp, err := os.CreateTemp(dir, ".cellbox-guest-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), io.NewSectionReader(f, off, n)); err != nil {
		tmp.Close()
		return "", err
	}
	if got := h.Sum(nil); !bytes.Equal(got, sum[:]) {
		tmp.Close()
		return "", fmt.Errorf("%s: the attached guest binary does not match its sum", exe)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	// A sandbox may run the file at path: a new one is renamed over it, never written in place.
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}

// Name is the file name Extract gives the guest binary of sum.
func Name(sum [sha256.Size]byte) string { return "cellbox-guest-" + hex.EncodeToString(sum[:8]) }

// Find returns the guest binary of sum that Extract wrote into dir (the folder keeps each
// cellbox's by its sum, an upgraded one's beside the one before), or an error when dir has
// none: a checkpoint names the guest it was taken with by its sum, and a restore runs that
// one. The file must be this process's user's, writable by no one else, and of that sum.
func Find(dir string, sum [sha256.Size]byte) (string, error) {
	path := filepath.Join(dir, Name(sum))
	have, err := fileSum(path)
	if err != nil {
		return "", err
	}
	if have != sum {
		return "", fmt.Errorf("%s: not of the sum its name says", path)
	}
	return path, nil
}

// Sum is the SHA-256 of the file at path.
func Sum(path string) (sum [sha256.Size]byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// ownedSafe checks that path (not a symlink) is a folder (dir) or an executable file of
// this process's user that only that user may write.
func ownedSafe(path string, dir bool) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	return checkMode(path, st, dir)
}

func checkMode(path string, st os.FileInfo, dir bool) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case dir && !st.IsDir(), !dir && !st.Mode().IsRegular():
		return fmt.Errorf("%s: not a %s", path, map[bool]string{true: "folder", false: "regular file"}[dir])
	case !ok || int(sys.Uid) != os.Geteuid():
		return fmt.Errorf("%s: not owned by this process's user", path)
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s: writable by others (mode %v)", path, st.Mode().Perm())
	case !dir && st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s: not executable", path)
	}
	return nil
}

// fileSum is the sum of the file at path, which must pass checkMode (else an error: the
// caller writes it anew).
func fileSum(path string) (sum [sha256.Size]byte, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return sum, err
	}
	if err := checkMode(path, st, false); err != nil {
		return sum, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

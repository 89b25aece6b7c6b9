package workspace

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// A new workspace image is a copy of an empty ext4 file system the Store formatted itself,
// once per quota size: mkfs.ext4 per workspace cost ~6 ms of CPU and a process, and an empty
// file system of 1 GiB is 588 KiB of data in 8 runs (10 GiB: 4 MiB), the rest holes. The
// copies share their file system's UUID, which ext4 does not mind (it checks no UUID at
// mount, and checksums are seeded per file system).

// maxFormats bounds how many quota sizes keep their empty file system in memory.
const maxFormats = 4

// format is an empty ext4 file system of one size: its data runs, holes between them.
type format struct {
	size int64
	runs []dataRun
}

type dataRun struct {
	off  int64
	data []byte
}

// formats caches a format per quota size, the oldest dropped beyond maxFormats.
type formats struct {
	mu     sync.Mutex // held while one is made: a burst of the same size waits for one mkfs
	bySize map[int]*format
	order  []int
}

// get returns the empty file system of diskMB MiB, formatting it with make the first time.
func (fs *formats) get(diskMB int, make func() (*format, error)) (*format, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.bySize[diskMB]; f != nil {
		return f, nil
	}
	f, err := make()
	if err != nil {
		return nil, err
	}
	if fs.bySize == nil {
		fs.bySize = map[int]*format{}
	}
	if len(fs.order) == maxFormats {
		delete(fs.bySize, fs.order[0])
		fs.order = fs.order[1:]
	}
	fs.bySize[diskMB] = f
	fs.order = append(fs.order, diskMB)
	return f, nil
}

// makeFormat formats a temporary image of diskMB MiB in dir as a workspace's file system
// (see createLoop) and reads its data runs.
func (s *Store) makeFormat(ctx context.Context, diskMB int) (*format, error) {
	f, err := os.CreateTemp(s.dir, formatPrefix+"*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	size := int64(diskMB) << 20
	if err := f.Truncate(size); err != nil {
		return nil, err
	}
	// No journal and no root reserve: the whole quota is the user's. Lazy init and no
	// discard keep it fast; a new sparse file reads as zeros, so noinit_itable (at mount)
	// is safe and keeps the kernel from writing out every inode table onto the host's disk.
	owner := fmt.Sprintf("%d:%d", s.uid, s.gid)
	if err := run(ctx, s.mkfs, "-q", "-F", "-m", "0", "-O", "^has_journal",
		"-E", "root_owner="+owner+",lazy_itable_init=1,nodiscard", f.Name()); err != nil {
		return nil, err
	}
	runs, err := dataRuns(f, size)
	if err != nil {
		return nil, fmt.Errorf("read the formatted image: %w", err)
	}
	return &format{size: size, runs: runs}, nil
}

// write makes path a new sparse image holding the empty file system.
func (f *format) write(path string) error {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if err != nil {
		return err
	}
	err = out.Truncate(f.size)
	for _, r := range f.runs {
		if err != nil {
			break
		}
		_, err = out.WriteAt(r.data, r.off)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// formatPrefix starts the name of an image being formatted: not a workspace id, so
// Recover and Sweep pass it by; NewStore removes one a crash left.
const formatPrefix = ".format-"

// dataRuns reads the data of f (size bytes), skipping its holes.
func dataRuns(f *os.File, size int64) ([]dataRun, error) {
	var runs []dataRun
	for off := int64(0); off < size; {
		start, end, err := nextData(f, off)
		if err != nil {
			return nil, err
		}
		if start >= size {
			break
		}
		data := make([]byte, min(end, size)-start)
		if n, err := f.ReadAt(data, start); n != len(data) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		runs = append(runs, dataRun{off: start, data: data})
		off = end
	}
	return runs, nil
}

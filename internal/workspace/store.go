package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// DefaultDiskMB is a workspace's quota when Create is given 0.
const DefaultDiskMB = 1024

// maxIDLen caps a workspace id.
const maxIDLen = 64

const (
	imgSuffix    = ".img"      // <id>.img: the workspace's ext4 image (quota "loop")
	markerSuffix = ".released" // <id>.released: written on release; its mtime starts retention
	probeName    = ".probe"    // not a valid id, so never taken for a workspace
	probeMB      = 8
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// Dir holds the workspaces; created if missing. One Store per Dir at a time.
	Dir    string
	Logger *slog.Logger
	// UID and GID own a new workspace's root folder; 0 means 1000.
	UID, GID int
	// Quota is "auto" (or ""): loop images when they work here, else none; "loop": an ext4
	// image per workspace, loop-mounted (root and loop devices needed, else NewStore fails);
	// "none": plain folders, no disk quota.
	Quota string
}

// Store keeps workspaces on the host's disk, in Dir:
//
//	<id>/          the folder mounted at /mnt/data (with quotas: the image's mount point)
//	<id>.img       with quotas: a sparse ext4 image of the quota's size, loop-mounted on <id>/
//	<id>.released  the session ended at this file's mtime; Sweep counts retention from it
//
// The host never reads a workspace's contents: it only mounts, unmounts and deletes. Deleting
// goes through the image file, or os.RemoveAll on the host-owned <id>/ (which does not follow
// symlinks).
//
// An image is mounted by the Create that made it (a copy of an empty file system the Store
// formatted itself, see format.go), and again only by Remount, for a session that lives on
// after a reboot of the host unmounted it (a paused session). Its
// bytes were written only by the host kernel's ext4 driver, on behalf of the sandbox's file
// calls: the sandbox never sees the image or a block device. But an image with no journal
// that a crash or power cut left half written can hold anything, file data where metadata
// should be, and the kernel's ext4 driver is no parser of hostile input. So Remount first
// has e2fsck check the whole file system (-f: the superblock's "clean" is only a claim) in
// preen mode (-p: it fixes, unasked, only what a crash of a healthy file system leaves, such
// as wrong free counts, and refuses anything else), and mounts only what passed; never an
// image still attached to a loop device, whose file system may be live in a mount namespace
// that is not ours. e2fsck runs as root, as it does on every disk at boot: it reads bytes
// the kernel wrote, through a userspace parser made for damaged file systems.
//
// Create, Release, Remove and Sweep are safe to call concurrently.
type Store struct {
	dir      string
	log      *slog.Logger
	uid, gid int
	loop     bool
	mkfs     string // path of mkfs.ext4; with loop
	fsck     string // path of e2fsck; with loop
	formats  formats

	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	sync.Mutex
	refs int
}

// NewStore creates cfg.Dir and finds out whether disk quotas work here. What an earlier run
// left is the business of Recover, which the caller runs before it creates workspaces.
func NewStore(cfg StoreConfig) (*Store, error) {
	s := &Store{log: cfg.Logger, uid: cfg.UID, gid: cfg.GID, locks: map[string]*idLock{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.uid == 0 {
		s.uid = 1000
	}
	if s.gid == 0 {
		s.gid = 1000
	}
	quota := cfg.Quota
	switch quota {
	case "":
		quota = "auto"
	case "auto", "loop", "none":
	default:
		return nil, fmt.Errorf("workspace quota %q: want auto, loop or none: %w", cfg.Quota, errdefs.ErrInvalidArgument)
	}
	if cfg.Dir == "" {
		return nil, fmt.Errorf("workspace store: no folder given: %w", errdefs.ErrInvalidArgument)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("workspace folder: %w", err)
	}
	// 0711: the host user that owns a workspace (local backend) may pass, nobody may list.
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("create workspace folder: %w", err)
	}
	// Mount points are compared with /proc/self/mountinfo, which shows real paths.
	if s.dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, fmt.Errorf("workspace folder: %w", err)
	}
	if err := s.remove(probeName); err != nil {
		return nil, fmt.Errorf("remove an earlier quota probe: %w", err)
	}
	left, _ := filepath.Glob(filepath.Join(s.dir, formatPrefix+"*"))
	for _, p := range left {
		os.Remove(p) // an image a crash left half formatted
	}
	if quota != "none" {
		err := s.probe()
		switch {
		case err == nil:
			s.loop = true
			s.log.Info("workspace disk quotas on: an ext4 image per workspace", "dir", s.dir)
		case quota == "loop":
			return nil, fmt.Errorf("workspace quotas (loop): %w", err)
		default:
			s.log.Warn("workspace disk quotas off: workspaces are plain folders and can fill the host's disk",
				"dir", s.dir, "reason", err.Error())
		}
	} else {
		s.log.Info("workspace disk quotas off (quota none)", "dir", s.dir)
	}
	return s, nil
}

// Quotas reports whether workspace disk quotas are enforced.
func (s *Store) Quotas() bool { return s.loop }

// Create makes a new, empty workspace with a quota of diskMB MiB (0: DefaultDiskMB; ignored
// without quotas) and returns the host folder to mount at /mnt/data. The id must be new:
// [a-z0-9-], 1 to 64 characters, not used by a workspace still kept.
func (s *Store) Create(ctx context.Context, id string, diskMB int) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	if diskMB < 0 {
		return "", fmt.Errorf("workspace disk %d MiB: %w", diskMB, errdefs.ErrInvalidArgument)
	}
	if diskMB == 0 {
		diskMB = DefaultDiskMB
	}
	defer s.lock(id)()
	for _, p := range []string{s.path(id), s.path(id) + imgSuffix, s.path(id) + markerSuffix} {
		if _, err := os.Lstat(p); err == nil {
			return "", fmt.Errorf("workspace %s already exists: %w", id, errdefs.ErrFailedPrecondition)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("create workspace %s: %w", id, err)
		}
	}
	var err error
	if s.loop {
		err = s.createLoop(ctx, id, diskMB)
	} else {
		err = s.createFolder(id)
	}
	if err != nil {
		return "", fmt.Errorf("create workspace %s: %w", id, err)
	}
	return s.path(id), nil
}

// Release is called when the workspace's session has ended: it unmounts the workspace and
// starts its retention. The data stays on disk until Sweep or Remove. Releasing twice is fine.
func (s *Store) Release(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	defer s.lock(id)()
	if !s.exists(id) {
		return fmt.Errorf("workspace %s: %w", id, errdefs.ErrNotFound)
	}
	if err := s.unmount(s.path(id)); err != nil {
		return fmt.Errorf("release workspace %s: %w", id, err)
	}
	if err := s.mark(id); err != nil {
		return fmt.Errorf("release workspace %s: %w", id, err)
	}
	return nil
}

// Remove deletes a workspace now, mounted or not. Removing one that does not exist is fine.
func (s *Store) Remove(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	defer s.lock(id)()
	if err := s.remove(id); err != nil {
		return fmt.Errorf("remove workspace %s: %w", id, err)
	}
	return nil
}

// Sweep deletes the released workspaces whose release is at least retention ago and returns
// how many it deleted. Workspaces not released are never touched.
func (s *Store) Sweep(ctx context.Context, retention time.Duration) (int, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, fmt.Errorf("sweep workspaces: %w", err)
	}
	cutoff := time.Now().Add(-retention)
	n := 0
	var errs []error
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), markerSuffix)
		if !ok || checkID(id) != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return n, err
		}
		done, err := s.sweep(id, cutoff)
		if err != nil {
			errs = append(errs, fmt.Errorf("sweep workspace %s: %w", id, err))
		} else if done {
			n++
		}
	}
	return n, errors.Join(errs...)
}

func (s *Store) sweep(id string, cutoff time.Time) (bool, error) {
	defer s.lock(id)()
	fi, err := os.Lstat(s.path(id) + markerSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // removed meanwhile
	}
	if err != nil {
		return false, err
	}
	if fi.ModTime().After(cutoff) {
		return false, nil
	}
	return true, s.remove(id)
}

// checkID makes sure id is safe as one file name: [a-z0-9-]{1,64}, not starting with '-'.
func checkID(id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("workspace id must be 1 to %d characters: %w", maxIDLen, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' && i > 0) {
			return fmt.Errorf("workspace id %q: only a-z, 0-9 and '-' (not first) are allowed: %w", id, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func (s *Store) path(name string) string { return filepath.Join(s.dir, name) }

// lock takes id's lock and returns its unlock.
func (s *Store) lock(id string) func() {
	s.mu.Lock()
	l := s.locks[id]
	if l == nil {
		l = &idLock{}
		s.locks[id] = l
	}
	l.refs++
	s.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, id)
		}
		s.mu.Unlock()
	}
}

func (s *Store) exists(id string) bool {
	for _, p := range []string{s.path(id), s.path(id) + imgSuffix} {
		if _, err := os.Lstat(p); err == nil {
			return true
		}
	}
	return false
}

func (s *Store) createFolder(id string) error {
	dir := s.path(id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	// Mkdir applies the umask; the sandbox's user needs exactly this.
	err := os.Chmod(dir, 0o755)
	if err == nil && os.Geteuid() == 0 {
		err = os.Lchown(dir, s.uid, s.gid)
	}
	if err != nil {
		os.Remove(dir)
	}
	return err
}

// createLoop makes <name>.img (sparse, diskMB MiB) a copy of an empty ext4 file system
// whose root belongs to uid:gid (see format.go), and loop-mounts it on <name>/. On failure
// it undoes what it did.
func (s *Store) createLoop(ctx context.Context, name string, diskMB int) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	empty, err := s.formats.get(diskMB, func() (*format, error) { return s.makeFormat(ctx, diskMB) })
	if err != nil {
		return err
	}
	dir, img := s.path(name), s.path(name)+imgSuffix
	if err := empty.write(img); err != nil {
		if !errors.Is(err, fs.ErrExist) { // else not ours
			os.Remove(img)
		}
		return err
	}
	mounted := false
	defer func() {
		if err != nil {
			if mounted {
				if uerr := s.unmount(dir); uerr != nil {
					s.log.Warn("undo workspace mount", "dir", dir, "err", uerr)
					return // keep the files of a mount we could not undo
				}
			}
			os.Remove(dir)
			os.Remove(img)
		}
	}()
	if err = os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err = mountImage(img, dir); err != nil {
		return err
	}
	mounted = true
	// An empty workspace: no lost+found (e2fsck makes one again if it ever needs it).
	if err = os.Remove(filepath.Join(dir, "lost+found")); errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return err
}

// remove deletes everything of id; the caller holds id's lock.
func (s *Store) remove(id string) error {
	dir := s.path(id)
	if err := s.unmount(dir); err != nil {
		return err
	}
	// The folder is host-owned, not mounted (checked by unmount), and RemoveAll does not
	// follow symlinks inside it.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, p := range []string{dir + imgSuffix, dir + markerSuffix} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// mark records that id was released now, unless it already was.
func (s *Store) mark(id string) error {
	f, err := os.OpenFile(s.path(id)+markerSuffix, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// unmount unmounts everything mounted on dir (stacked mounts too), and fails if something
// stays mounted there. A missing dir is not mounted.
func (s *Store) unmount(dir string) error {
	for range 8 {
		mounted, err := isMountPoint(dir)
		if err != nil || !mounted {
			return err
		}
		if err := unmount(dir); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s stays mounted", filepath.Base(dir))
}

// probe checks that a loop-mounted ext4 image can be made and removed here.
func (s *Store) probe() error {
	if os.Geteuid() != 0 {
		return errors.New("loop mounts need root")
	}
	var err error
	if s.mkfs, err = lookTool("mkfs.ext4", "e2fsprogs"); err != nil {
		return err
	}
	if s.fsck, err = lookTool("e2fsck", "e2fsprogs"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.createLoop(ctx, probeName, probeMB); err != nil {
		return fmt.Errorf("test loop mount: %w", err)
	}
	return s.remove(probeName)
}

// Recover tidies what an earlier run left: workspaces still mounted are unmounted, and
// every workspace not yet marked released is marked released now (data kept, retention
// starts); except the workspaces keep names (keep may be nil), whose sessions live on.
func (s *Store) Recover(keep func(id string) bool) error {
	if keep == nil {
		keep = func(string) bool { return false }
	}
	mounts, err := mountPoints()
	if err != nil {
		return fmt.Errorf("recover workspaces: %w", err)
	}
	unmounted := 0
	for _, mp := range mounts {
		name := filepath.Base(mp)
		if filepath.Dir(mp) != s.dir || checkID(name) != nil || keep(name) {
			continue
		}
		unlock := s.lock(name)
		err := s.unmount(mp)
		unlock()
		if err != nil {
			return fmt.Errorf("recover workspace %s: unmount: %w", name, err)
		}
		unmounted++
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("recover workspaces: %w", err)
	}
	ids := map[string]bool{} // id → has a marker
	for _, e := range entries {
		name := e.Name()
		id, marked := strings.CutSuffix(name, markerSuffix)
		if !marked {
			id = strings.TrimSuffix(name, imgSuffix)
		}
		if checkID(id) == nil && !keep(id) {
			ids[id] = ids[id] || marked
		}
	}
	marked := 0
	for id, ok := range ids {
		if ok {
			continue
		}
		if err := s.mark(id); err != nil {
			return fmt.Errorf("recover workspace %s: %w", id, err)
		}
		marked++
	}
	if unmounted+marked > 0 {
		s.log.Info("recovered workspaces of an earlier run; data kept until retention ends",
			"unmounted", unmounted, "released", marked)
	}
	return nil
}

// Dir returns the host folder of workspace id (whether it exists or not).
func (s *Store) Dir(id string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	return s.path(id), nil
}

// Ready checks that workspace id can be used as it is: it exists, is not released, and
// with quotas is mounted.
func (s *Store) Ready(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	defer s.lock(id)()
	mounted, err := s.state(id)
	if err == nil && !mounted {
		err = fmt.Errorf("workspace %s is not mounted: %w", id, errdefs.ErrFailedPrecondition)
	}
	return err
}

// Remount is Ready for a workspace that lives on after a reboot of the host: with quotas,
// an image that is not mounted is checked and mounted again (see Store). An image that does
// not pass the check is refused (failed precondition) and left as it is; one still attached
// to a loop device, or that the kernel would not mount, is refused for now (unavailable).
func (s *Store) Remount(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	defer s.lock(id)()
	mounted, err := s.state(id)
	if err != nil || mounted {
		return err
	}
	dir, img := s.path(id), s.path(id)+imgSuffix
	attached, err := loopAttached(img)
	switch {
	case err != nil:
		return fmt.Errorf("workspace %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	case attached:
		return fmt.Errorf("workspace %s: its image is still attached to a loop device, so it may be mounted elsewhere: %w",
			id, errdefs.ErrUnavailable)
	}
	start := time.Now()
	out, err := exec.CommandContext(ctx, s.fsck, "-f", "-p", img).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("check workspace %s: %w", id, ctx.Err())
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		// Also when all it did was make a lost+found (removed again below).
		s.log.Info("e2fsck changed a workspace's file system before it is mounted again", "workspace", id, "e2fsck", tail(out))
	case err != nil:
		return fmt.Errorf("workspace %s: its file system did not pass e2fsck, so it is not mounted: %v: %s: %w",
			id, err, tail(out), errdefs.ErrFailedPrecondition)
	}
	if err := mountImage(img, dir); err != nil {
		return fmt.Errorf("mount workspace %s again: %w: %w", id, err, errdefs.ErrUnavailable)
	}
	// e2fsck makes the lost+found that Create removed: it goes again if it is that one
	// (root's and empty; the sandbox is stopped, so nothing changes it meanwhile).
	removeRootDir(filepath.Join(dir, "lost+found"))
	s.log.Info("workspace mounted again after its check", "workspace", id, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// state says whether id exists and is not released (else an error) and, with quotas,
// whether it is mounted (without, always). The caller holds id's lock.
func (s *Store) state(id string) (mounted bool, err error) {
	if !s.exists(id) {
		return false, fmt.Errorf("workspace %s: %w", id, errdefs.ErrNotFound)
	}
	if _, err := os.Lstat(s.path(id) + markerSuffix); err == nil {
		return false, fmt.Errorf("workspace %s was released: %w", id, errdefs.ErrFailedPrecondition)
	}
	if !s.loop {
		return true, nil
	}
	if mounted, err = isMountPoint(s.path(id)); err != nil {
		return false, fmt.Errorf("workspace %s: %w", id, err)
	}
	return mounted, nil
}

// run runs a tool and returns its output in the error when it fails.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(name), err, tail(out))
	}
	return nil
}

// tail is a tool's output for an error or a log: its last 500 bytes, trimmed.
func tail(out []byte) string {
	msg := strings.TrimSpace(string(out))
	if len(msg) > 500 {
		msg = "..." + msg[len(msg)-500:]
	}
	return msg
}

// lookTool finds a system tool in PATH or the sbin folders a service's PATH may lack.
func lookTool(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (install %s)", name, pkg)
}

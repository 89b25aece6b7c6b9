package image

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/statefile"
)

// DefaultMirror is the Debian archive images are built from when none is given.
const DefaultMirror = "http://deb.debian.org/debian"

// Store keeps the images built on this machine, under one folder (<state-dir>/images):
//
//	<name>/current            the hash of the image's latest build
//	<name>/<hash>/image.json  what was built (Image)
//	<name>/<hash>/list        the package list it was built from
//	<name>/<hash>/rootfs/     the root filesystem
//
// A new build of a name leaves the older ones in place (sandboxes may still run on them)
// until the image is removed.
type Store struct {
	dir    string
	mirror string
}

// NewStore returns the store in dir; mirror "" is DefaultMirror.
func NewStore(dir, mirror string) *Store {
	if mirror == "" {
		mirror = DefaultMirror
	}
	return &Store{dir: dir, mirror: mirror}
}

// Image is a built image.
type Image struct {
	Name      string    `json:"name"`
	Hash      string    `json:"hash"`
	Suite     string    `json:"suite"`
	Packages  int       `json:"packages"` // listed (Debian and pip)
	SizeBytes int64     `json:"size_bytes"`
	BuiltAt   time.Time `json:"built_at"`
	// MPLCache: matplotlib's font cache is built into the root at MPLCachePath.
	MPLCache bool   `json:"mpl_cache"`
	Root     string `json:"-"` // the root filesystem's folder
}

// Paths inside every image's root, for the backends.
const (
	// GuestPath is an empty file on which backends mount the guest binary.
	GuestPath = "/.cellbox/cellbox"
	// MPLCachePath holds matplotlib's font cache when Image.MPLCache.
	MPLCachePath = "/.cellbox/mpl-cache"
)

// Progress is a step of a build, for a person watching it.
type Progress struct {
	Stage string // resolve, download, unpack, configure, pip, finish
	Count int    // packages through this stage so far
	Name  string // the package just handled, if any
	Bytes int64  // downloaded so far (download stage)
}

// Mount points every image has, for the backends to mount on a read-only root.
var mountPoints = []string{"proc", "dev", "sys", "tmp", "mnt/data", "home/user", ".cellbox/run", ".cellbox/mpl-cache"} // and GuestPath, a file

// Get returns the latest build of the image name. A missing image is not found, with the
// command that builds it.
func (st *Store) Get(name string) (*Image, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	hash, err := os.ReadFile(filepath.Join(st.dir, name, "current"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			build := "cellbox image build " + name
			if name != DefaultName {
				build += " --file " + name + ".list"
			}
			return nil, fmt.Errorf("image %q is not built on this server: build it with `%s`: %w", name, build, errdefs.ErrNotFound)
		}
		return nil, err
	}
	return st.read(name, strings.TrimSpace(string(hash)))
}

// GetBuild returns the build hash (Image.Hash) of the image name, the latest or an older
// one still kept: what a checkpoint names (a sandbox's processes map the files of the build
// they ran on). Names come from checkpoints, which may come from another node: both are
// checked before they make a path. A build not here is not found.
func (st *Store) GetBuild(name, hash string) (*Image, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if !validHash(hash) {
		return nil, fmt.Errorf("image %q: build %.40q is not a build's hash: %w", name, hash, errdefs.ErrInvalidArgument)
	}
	im, err := st.read(name, hash)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("image %q has no build %s on this server: %w", name, hash, errdefs.ErrNotFound)
	}
	return im, err
}

// validHash: h is a hash Spec.Hash makes (16 lowercase hex digits).
func validHash(h string) bool {
	if len(h) != 16 {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (st *Store) read(name, hash string) (*Image, error) {
	dir := filepath.Join(st.dir, name, hash)
	data, err := os.ReadFile(filepath.Join(dir, "image.json"))
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	var im Image
	if err := json.Unmarshal(data, &im); err != nil {
		return nil, fmt.Errorf("image %s: image.json: %w", name, err)
	}
	im.Root = filepath.Join(dir, "rootfs")
	return &im, nil
}

// List returns the latest build of every image, by name.
func (st *Store) List() ([]Image, error) {
	entries, err := os.ReadDir(st.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, e := range entries {
		if !e.IsDir() || CheckName(e.Name()) != nil {
			continue
		}
		if im, err := st.Get(e.Name()); err == nil {
			out = append(out, *im)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Remove deletes every build of the image name.
func (st *Store) Remove(name string) error {
	if _, err := st.Get(name); err != nil {
		return err
	}
	dir := filepath.Join(st.dir, name)
	if err := unmountBelow(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// Build builds spec's image unless a build of the same list is there already (cached is
// then true). It needs root and debootstrap; progress (may be nil) sees its steps.
func (st *Store) Build(ctx context.Context, spec *Spec, progress func(Progress)) (im *Image, cached bool, err error) {
	if progress == nil {
		progress = func(Progress) {}
	}
	hash := spec.Hash()
	final := filepath.Join(st.dir, spec.Name, hash)
	if im, err := st.read(spec.Name, hash); err == nil {
		return im, true, st.setCurrent(spec.Name, hash)
	}
	if os.Geteuid() != 0 {
		return nil, false, fmt.Errorf("building an image needs root (debootstrap makes device files and chroots): %w", errdefs.ErrFailedPrecondition)
	}
	debootstrap, err := exec.LookPath("debootstrap")
	if err != nil {
		return nil, false, fmt.Errorf("building an image needs debootstrap (apt-get install debootstrap): %w", errdefs.ErrFailedPrecondition)
	}
	work := filepath.Join(st.dir, spec.Name, ".build-"+hash)
	if err := st.clean(work); err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, false, err
	}
	defer func() {
		if err != nil {
			st.clean(work)
		}
	}()
	root := filepath.Join(work, "rootfs")
	// Downloaded packages are kept for the next build (of this image or another): a list
	// changed by a line downloads that line's packages only. Checked against the archive's
	// checksums at each use.
	debs, err := filepath.Abs(filepath.Join(st.dir, debCache)) // debootstrap takes no relative one
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, false, err
	}
	// One build at a time downloads into it: debootstrap writes there in place, and another
	// build could read a file half written.
	unlock, err := lockDir(debs)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	progress(Progress{Stage: "resolve"})
	args := []string{"--variant=minbase", "--cache-dir=" + debs, "--include=" + strings.Join(spec.Debian, ","), spec.Suite, root, st.mirror}
	archives := filepath.Join(root, "var/cache/apt/archives")
	withBytes := func(p Progress) {
		if p.Stage == "download" {
			p.Bytes, _ = diskUsage(archives)
		}
		progress(p)
	}
	if err := run(ctx, exec.CommandContext(ctx, debootstrap, args...), withBytes); err != nil {
		// debootstrap's own log says which package failed; a common cause is a virtual
		// package, which --include does not resolve: list a real one that provides it.
		log, _ := os.ReadFile(filepath.Join(root, "debootstrap", "debootstrap.log"))
		return nil, false, fmt.Errorf("debootstrap %s from %s: %w\nthe end of debootstrap.log:\n%s\n(a package that depends on a virtual one needs a real provider listed too)",
			spec.Suite, st.mirror, err, lastLines(string(log), 15))
	}
	if len(spec.Pip) > 0 {
		progress(Progress{Stage: "pip"})
		cmd := exec.CommandContext(ctx, "chroot", append([]string{root, "python3", "-m", "pip", "install", "--no-cache-dir", "--break-system-packages", "--"}, spec.Pip...)...)
		if err := run(ctx, cmd, progress); err != nil {
			return nil, false, fmt.Errorf("pip install in image %s (it needs a reachable Python package index): %w", spec.Name, err)
		}
	}
	progress(Progress{Stage: "finish"})
	if err := unmountBelow(root); err != nil {
		return nil, false, err
	}
	if err := finish(root); err != nil {
		return nil, false, err
	}
	mplCache, err := buildFontCache(ctx, root)
	if err != nil {
		return nil, false, err
	}
	size, err := diskUsage(root)
	if err != nil {
		return nil, false, err
	}
	im = &Image{Name: spec.Name, Hash: hash, Suite: spec.Suite, Packages: len(spec.Debian) + len(spec.Pip), SizeBytes: size, BuiltAt: time.Now().UTC(), MPLCache: mplCache}
	data, _ := json.MarshalIndent(im, "", " ")
	if err := statefile.Write(filepath.Join(work, "image.json"), data, 0o644); err != nil {
		return nil, false, err
	}
	if err := statefile.Write(filepath.Join(work, "list"), []byte(spec.Text()), 0o644); err != nil {
		return nil, false, err
	}
	if err := os.Rename(work, final); err != nil {
		return nil, false, err
	}
	if err := st.setCurrent(spec.Name, hash); err != nil {
		return nil, false, err
	}
	im.Root = filepath.Join(final, "rootfs")
	return im, false, nil
}

// debCache is the store's folder of downloaded packages (not an image name: names start
// with a letter or digit).
const debCache = ".debs"

func (st *Store) setCurrent(name, hash string) error {
	return statefile.Write(filepath.Join(st.dir, name, "current"), []byte(hash+"\n"), 0o644)
}

// clean removes a build's folder, unmounting what a stopped debootstrap left mounted in it
// first (so that removing it cannot reach into /proc or /sys).
func (st *Store) clean(dir string) error {
	if err := unmountBelow(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// finish makes the root ready to be mounted read-only: the mount points the backends use,
// no package caches.
func finish(root string) error {
	for _, d := range mountPoints {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), os.ModeSticky|0o777); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, GuestPath), nil, 0o755); err != nil {
		return err
	}
	// The backends mount their own /etc/hosts, passwd and group on these. The build
	// machine's resolver and name (debootstrap copies them) are no business of a sandbox.
	for _, f := range []string{"etc/hosts", "etc/passwd", "etc/group"} {
		if err := touch(filepath.Join(root, f)); err != nil {
			return err
		}
	}
	for _, f := range []string{"etc/resolv.conf", "etc/hostname"} {
		if err := os.Remove(filepath.Join(root, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	for _, glob := range []string{"var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_Packages", "var/lib/apt/lists/*_Release*"} {
		files, _ := filepath.Glob(filepath.Join(root, glob))
		for _, f := range files {
			os.Remove(f)
		}
	}
	return nil
}

// buildFontCache builds matplotlib's font cache into the root at MPLCachePath, when the
// image has matplotlib: without it every new kernel spends a second building it. It
// reports whether it did.
func buildFontCache(ctx context.Context, root string) (bool, error) {
	if _, err := os.Stat(filepath.Join(root, "usr/lib/python3/dist-packages/matplotlib")); err != nil {
		return false, nil
	}
	cmd := exec.CommandContext(ctx, "chroot", root, "/usr/bin/python3", "-c", "import matplotlib.font_manager")
	cmd.Env = []string{"MPLCONFIGDIR=" + MPLCachePath, "HOME=/tmp", "LC_ALL=C.UTF-8", "PATH=/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Errorf("build matplotlib's font cache in the image: %w: %s", err, lastLines(string(out), 15))
	}
	// Read by the sandbox's user.
	return true, filepath.WalkDir(filepath.Join(root, MPLCachePath), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	})
}

// lastLines is the last n lines of text.
func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// touch creates an empty file if nothing is there.
func touch(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// run runs a build command, turning its output into progress; the error carries the end of
// its output.
func run(ctx context.Context, cmd *exec.Cmd, progress func(Progress)) error {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	if err := cmd.Start(); err != nil {
		return err
	}
	var tail []string
	counts := map[string]int{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if tail = append(tail, line); len(tail) > 20 {
			tail = tail[1:]
		}
		if stage, pkg, ok := debootstrapStep(line); ok {
			counts[stage]++
			progress(Progress{Stage: stage, Count: counts[stage], Name: pkg})
		}
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s", err, strings.Join(tail, "\n"))
	}
	return nil
}

// debootstrapStep reads one of debootstrap's "I: Retrieving pkg 1.0" lines.
func debootstrapStep(line string) (stage, pkg string, ok bool) {
	for prefix, stage := range map[string]string{"I: Retrieving ": "download", "I: Unpacking ": "unpack", "I: Configuring ": "configure"} {
		if rest, found := strings.CutPrefix(line, prefix); found {
			name, _, _ := strings.Cut(rest, " ")
			name, _, _ = strings.Cut(strings.TrimSuffix(name, "..."), ":") // libc6:amd64
			switch name {
			case "", "the", "required", "base", "InRelease", "Release", "Packages":
				return "", "", false // not a package: "the base system", the archive's indexes
			}
			return stage, name, true
		}
	}
	return "", "", false
}

// diskUsage is the bytes the files under root take (not following links or mounts).
func diskUsage(root string) (int64, error) {
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}

// Text is the list in its canonical form (what the image was built from).
func (s *Spec) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# cellbox image %s\nsuite %s\n", s.Name, s.Suite)
	for _, p := range s.Debian {
		fmt.Fprintf(&b, "debian %s\n", p)
	}
	for _, p := range s.Pip {
		fmt.Fprintf(&b, "pip %s\n", p)
	}
	return b.String()
}

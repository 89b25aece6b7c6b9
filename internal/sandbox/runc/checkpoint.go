package runc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestbin"
	"github.com/cellbox/cellbox/internal/sandbox"
)

// Checkpoints: under gVisor with runsc's own checkpoint and restore; under runc with CRIU
// (runc checkpoint and restore, CRIU 4 or later). A checkpoint folder holds the runtime's
// images in images/ and checkpointMeta in cellbox.json.
//
// What a sandbox needs to be checkpointed (ARCHITECTURE.md, "Checkpoints"):
//   - no host file or socket open inside: the guest logs to a file of its run folder
//     (--log), and closes its listener and connection first (guestproto's Checkpoint); it
//     listens again on SIGUSR1, which the backend sends after a restore (or after a
//     checkpoint that left the sandbox running);
//   - under runc, kernels started in the sandbox (a kernel forked from a template maps
//     the template's files, from a mount outside the sandbox, which CRIU cannot find), and
//     a user namespace of the sandbox's own: CRIU reads every process's resource limits,
//     which takes CAP_SYS_RESOURCE over them, and root may lack it on the host (in a
//     container it often does); over a user namespace that root owns, it has it.

// checkpointTimeout bounds a checkpoint or a restore: the runtime writes or reads the
// sandbox's memory.
const checkpointTimeout = 2 * time.Minute

const (
	checkpointMeta   = "cellbox.json"
	checkpointImages = "images"
	criuWork         = "criu-work" // CRIU's logs of a restore, in the bundle
	criuRestoreConf  = "criu-restore.conf"
	// restoreRoot is the mount point, in the bundle, of a CRIU restore's own root.
	restoreRoot = "rootfs"
	// rootfsAnnotation, in a restored sandbox's spec, names the root filesystem its
	// processes run on (the spec's root is restoreRoot's, undone after the restore).
	rootfsAnnotation = "org.cellbox.rootfs"
)

// criuRestoreOptions is CRIU's configuration for a restore: its older way of restoring mount
// namespaces. The newer one (mount-v2, CRIU 3.17's default) fails to mount a sandbox's
// root when it is restored under another id than it was checkpointed as (a fork, or a
// session resumed when its old cgroup is gone): "mnt-v2: Unable to mount
// /tmp/.criu.mntns.X/mnt-N", N the root mount.
const criuRestoreOptions = "mntns-compat-mode\n"

// meta is what the backend keeps in a checkpoint beside the runtime's images. It names
// what the sandbox ran, never a host path: a checkpoint may come from another node (a
// move), and whoever wrote it would choose the root filesystem and the guest binary the
// restored sandbox runs. The restoring backend resolves the names to its own files, and
// refuses a checkpoint that names what it does not have.
type meta struct {
	// Kind is Capabilities.Checkpoint of the backend that wrote it.
	Kind string `json:"kind"`
	// Image and Build name the root filesystem the sandbox ran on (a restored process maps
	// its files, so it must be that build): an image and its build (image.Image.Hash);
	// "" the backend's own root.
	Image string `json:"image,omitempty"`
	Build string `json:"build,omitempty"`
	// Token is the guest's attach token, which the guest keeps in memory.
	Token string `json:"token"`
	// GuestSum is the SHA-256 (hex) of the guest binary the sandbox ran: its processes map
	// it, and CRIU refuses another ("Can't open vma"), which a server upgraded meanwhile
	// runs. The restore takes it from the backend's own (Config.GuestBinary, Config.Guests).
	GuestSum string `json:"guest_sha256,omitempty"`

	// Host paths, as checkpoints of before wrote them: read to find the names above (only
	// a path of the backend's own resolves), never written.
	LegacyRootfs string `json:"rootfs,omitempty"`
	LegacyGuest  string `json:"guest,omitempty"`
}

// guestOf is the host path of the guest binary spec binds into the sandbox; "" if none.
func guestOf(spec *specs.Spec) string {
	for _, mt := range spec.Mounts {
		if mt.Destination == guestPath {
			return mt.Source
		}
	}
	return ""
}

// rootName names the root filesystem at path, one of this backend's own: "" (its own
// root) or an image and its build. ok is false for a path that is none of them.
func (b *Backend) rootName(path string) (img, build string, ok bool) {
	if path == b.rootfs {
		return "", "", true
	}
	// An image's build: <images>/<name>/<hash>/rootfs, as the store keeps it.
	if b.images == nil || filepath.Base(path) != "rootfs" {
		return "", "", false
	}
	build = filepath.Base(filepath.Dir(path))
	img = filepath.Base(filepath.Dir(filepath.Dir(path)))
	im, err := b.images.GetBuild(img, build)
	if err != nil || im.Root != path {
		return "", "", false
	}
	return img, build, true
}

// rootOf is the host path of the root filesystem m names, or why it has none: the image
// must be the one the restore is asked for, and its build still kept here.
func (b *Backend) rootOf(m meta, want string) (string, error) {
	img, build := m.Image, m.Build
	if m.LegacyRootfs != "" && img == "" && build == "" {
		var ok bool
		if img, build, ok = b.rootName(m.LegacyRootfs); !ok {
			return "", errors.New("the checkpoint names a root filesystem that is none of this server's")
		}
	}
	switch {
	case img != want:
		return "", fmt.Errorf("the checkpoint ran on image %.64q, not %.64q", img, want)
	case img == "" && build != "":
		return "", errors.New("the checkpoint names a build of no image")
	case img == "":
		return b.rootfs, nil
	case b.images == nil:
		return "", errors.New("the checkpoint ran on an image, and this server runs sandboxes on the host's root filesystem")
	}
	im, err := b.images.GetBuild(img, build)
	if err != nil {
		return "", fmt.Errorf("the image build it was checkpointed on is not on this server: %w", err)
	}
	return im.Root, nil
}

// guestSumOf is the sum of the guest binary at path, which a sandbox of this backend runs.
func (b *Backend) guestSumOf(path string) (string, error) {
	sum, err := b.guestSum()
	if path != b.guest {
		sum, err = guestbin.Sum(path)
	}
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum[:]), nil
}

// guestFor is the host path of the guest binary m names: this backend's own, or one of
// Config.Guests of that sum; else why there is none.
func (b *Backend) guestFor(m meta) (string, error) {
	if m.GuestSum == "" {
		// Checkpoints of before: the server's own (none named), or a path of the guests'
		// folder (its content is checked below, as any of that folder's).
		switch {
		case m.LegacyGuest == "" || m.LegacyGuest == b.guest:
			return b.guest, nil
		case b.guests == "" || filepath.Dir(m.LegacyGuest) != filepath.Clean(b.guests):
			return "", errors.New("the checkpoint names a guest binary that is none of this server's")
		}
		sum, err := guestbin.Sum(m.LegacyGuest)
		if err != nil {
			return "", errors.New("the guest binary the checkpoint was taken with is gone")
		}
		m.GuestSum = hex.EncodeToString(sum[:])
	}
	var want [sha256.Size]byte
	if n, err := hex.Decode(want[:], []byte(m.GuestSum)); err != nil || n != len(want) || len(m.GuestSum) != 2*len(want) {
		return "", errors.New("the checkpoint's guest sum is not a SHA-256")
	}
	if own, err := b.guestSum(); err == nil && own == want {
		return b.guest, nil
	}
	if b.guests != "" {
		if p, err := guestbin.Find(b.guests, want); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("this server has no guest binary of sum %s…, which the checkpoint was taken with (a server of another cellbox version)", m.GuestSum[:12])
}

// criuMin is the oldest CRIU that checkpoints these sandboxes: 3.x fails on kernels of
// 2024 and later (their vDSO layout), 4.1 on a TCP socket of a 6.x kernel
// (getsockopt SO_PASSCRED); 4.2 works.
var criuMin = [2]int{4, 2}

var criuVersion = regexp.MustCompile(`(?m)^Version: (\d+)\.(\d+)`)

// findCRIU returns the path of a CRIU binary recent enough (path, or criu in PATH when
// path is ""), or why there is none.
func findCRIU(path string) (string, string) {
	name := path
	if name == "" {
		name = "criu"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", "CRIU is not installed: run scripts/criu.sh (make deps does), which builds CRIU " +
			strconv.Itoa(criuMin[0]) + "." + strconv.Itoa(criuMin[1]) + " from Debian's source"
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "--version").Output()
	m := criuVersion.FindSubmatch(out)
	if err != nil || m == nil {
		return "", fmt.Sprintf("%s --version does not say its version: %v", p, err)
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	if major < criuMin[0] || major == criuMin[0] && minor < criuMin[1] {
		return "", fmt.Sprintf("%s is CRIU %d.%d, older than %d.%d, which checkpoints fail with on recent kernels: run scripts/criu.sh (make deps does)",
			p, major, minor, criuMin[0], criuMin[1])
	}
	return p, ""
}

// checkpointKind is Capabilities.Checkpoint, and why it is "".
func (b *Backend) checkpointKind() (kind, missing string) {
	switch {
	case b.gvisor:
		return "gvisor", ""
	case filepath.Base(b.runtime) != "runc":
		return "", filepath.Base(b.runtime) + " sandboxes are not checkpointed: use runc (with CRIU) or runsc"
	case b.criu == "":
		return "", b.criuMissing
	}
	return "criu", ""
}

// Checkpoint writes the sandbox into dir (see sandbox.Checkpointer). The guest must have
// been readied (it no longer listens). A sandbox to keep is frozen first (the runtime's
// pause: the cgroup freezer under runc, the sentry's own under gVisor), and the runtime
// leaves a frozen sandbox frozen after its checkpoint. On failure it runs on: thawed, its
// guest told to listen again.
func (s *Sandbox) Checkpoint(ctx context.Context, dir string, keep bool) error {
	kind, missing := s.b.checkpointKind()
	if kind == "" {
		return fmt.Errorf("checkpoint sandbox %s: %s: %w", s.id, missing, errors.ErrUnsupported)
	}
	spec, err := s.readSpec()
	if err != nil {
		return fmt.Errorf("checkpoint sandbox %s: %w", s.id, err)
	}
	if kind == "criu" && !hasUserns(spec) {
		return fmt.Errorf("checkpoint sandbox %s: it was not made checkpointable (its kernel may be a template's): %w", s.id, errors.ErrUnsupported)
	}
	images := filepath.Join(dir, checkpointImages)
	if err := os.MkdirAll(images, 0o700); err != nil {
		return fmt.Errorf("checkpoint sandbox %s: %w", s.id, err)
	}
	img, build, ok := s.b.rootName(rootfsOf(spec))
	if !ok {
		return fmt.Errorf("checkpoint sandbox %s: it runs on a root filesystem this server does not name (an image build removed since?): %w", s.id, errdefs.ErrFailedPrecondition)
	}
	guestSum, err := s.b.guestSumOf(guestOf(spec))
	if err != nil {
		return fmt.Errorf("checkpoint sandbox %s: the guest binary it runs: %v: %w", s.id, err, errdefs.ErrFailedPrecondition)
	}
	m, err := json.Marshal(meta{Kind: kind, Image: img, Build: build, GuestSum: guestSum, Token: s.token})
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, checkpointMeta), m, 0o600)
	}
	if err != nil {
		return fmt.Errorf("checkpoint sandbox %s: %w", s.id, err)
	}
	args := []string{"checkpoint", "--image-path", images}
	if kind == "criu" {
		// A restored sandbox's spec names the restore's CRIU configuration, which CRIU
		// reads on a checkpoint too, and refuses there: empty it.
		if err := os.WriteFile(filepath.Join(s.bundle, criuRestoreConf), nil, 0o600); err != nil {
			return fmt.Errorf("checkpoint sandbox %s: %w", s.id, err)
		}
		// CRIU's log goes with the images: it is what explains a failed restore too.
		args = append(args, "--work-path", images, "--tcp-established", "--file-locks")
	}
	// runs on: what makes the sandbox go on after a failure.
	runsOn := s.Abandon
	if keep {
		if _, err := s.b.command(ctx, "pause", s.id); err != nil {
			return errors.Join(fmt.Errorf("checkpoint sandbox %s: freeze it: %w", s.id, err), s.Abandon(ctx))
		}
		runsOn = s.Thaw
		args = append(args, "--leave-running")
	}
	if _, err := s.b.commandFor(ctx, checkpointTimeout, append(args, s.id)...); err != nil {
		err = fmt.Errorf("checkpoint sandbox %s: %w%s", s.id, err, criuLogTail(kind, filepath.Join(images, "dump.log")))
		return errors.Join(err, runsOn(ctx))
	}
	// The guest's log is open in the sandbox: a restore needs the file where it was, as it
	// was when the processes were dumped (read now, before the guest may write more). The
	// sandbox's root could have put anything there: read as readRunFile reads, and no more
	// than the guest ever writes (it caps its log).
	if err := keepGuestLog(filepath.Join(s.bundle, runDir), filepath.Join(dir, sandbox.GuestLog)); err != nil {
		err = fmt.Errorf("checkpoint sandbox %s: keep the guest's log: %v: %w", s.id, err, errdefs.ErrFailedPrecondition)
		if keep {
			return errors.Join(err, runsOn(ctx))
		}
		return errors.Join(err, s.Stop(ctx))
	}
	if !keep {
		return s.Stop(ctx)
	}
	return nil
}

// Thaw lets a sandbox that Checkpoint kept go on (see sandbox.Checkpointer).
func (s *Sandbox) Thaw(ctx context.Context) error {
	if _, err := s.b.command(ctx, "resume", s.id); err != nil {
		return fmt.Errorf("thaw sandbox %s: %w", s.id, err)
	}
	return s.Abandon(ctx)
}

// Abandon tells a guest readied for a checkpoint that none comes (see sandbox.Checkpointer).
func (s *Sandbox) Abandon(ctx context.Context) error {
	if err := s.relisten(ctx); err != nil {
		return err
	}
	return s.connect(ctx, "abandon a checkpoint of")
}

// relisten tells the guest to listen again (SIGUSR1 to process 1).
func (s *Sandbox) relisten(ctx context.Context) error {
	_, err := s.b.command(ctx, "kill", s.id, "USR1")
	return err
}

// readSpec reads the sandbox's OCI spec from its bundle.
func (s *Sandbox) readSpec() (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(s.bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil || spec.Root == nil || spec.Linux == nil {
		return nil, fmt.Errorf("the bundle's config.json does not parse: %v", err)
	}
	return &spec, nil
}

// rootfsOf is the root filesystem sandbox spec's processes run on: a restored one's spec
// names its restore's own root (undone since), and the shared one in an annotation.
func rootfsOf(spec *specs.Spec) string {
	if r := spec.Annotations[rootfsAnnotation]; r != "" {
		return r
	}
	return spec.Root.Path
}

func hasUserns(spec *specs.Spec) bool {
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.UserNamespace {
			return true
		}
	}
	return false
}

// Restore starts sandbox spec.ID from the checkpoint in dir (see sandbox.Restorer).
func (b *Backend) Restore(ctx context.Context, spec sandbox.Spec, dir string) (sandbox.Sandbox, error) {
	kind, missing := b.checkpointKind()
	if kind == "" {
		return nil, fmt.Errorf("restore sandbox %s: %s: %w", spec.ID, missing, errors.ErrUnsupported)
	}
	data, err := os.ReadFile(filepath.Join(dir, checkpointMeta))
	if err != nil {
		return nil, fmt.Errorf("restore sandbox %s: the checkpoint is missing or unreadable: %w", spec.ID, errdefs.ErrFailedPrecondition)
	}
	var m meta
	if err := json.Unmarshal(data, &m); err != nil || m.Token == "" {
		return nil, fmt.Errorf("restore sandbox %s: the checkpoint's %s is damaged: %w", spec.ID, checkpointMeta, errdefs.ErrFailedPrecondition)
	}
	if m.Kind != kind {
		return nil, fmt.Errorf("restore sandbox %s: the checkpoint was taken with %.20q, and this server checkpoints with %s: %w", spec.ID, m.Kind, kind, errdefs.ErrFailedPrecondition)
	}
	// What it ran, by name, resolved to this server's own files: the build the processes
	// map files of (which may not be the image's newest) and the guest binary (an upgraded
	// server's would not restore).
	rootfs, err := b.rootOf(m, spec.Image)
	if err != nil {
		return nil, fmt.Errorf("restore sandbox %s: %v: %w", spec.ID, err, errdefs.ErrFailedPrecondition)
	}
	guest, err := b.guestFor(m)
	if err != nil {
		return nil, fmt.Errorf("restore sandbox %s: %v: %w", spec.ID, err, errdefs.ErrFailedPrecondition)
	}
	spec.Checkpointable = true
	s, in, err := b.prepare(spec)
	if err != nil {
		return nil, err
	}
	in.rootfs, in.guest = rootfs, guest
	if !b.live.Add(spec.ID, s) {
		return nil, fmt.Errorf("sandbox %s exists already: %w", spec.ID, errdefs.ErrFailedPrecondition)
	}
	if err := s.restore(ctx, kind, buildSpec(in), filepath.Join(dir, checkpointImages), m.Token); err != nil {
		s.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// restore writes the bundle with the guest's token, restores the container from images
// and connects to the guest, told to listen again.
func (s *Sandbox) restore(ctx context.Context, kind string, spec *specs.Spec, images, token string) error {
	if kind == "criu" {
		if spec.Annotations == nil {
			spec.Annotations = map[string]string{}
		}
		// runc hands CRIU the file this annotation names as its configuration.
		spec.Annotations["org.criu.config"] = filepath.Join(s.bundle, criuRestoreConf)
		// runc restore mounts the spec's bind mounts on the root, in the host's mount
		// namespace, for CRIU, and unmounts them after: on the shared root two restores at
		// once would undo each other's ("mount /usr:/usr (via /proc/self/fd/9): no such
		// file or directory"). So each restore has a root of its own, a bind of the shared
		// one, undone once the sandbox runs (its mount namespace keeps its own copy).
		spec.Annotations[rootfsAnnotation] = spec.Root.Path
		spec.Root.Path = filepath.Join(s.bundle, restoreRoot)
	}
	if err := s.writeBundle(spec, token); err != nil {
		return fmt.Errorf("restore sandbox %s: %w", s.id, err)
	}
	if kind == "criu" {
		if err := bindRoot(spec.Annotations[rootfsAnnotation], spec.Root.Path); err != nil {
			return fmt.Errorf("restore sandbox %s: a root of its own: %w", s.id, err)
		}
		defer func() {
			if err := unbindRoot(spec.Root.Path); err != nil {
				s.logger().Warn("unmount a restore's root", "err", err)
			}
		}()
	}
	if _, err := os.Stat(images); err != nil {
		return fmt.Errorf("restore sandbox %s: the checkpoint has no images: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	if err := copyFile(filepath.Join(filepath.Dir(images), sandbox.GuestLog), filepath.Join(s.bundle, runDir, sandbox.GuestLog), maxGuestLog); err != nil {
		return fmt.Errorf("restore sandbox %s: the checkpoint's guest log: %v: %w", s.id, err, errdefs.ErrFailedPrecondition)
	}
	args := []string{"restore", "--detach", "--image-path", images, "--bundle", s.bundle, "--pid-file", s.pidFile()}
	work := filepath.Join(s.bundle, criuWork)
	if kind == "criu" {
		if err := os.WriteFile(filepath.Join(s.bundle, criuRestoreConf), []byte(criuRestoreOptions), 0o600); err != nil {
			return fmt.Errorf("restore sandbox %s: %w", s.id, err)
		}
		if err := os.Mkdir(work, 0o700); err != nil {
			return fmt.Errorf("restore sandbox %s: %w", s.id, err)
		}
		args = append(args, "--work-path", work, "--tcp-established", "--file-locks")
	}
	rctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	if err := s.launch(rctx, "restore", append(args, s.id)...); err != nil {
		// The runtime failed to read back what it wrote: the checkpoint will not restore.
		return fmt.Errorf("%v%s: %w", err, criuLogTail(kind, filepath.Join(work, "restore.log")), errdefs.ErrFailedPrecondition)
	}
	if err := s.relisten(ctx); err != nil {
		return fmt.Errorf("restore sandbox %s: %w", s.id, err)
	}
	return s.connect(ctx, "restore")
}

// criuLogTail is the errors in a CRIU log, to append to an error message ("" for gVisor,
// whose runtime says what failed itself).
func criuLogTail(kind, path string) string {
	if kind != "criu" {
		return ""
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var errs [][]byte
	for _, line := range bytes.Split(data, []byte("\n")) {
		// CRIU cannot raise its own RLIMIT_NOFILE without CAP_SYS_RESOURCE; that is no failure.
		if bytes.Contains(line, []byte("Error (")) && !bytes.Contains(line, []byte("for self")) {
			errs = append(errs, bytes.TrimSpace(line))
		}
	}
	if len(errs) > 3 {
		errs = errs[len(errs)-3:]
	}
	if len(errs) == 0 {
		return ""
	}
	return " (CRIU: " + string(bytes.Join(errs, []byte("; "))) + ")"
}

// maxGuestLog bounds the guest's log a checkpoint keeps: the guest caps what it writes
// (guest.maxLog, 1 MiB) and a Go runtime's crash adds some.
const maxGuestLog = 4 << 20

// keepGuestLog copies the guest's log from the run folder runDir (which the sandbox writes)
// to dst.
func keepGuestLog(runDir, dst string) error {
	data, err := readRunFile(runDir, sandbox.GuestLog, maxGuestLog)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o600)
}

// copyFile copies the regular file src (a checkpoint's, written by the backend) to dst, a
// new file (never through a link), at most max bytes.
func copyFile(src, dst string, max int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) { // a link is removed, not followed
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.LimitReader(in, max)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

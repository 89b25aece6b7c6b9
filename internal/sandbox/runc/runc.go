// Package runc is the sandbox backend that runs each sandbox as an OCI container with runc,
// or with crun or gVisor's runsc, which take the same command line.
//
// For each sandbox it writes an OCI runtime spec into a bundle folder and runs
// `runc run --detach`: the sandbox outlives the server process. The guest listens on a
// Unix socket in the bundle that only root can reach, and each connection opens with the
// attach handshake and the sandbox's token (see Sandbox), so a restarted server attaches
// again (Attach). The server is a child subreaper, and reaps the guests it starts.
//
// The root filesystem is read-only and shared by every sandbox on it. In host mode it is a
// skeleton in which the host's /usr (and what Python needs from /etc) is bind-mounted
// read-only. A Spec that names an image (Config.Images) runs on that image's root instead
// (package image), with nothing of the host's but the backend's own /etc/passwd, group and
// hosts bound over the image's, and the image's own matplotlib font cache. Either way the
// workspace appears at /mnt/data.
//
// The spec keeps the guest five capabilities and user code none (see sandbox.GuestCapabilities), sets
// no_new_privs and a seccomp allow-list (installed by the guest on itself, first thing,
// except under gVisor, whose sentry installs the spec's), gives the sandbox its own pid, network (loopback
// only), ipc, uts, mount and cgroup namespaces, and limits memory, processes and CPU with
// cgroups (v1 or v2).
//
// Cgroups: each sandbox's cgroup path is cellbox/<id> with the cgroupfs driver. runc puts a
// relative path under its own cgroup's parent on v2 (under its own cgroup on v1); crun puts
// it under the hierarchy's root. On v2 the runtime enables the controllers in every parent
// along the path; that fails where a parent holds processes of its own (typically the
// server as the only process of a container's cgroup namespace): run the server in a child
// cgroup then, as one does for Docker in Docker.
//
// gVisor (runsc; apt-get install runsc on Debian): user code runs on gVisor's sentry, a
// kernel in user space, instead of on the host's. The backend tells runsc --network=none,
// --oci-seccomp and --in-sandbox-cgroup=v2 (argv); the spec has no mqueue mount, and its
// cgroup mount is the sentry's own cgroup2 hierarchy (so the guest has no OOM count from
// it), where the guest keeps user code's process limit (sandbox.GuestCommand.Pids); the
// host's pids cgroup gets room for the sentry's threads (sandbox.GVisorHostTasks).
// Capabilities says what else differs.
//
// Not for: what runs inside (package guest) or the workspace folders (package workspace).
package runc

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestbin"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/seccomp"
)

// Config configures the backend.
type Config struct {
	// Runtime is the OCI runtime binary, a name looked up in PATH or a path: runc (the
	// default), crun or runsc.
	Runtime string
	// StateDir is a host folder the backend owns: the runtime's state (--root), one bundle
	// folder per sandbox and the skeleton root filesystem.
	StateDir string
	// GuestBinary is the host path of the cellbox binary that runs as the guest; default
	// the running executable.
	GuestBinary string
	// Guests is the folder of the guest binaries of earlier cellbox versions, each by its
	// sum (guestbin.Extract's): a checkpoint names the guest it was taken with by its sum,
	// and restores with it from there. "": only GuestBinary's checkpoints restore.
	Guests string
	// MPLCache is an optional host folder holding a prebuilt matplotlib font cache, mounted
	// read-only and passed to the guest as --mpl-cache.
	MPLCache string
	// UID and GID user code runs as; 0 means the default, 1000:1000. Never root. The guest
	// runs as root inside the sandbox, holding only the capabilities of sandbox.GuestCapabilities.
	UID, GID int
	// Images finds the images a Spec may name (*image.Store is one); nil: every sandbox
	// runs on the host's root filesystem, and a Spec that names an image is refused.
	Images Images
	// Kernels, when set, has kernels forked from a template process per root filesystem
	// (package template): Python and the pre-imports, as the guest is configured. Not
	// under gVisor, whose sandboxes have a kernel of their own; there, and when a template
	// cannot help, the guest starts each kernel afresh.
	Kernels *Kernels
	// CgroupParent is the cgroup each sandbox's cgroup is made in (runc's cgroupsPath is
	// CgroupParent/ID). Relative (the default, "cellbox"): under the server's own cgroup.
	// Absolute: from the cgroup root, outside the server's: in a container, the sandboxes
	// then outlive it (a container runtime kills everything in a stopped container's cgroup).
	CgroupParent string
	// GVisorPlatform is the platform runsc runs sandboxes on (PlatformAuto, the default:
	// kvm where it works, else systrap); only under gVisor.
	GVisorPlatform string
	// CRIU is the CRIU binary runc checkpoints sandboxes with (a name looked up in PATH or a
	// path; "": criu in PATH). Without a CRIU recent enough, runc sandboxes are not
	// checkpointed (Capabilities.CheckpointMissing says why).
	CRIU   string
	Logger *slog.Logger
}

// Kernels configures kernel templates.
type Kernels struct {
	Python, Preimport string
	// Detach are host folders whose mounts (the workspaces) a template's mount namespace
	// drops when it starts (template.Config.Detach).
	Detach []string
}

// Images finds built images by name. A missing image is errdefs.ErrNotFound.
type Images interface {
	Get(name string) (*image.Image, error)
	// GetBuild is a build of the image, the latest or an older one still kept (what a
	// checkpoint names).
	GetBuild(name, hash string) (*image.Image, error)
}

// Backend runs sandboxes as OCI containers. Create it with New.
type Backend struct {
	runtime     string // resolved path of the runtime binary
	root        string // the runtime's --root
	bundles     string
	rootfs      string
	binds       []string
	guest       string
	guests      string                            // Config.Guests
	guestSum    func() ([sha256.Size]byte, error) // guest's, read once when first asked
	mplCache    string
	images      Images
	uid, gid    uint32
	limitSwap   bool
	gvisor      bool   // the runtime is gVisor's runsc
	platform    string // gVisor's platform (choosePlatform)
	current     bool   // a gVisor of 2025 or later (runscCurrent), whose sentry keeps more private
	log         *slog.Logger
	templates   *templates // nil: no kernel templates
	cgroups     string     // the parent of the sandboxes' cgroups (Config.CgroupParent)
	criu        string     // the CRIU binary (runc only); "": none recent enough, criuMissing says why
	criuMissing string
	// seccomp is the filter compiled for the guest to install on itself (seccomp.Program),
	// written into each bundle's run folder; nil under gVisor, where runsc installs the
	// spec's in its sentry.
	seccomp []byte

	live sandbox.Live[*Sandbox]
}

var _ sandbox.Backend = (*Backend)(nil)

// Timeouts of the runtime's own commands and of stopping a sandbox.
const (
	commandTimeout = 10 * time.Second
	exitTimeout    = 5 * time.Second
)

// New checks the host (root, the runtime binary) and prepares StateDir.
func New(cfg Config) (*Backend, error) {
	if !supported {
		return nil, fmt.Errorf("the runc backend runs only on Linux: choose --backend local-unsafe: %w", errdefs.ErrUnavailable)
	}
	if cfg.Runtime == "" {
		cfg.Runtime = "runc"
	}
	runtimePath, err := exec.LookPath(cfg.Runtime)
	if err != nil {
		return nil, fmt.Errorf("%s not found: %s or choose --backend local-unsafe: %w",
			cfg.Runtime, installHint(cfg.Runtime), errdefs.ErrUnavailable)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the runc backend needs root (it creates namespaces and cgroups): run the server as root or choose --backend local-unsafe: %w", errdefs.ErrUnavailable)
	}
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("runc backend: no state folder given: %w", errdefs.ErrInvalidArgument)
	}
	stateDir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	guest := cfg.GuestBinary
	if guest == "" {
		if guest, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the guest binary: %w", err)
		}
	}
	if fi, err := os.Stat(guest); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o001 == 0 {
		return nil, fmt.Errorf("guest binary %s is not a file everyone may execute: %w", guest, errdefs.ErrInvalidArgument)
	}
	if guest, err = filepath.Abs(guest); err != nil {
		return nil, err
	}
	if cfg.MPLCache != "" {
		if fi, err := os.Stat(cfg.MPLCache); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("matplotlib cache %s is not a folder: %w", cfg.MPLCache, errdefs.ErrInvalidArgument)
		}
		if cfg.MPLCache, err = filepath.Abs(cfg.MPLCache); err != nil {
			return nil, err
		}
	}
	if err := CheckCgroupParent(cfg.CgroupParent); cfg.CgroupParent != "" && err != nil {
		return nil, err
	}
	if cfg.UID <= 0 {
		cfg.UID = 1000
	}
	if cfg.GID <= 0 {
		cfg.GID = 1000
	}

	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Backend{
		runtime:  runtimePath,
		root:     filepath.Join(stateDir, "runtime"),
		bundles:  filepath.Join(stateDir, "bundles"),
		rootfs:   filepath.Join(stateDir, "rootfs"),
		guest:    guest,
		guests:   cfg.Guests,
		guestSum: sync.OnceValues(func() ([sha256.Size]byte, error) { return guestbin.Sum(guest) }),
		mplCache: cfg.MPLCache,
		images:   cfg.Images,
		uid:      uint32(cfg.UID),
		gid:      uint32(cfg.GID),

		cgroups:   cmp.Or(cfg.CgroupParent, DefaultCgroupParent),
		limitSwap: swapLimitSupported(),
		gvisor:    filepath.Base(runtimePath) == "runsc",
		log:       log.With("backend", "runc"),
	}
	if err := os.MkdirAll(stateDir, 0o711); err != nil {
		return nil, fmt.Errorf("create state folder: %w", err)
	}
	for _, d := range []string{b.root, b.bundles} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create state folder: %w", err)
		}
	}
	if err := CheckPlatform(cfg.GVisorPlatform); err != nil {
		return nil, err
	}
	if b.gvisor {
		var why, version string
		b.platform, why = choosePlatform(context.Background(), runtimePath, cfg.GVisorPlatform)
		b.log.Info("gVisor platform", "platform", b.platform, "why", why)
		if b.current, version = runscCurrent(runtimePath); !b.current {
			b.log.Warn("this runsc is older than cellbox supports (Debian's is of 2022): install the pinned one with make deps (scripts/runsc.sh)", "runtime", runtimePath, "version", version)
		}
		if err := runscCgroupV2(runtimePath); err != nil {
			return nil, err
		}
	}
	if !b.gvisor {
		// runc compiles a spec's filter with libseccomp in every sandbox's start (~14 ms of
		// CPU here); compiled once, the guest installs it (see buildSpec).
		if b.seccomp, err = seccomp.Program(); err != nil {
			b.log.Info("the runtime installs the seccomp filter", "why", err)
		}
	}
	if !b.gvisor && filepath.Base(runtimePath) == "runc" {
		b.criu, b.criuMissing = findCRIU(cfg.CRIU)
		if b.criu == "" {
			b.log.Info("sandboxes cannot be checkpointed (paused, forked)", "why", b.criuMissing)
		}
	}
	if err := adoptOrphans(); err != nil {
		return nil, fmt.Errorf("become a child subreaper: %w", err)
	}
	if b.binds, err = buildRootfs(b.rootfs, b.uid, b.gid); err != nil {
		return nil, fmt.Errorf("build sandbox root filesystem: %w", err)
	}
	if cfg.Kernels != nil && !b.gvisor {
		b.templates = &templates{cfg: *cfg.Kernels, dir: filepath.Join(stateDir, "templates"), uid: cfg.UID, gid: cfg.GID,
			binary: guest, log: b.log, byDir: map[string]*templateRun{}}
		if cfg.Images == nil {
			b.templates.forRoot(b.rootfs, "", false, b.mplCache) // the host's root: start it now, as a pool is about to fill
		}
	}
	b.log.Debug("runc backend ready", "runtime", runtimePath, "cgroup_v2", cgroupV2(), "swap_limit", b.limitSwap)
	return b, nil
}

func installHint(runtime string) string {
	switch filepath.Base(runtime) {
	case "runc", "crun":
		return "install it (apt-get install " + filepath.Base(runtime) + ")"
	case "runsc":
		return "install gVisor (apt-get install runsc on Debian 12 and later; else https://gvisor.dev/docs/user_guide/install/)"
	}
	return "install it or give the runtime's full path"
}

// Name is the backend's name, whatever the runtime.
func (b *Backend) Name() string { return "runc" }

// Capabilities: everything is enforced. Under gVisor user code runs on the sentry, not
// on the host kernel: its processes are not the host's, and limits cannot change while it
// runs. The memory limit is the guest's own there (sandbox.GVisorHostMemoryMB): an OOM is
// reported as under runc. A runsc of before 2025 (Debian's, of 2022) also counts throttled
// time in CPU clocks, and lets user code list the guest's descriptors and read its
// environment and memory map (though not open them); the current one does neither.
func (b *Backend) Capabilities() sandbox.Capabilities {
	c := sandbox.Capabilities{Isolated: true, Limits: true, NoNetwork: true, GuestProtected: true, Reattach: true, OOMReported: true}
	if !b.gvisor {
		c.GuestProcPrivate, c.CPUClock, c.HostProcesses, c.LimitsChange = true, true, true, true
	}
	if b.gvisor && b.current {
		c.GuestProcPrivate, c.CPUClock = true, true
	}
	c.Checkpoint, c.CheckpointMissing = b.checkpointKind()
	return c
}

// Create starts a sandbox and returns once the runtime has started the guest.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	s, in, err := b.prepare(spec)
	if err != nil {
		return nil, err
	}
	if b.templates != nil && !in.userns {
		in.template = b.templates.forRoot(in.rootfs, spec.Image, in.rootMPLCache, b.mplCache)
	}
	if !b.live.Add(spec.ID, s) {
		return nil, fmt.Errorf("sandbox %s exists already: %w", spec.ID, errdefs.ErrFailedPrecondition)
	}

	if err := s.start(ctx, buildSpec(in)); err != nil {
		s.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// prepare checks spec and returns its Sandbox (not yet live) and what its OCI spec is
// built from: everything but the kernel template.
func (b *Backend) prepare(spec sandbox.Spec) (*Sandbox, specInput, error) {
	if err := sandbox.CheckID(spec.ID); err != nil {
		return nil, specInput{}, err
	}
	if fi, err := os.Stat(spec.Workspace); err != nil || !fi.IsDir() || !filepath.IsAbs(spec.Workspace) {
		return nil, specInput{}, fmt.Errorf("sandbox %s: workspace is not an absolute path of a folder: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	s := &Sandbox{id: spec.ID, b: b, bundle: filepath.Join(b.bundles, spec.ID)}
	kind, _ := b.checkpointKind()
	in := specInput{
		spec: spec, rootfs: b.rootfs, binds: b.binds, guest: b.guest, mplCache: b.mplCache, run: filepath.Join(s.bundle, runDir),
		uid: b.uid, gid: b.gid, limitSwap: b.limitSwap, goarch: runtime.GOARCH, gvisor: b.gvisor, cgroups: b.cgroups,
		guestSeccomp: b.seccomp != nil,
		// gVisor checkpoints any sandbox; runc with CRIU those in a user namespace.
		userns: spec.Checkpointable && kind == "criu",
	}
	if spec.Image != "" {
		im, err := b.image(spec)
		if err != nil {
			return nil, specInput{}, err
		}
		// The backend's own passwd, group and hosts over the image's; the
		// image's font cache, if it has one: the host's suits the host's matplotlib.
		in.rootfs, in.binds, in.etc = im.Root, nil, filepath.Join(b.rootfs, "etc")
		in.mplCache, in.rootMPLCache = "", im.MPLCache
	}
	return s, in, nil
}

// image returns the image spec names. Its error when the image is not built is the
// store's, which names the command that builds it.
func (b *Backend) image(spec sandbox.Spec) (*image.Image, error) {
	if err := image.CheckName(spec.Image); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	if b.images == nil {
		return nil, fmt.Errorf("sandbox %s: image %q: this server runs sandboxes on the host's root filesystem; start it with --rootfs image to use images: %w",
			spec.ID, spec.Image, errdefs.ErrInvalidArgument)
	}
	return b.images.Get(spec.Image)
}

// PrepareImage checks that the image name is built, so that a missing image fails a
// server's start rather than its first session.
func (b *Backend) PrepareImage(_ context.Context, name string) error {
	im, err := b.image(sandbox.Spec{ID: "-", Image: name})
	if err == nil && b.templates != nil {
		b.templates.forRoot(im.Root, name, im.MPLCache, "") // warm by the time a pool fills
	}
	return err
}

// Close ends the kernel templates. Sandboxes run on, and kernels forked earlier with them.
func (b *Backend) Close() error {
	if b.templates != nil {
		b.templates.close()
	}
	if b.gvisor {
		unpinNullNetns(b.root)
	}
	return nil
}

// Attach connects to sandbox id, which an earlier server process on the same state folder
// started (or this one detached). A sandbox that is not running, or whose guest does not
// pass the attach handshake, is removed: Attach fails with errdefs.ErrNotFound then, as for
// a sandbox that never was. When the runtime itself fails (busy, timed out) the sandbox is
// left alone, and the error is errdefs.ErrUnavailable.
func (b *Backend) Attach(ctx context.Context, id string) (sandbox.Sandbox, error) {
	if err := sandbox.CheckID(id); err != nil {
		return nil, err
	}
	s := &Sandbox{id: id, b: b, bundle: filepath.Join(b.bundles, id)}
	if _, err := os.Stat(s.bundle); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if !b.live.Add(id, s) {
		return nil, fmt.Errorf("sandbox %s is attached already: %w", id, errdefs.ErrFailedPrecondition)
	}
	if err := s.attach(ctx); err != nil {
		if errors.Is(err, errLost) {
			s.Stop(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("attach sandbox %s: %w; removed it: %w", id, err, errdefs.ErrNotFound)
		}
		s.Detach()
		return nil, fmt.Errorf("attach sandbox %s: %w: %w", id, err, errdefs.ErrUnavailable)
	}
	return s, nil
}

// errLost marks an attach failure that says the sandbox is dead or unusable, not that the
// runtime could not tell.
var errLost = errors.New("sandbox lost")

// attach checks that the container runs, watches its guest and connects to it.
func (s *Sandbox) attach(ctx context.Context) error {
	pid, err := s.b.runningPid(ctx, s.id)
	if err != nil {
		return err
	}
	if err := s.watch(pid); err != nil {
		return fmt.Errorf("%w: %w", errLost, err)
	}
	// The same pid, still running, after the watch began: the watch is of the guest, not
	// of a process that took its pid since.
	if again, err := s.b.runningPid(ctx, s.id); err != nil || again != pid {
		// Its pid may name another process by now: Stop must not kill through it.
		s.kill = nil
		return fmt.Errorf("%w: its guest exited", errLost)
	}
	token, err := os.ReadFile(filepath.Join(s.bundle, sandbox.GuestToken))
	if err != nil {
		return fmt.Errorf("%w: read the sandbox's token: %w", errLost, err)
	}
	s.token = string(token)
	if s.conn, err = s.dial(ctx); err != nil {
		return fmt.Errorf("%w: connect to the guest: %w", errLost, err)
	}
	return nil
}

// runningPid returns the host pid of a running container's guest. A container that the
// runtime does not know, or not as running, is lost (errLost).
func (b *Backend) runningPid(ctx context.Context, id string) (int, error) {
	out, err := b.command(ctx, "state", id)
	if err != nil {
		if b.gone(ctx, id) {
			return 0, fmt.Errorf("%w: %w", errLost, err)
		}
		return 0, err
	}
	var st struct {
		Status string `json:"status"`
		Pid    int    `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("decode %s state: %w", filepath.Base(b.runtime), err)
	}
	if st.Status != "running" || st.Pid <= 0 {
		return 0, fmt.Errorf("%w: the sandbox is %s, not running", errLost, st.Status)
	}
	return st.Pid, nil
}

// Cleanup kills and deletes every container under the backend's runtime root that this
// Backend is not attached to and keep does not name, and removes their bundles: what an
// earlier server process left behind.
func (b *Backend) Cleanup(ctx context.Context, keep func(id string) bool) error {
	if keep == nil {
		keep = sandbox.KeepNone
	}
	ids, err := b.list(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if b.live.Has(id) || keep(id) {
			continue
		}
		b.log.Info("removing a sandbox left behind", "sandbox_id", id)
		b.command(ctx, "kill", id, "KILL")
		if err := b.delete(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	// A restore cut short (the server killed) may have left its own root mounted in its
	// bundle: unmounted first, so that no file is removed through it.
	entries, _ := os.ReadDir(b.bundles)
	for _, e := range entries {
		if !b.live.Has(e.Name()) && !keep(e.Name()) {
			if err := unbindRoot(filepath.Join(b.bundles, e.Name(), restoreRoot)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := sandbox.RemoveLeftovers(b.bundles, &b.live, keep); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// command runs the runtime with args under its --root and returns its stdout.
func (b *Backend) command(ctx context.Context, args ...string) ([]byte, error) {
	return b.commandFor(ctx, commandTimeout, args...)
}

// commandFor is command with a timeout of d.
func (b *Backend) commandFor(ctx context.Context, d time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.runtime, b.argv(args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s: %w", filepath.Base(b.runtime), args[0], err,
			runtimeMessage(stderr.Bytes()), errdefs.ErrUnavailable)
	}
	return out, nil
}

// argv is the runtime's command line for a subcommand: the global flags, then args.
func (b *Backend) argv(args ...string) []string {
	global := []string{"--root", b.root}
	if b.criu != "" {
		global = append(global, "--criu", b.criu)
	}
	if b.gvisor {
		global = append(global,
			// runsc's default network (sandbox: gVisor's own stack on the container's
			// namespace) fails to start on recent host kernels (gVisor issue #10704). A
			// sandbox has loopback only anyway, which is what none gives.
			"--network=none",
			// runsc ignores the spec's seccomp filter unless told. The sentry is already
			// the boundary to the host kernel; the filter keeps user code away from the
			// sentry's own code for mount, namespaces, ptrace, bpf, keyctl, io_uring...,
			// where gVisor's bugs would be (see seccomp.Profile for what differs).
			"--oci-seccomp",
			// The guest's socket is made inside the sandbox on a bind of a host folder, for
			// the server to connect to from the host.
			"--host-uds=create",
			"--platform="+b.platform,
			// The sentry's own cgroups as one cgroup2 hierarchy, where the guest keeps user
			// code's process limit (spec.go). Under v1's, one hierarchy per controller, a
			// fork is charged to whichever of the task's cgroups comes first in a Go map:
			// pids.max stops one fork in seven.
			"--in-sandbox-cgroup=v2")
	}
	return append(global, args...)
}

// list returns the ids of the containers under the backend's runtime root.
func (b *Backend) list(ctx context.Context) ([]string, error) {
	out, err := b.command(ctx, "list", "--format", "json")
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var list []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &list); err != nil && len(bytes.TrimSpace(out)) > 0 {
		return nil, fmt.Errorf("list sandboxes: decode %s output: %w: %w", filepath.Base(b.runtime), err, errdefs.ErrUnavailable)
	}
	ids := make([]string, len(list))
	for i, c := range list {
		ids[i] = c.ID
	}
	return ids, nil
}

// gone reports, after a command on container id failed, whether that container does not
// exist: whether the runtime's list leaves it out. The runtimes (runc, crun, runsc) say "no
// such container" only in their stderr, each in its own words, with an exit status that any
// failure has; their list is JSON and the same in all three. A list that fails says
// nothing: the container is not taken for gone.
func (b *Backend) gone(ctx context.Context, id string) bool {
	ids, err := b.list(ctx)
	return err == nil && !slices.Contains(ids, id)
}

// delete removes a container, whatever its state; one that is gone already is no error
// (the runtimes answer 0 to a forced delete of an unknown container; gone covers those
// that do not).
func (b *Backend) delete(ctx context.Context, id string) error {
	_, err := b.command(ctx, "delete", "--force", id)
	if err != nil && !b.gone(ctx, id) {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return nil
}

var logMsg = regexp.MustCompile(`msg="((?:[^"\\]|\\.)*)"`)

// runtimeMessage picks the error out of a runtime's stderr: the last logfmt msg="..." if
// there is one, else the last line.
func runtimeMessage(stderr []byte) string {
	text := strings.TrimSpace(string(stderr))
	if m := logMsg.FindAllStringSubmatch(text, -1); len(m) > 0 {
		text = strings.ReplaceAll(m[len(m)-1][1], `\"`, `"`)
	} else if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		text = text[i+1:]
	}
	if text == "" {
		return "no error message"
	}
	if len(text) > 1024 {
		text = text[:1024] + "..."
	}
	return text
}

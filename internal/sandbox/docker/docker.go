// Package docker is the sandbox backend that runs each sandbox as a Docker container, through
// the Docker Engine API (the official Go client; it never runs the docker command). It is
// the backend for machines that have Docker and nothing else: macOS and Windows through
// Docker Desktop, Linux without root.
//
// A sandbox is a container of an image (package image: cellbox/NAME in the engine, imported
// from the image store's root filesystem, or built from the image's Dockerfile) whose
// process 1 is the guest, bind-mounted from the server's files. The guest listens on a Unix
// socket inside the container, in a folder only its root may enter. The server reaches it
// through the engine: each connection is an exec of `cellbox guest --connect`, a relay whose
// stdin and stdout the engine carries, so it works wherever the engine is (a local socket,
// Docker Desktop's VM) and again after the server restarts. The connection opens with the
// attach handshake and the sandbox's token, as on runc.
//
// Locked down like runc's sandboxes: no network, every capability dropped but the guest's
// five (sandbox.GuestCapabilities), no-new-privileges, cellbox's seccomp filter, read-only
// root, a tmpfs /tmp, memory, pids and CPU limits, user code under a non-root uid, and the
// workspace bind-mounted at /mnt/data. A runtime can be named (Config.Runtime, e.g. runsc
// where the engine knows it) and is passed through.
//
// Containers carry the labels cellbox.session=<sandbox id> and cellbox.server=<this server's
// identity>, kept in its state folder: a restarted server finds its own containers and
// nobody else's.
//
// Not for: what runs inside (package guest), building images (package image) or the
// workspace folders (package workspace).
package docker

import (
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/statefile"
)

// Images finds built images (an *image.Store).
type Images interface {
	Get(name string) (*image.Image, error)
}

// Config configures the backend.
type Config struct {
	// Host is the engine's address (unix:///var/run/docker.sock, tcp://...); "": DOCKER_HOST,
	// else the platform's default socket.
	Host string
	// Runtime is the engine's name of the OCI runtime sandboxes run with (runsc, where the
	// engine has it configured); "": the engine's default.
	Runtime string
	// StateDir is a folder the backend owns: the server's identity and, per sandbox, the
	// folder mounted at /.cellbox/run and its token. With a remote engine it must be a path
	// the engine's host shares (Docker Desktop shares the user's home).
	StateDir string
	// GuestBinary is a Linux cellbox binary for the engine's architecture; "" on Linux: the
	// running executable.
	GuestBinary string
	// Images is the store of built images, imported into the engine when it lacks them;
	// nil: only the engine's own cellbox/NAME images are used.
	Images Images
	// UID and GID user code runs as; 0 means 1000:1000. Never root.
	UID, GID int
	Logger   *slog.Logger
}

// Backend runs sandboxes as Docker containers. Create it with New.
type Backend struct {
	cli      *client.Client
	runtime  string
	state    string // sandboxes/<id>: each sandbox's files
	etc      string // the /etc files every sandbox gets (writeUserFiles)
	server   string // this server's identity, the cellbox.server label
	guest    string
	images   Images
	uid, gid int
	gvisor   bool
	arch     string // the engine's (Go's names: amd64, arm64, ...)
	log      *slog.Logger

	importing chan struct{} // holds a token while an image is imported

	live sandbox.Live[*Sandbox]
}

var _ sandbox.Backend = (*Backend)(nil)

// Labels of a container, and what the image carries.
const (
	labelSession  = "cellbox.session"
	labelServer   = "cellbox.server"
	labelImage    = "cellbox.image"
	labelHash     = "cellbox.hash"
	labelMPLCache = "cellbox.mpl-cache"
)

// Timeouts of the engine's calls and of stopping a sandbox.
const (
	engineTimeout = 30 * time.Second
	pingTimeout   = 5 * time.Second
)

// New connects to the engine, checks the guest binary against it and prepares StateDir.
func New(cfg Config) (*Backend, error) {
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("docker backend: no state folder given: %w", errdefs.ErrInvalidArgument)
	}
	stateDir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	opts := []client.Opt{client.FromEnv} // the API version is negotiated by default
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker backend: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	version, err := cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("cannot reach the Docker engine at %s: %w; start it (Linux: systemctl start docker, or dockerd; macOS and Windows: Docker Desktop), or point --docker-host or DOCKER_HOST at it: %w",
			cli.DaemonHost(), err, errdefs.ErrUnavailable)
	}
	if version.Os != "linux" {
		cli.Close()
		return nil, fmt.Errorf("the Docker engine at %s runs %s containers; cellbox needs Linux containers: %w", cli.DaemonHost(), version.Os, errdefs.ErrUnavailable)
	}
	guest, err := guestBinary(cfg.GuestBinary, version.Arch)
	if err != nil {
		cli.Close()
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
		cli:       cli,
		runtime:   cfg.Runtime,
		state:     filepath.Join(stateDir, "sandboxes"),
		guest:     guest,
		images:    cfg.Images,
		uid:       cfg.UID,
		gid:       cfg.GID,
		gvisor:    filepath.Base(cfg.Runtime) == "runsc",
		arch:      version.Arch,
		importing: make(chan struct{}, 1),
		log:       log.With("backend", "docker"),
	}
	if err := os.MkdirAll(b.state, 0o711); err != nil {
		cli.Close()
		return nil, fmt.Errorf("create state folder: %w", err)
	}
	if b.server, err = serverID(stateDir); err == nil {
		err = b.writeUserFiles(stateDir)
	}
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker backend: %w", err)
	}
	b.log.Debug("docker backend ready", "engine", cli.DaemonHost(), "version", version.Version, "api", cli.ClientVersion(), "server_identity", b.server)
	return b, nil
}

// guestBinary checks that path (default: the running executable, on Linux) is a Linux
// executable for the engine's architecture arch, and returns its absolute path.
func guestBinary(path, arch string) (string, error) {
	if path == "" {
		if runtime.GOOS != "linux" {
			return "", fmt.Errorf("the docker backend on %s needs a Linux cellbox binary to run inside the containers: give it with --guest-binary (make build-linux builds bin/cellbox-linux-%s): %w",
				runtime.GOOS, arch, errdefs.ErrInvalidArgument)
		}
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("find the guest binary: %w", err)
		}
		path = exe
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("guest binary %s is not a Linux executable: %w: %w", path, err, errdefs.ErrInvalidArgument)
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV}
	if m, ok := want[arch]; ok && f.Machine != m {
		return "", fmt.Errorf("guest binary %s is for %s, the Docker engine runs %s: build it with GOOS=linux GOARCH=%s: %w", path, f.Machine, arch, arch, errdefs.ErrInvalidArgument)
	}
	return path, nil
}

// serverID returns this server's identity, made once and kept in dir.
func serverID(dir string) (string, error) {
	path := filepath.Join(dir, "server-id")
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); sandbox.CheckID(id) == nil {
			return id, nil
		}
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(raw[:])
	return id, statefile.Write(path, []byte(id+"\n"), 0o644)
}

// Name is the backend's name.
func (b *Backend) Name() string { return "docker" }

// Capabilities: everything is enforced; under gVisor (Runtime runsc) as runc's backend
// says for it.
func (b *Backend) Capabilities() sandbox.Capabilities {
	c := sandbox.Capabilities{Isolated: true, Limits: true, NoNetwork: true, GuestProtected: true, Reattach: true, OOMReported: true}
	if !b.gvisor {
		c.GuestProcPrivate, c.CPUClock, c.HostProcesses, c.LimitsChange = true, true, true, true
	}
	return c
}

// Close releases the engine client.
func (b *Backend) Close() error { return b.cli.Close() }

// containerName is the engine's name of sandbox id: unique per server and engine.
func (b *Backend) containerName(id string) string { return "cellbox-" + b.server + "-" + id }

// Create starts a sandbox on spec.Image and returns once its guest answers.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := sandbox.CheckID(spec.ID); err != nil {
		return nil, err
	}
	if spec.Image == "" {
		return nil, fmt.Errorf("sandbox %s: the docker backend runs sandboxes on images, and none was named: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	if err := image.CheckName(spec.Image); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	if fi, err := os.Stat(spec.Workspace); err != nil || !fi.IsDir() || !filepath.IsAbs(spec.Workspace) {
		return nil, fmt.Errorf("sandbox %s: workspace is not an absolute path of a folder: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	s := b.newSandbox(spec.ID)
	if !b.live.Add(s.id, s) {
		return nil, fmt.Errorf("sandbox %s exists already: %w", spec.ID, errdefs.ErrFailedPrecondition)
	}
	if err := s.start(ctx, spec); err != nil {
		s.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// Attach connects to sandbox id, which an earlier server process with the same state
// folder started (or this one detached). A container that is not running, or whose guest
// does not pass the attach handshake, is removed: Attach fails with errdefs.ErrNotFound
// then, as for one that never was. When the engine cannot be asked, the container is left
// alone and the error is errdefs.ErrUnavailable.
func (b *Backend) Attach(ctx context.Context, id string) (sandbox.Sandbox, error) {
	if err := sandbox.CheckID(id); err != nil {
		return nil, err
	}
	s := b.newSandbox(id)
	if !b.live.Add(s.id, s) {
		return nil, fmt.Errorf("sandbox %s is attached already: %w", id, errdefs.ErrFailedPrecondition)
	}
	if err := s.attach(ctx); err != nil {
		if errors.Is(err, errForeign) {
			b.live.Forget(id, s)
			return nil, fmt.Errorf("attach sandbox %s: %w: %w", id, err, errdefs.ErrNotFound)
		}
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
// engine could not tell; errForeign one that found a container of that name that is not
// this server's, which is left alone.
var (
	errLost    = errors.New("sandbox lost")
	errForeign = errors.New("not this server's")
)

// Cleanup removes the containers of this server that this Backend is not attached to and
// keep does not name, and their folders: what an earlier server process left behind.
// Containers of other servers on the same engine are not touched.
func (b *Backend) Cleanup(ctx context.Context, keep func(id string) bool) error {
	if keep == nil {
		keep = sandbox.KeepNone
	}
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	list, err := b.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", labelServer+"="+b.server),
	})
	if err != nil {
		return fmt.Errorf("list sandboxes: %w: %w", err, errdefs.ErrUnavailable)
	}
	var errs []error
	for _, c := range list.Items {
		id := c.Labels[labelSession]
		if c.Labels[labelServer] != b.server || b.live.Has(id) || (sandbox.CheckID(id) == nil && keep(id)) {
			continue
		}
		b.log.Info("removing a sandbox left behind", "sandbox_id", id)
		if err := b.remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if err := sandbox.RemoveLeftovers(b.state, &b.live, keep); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// remove kills and removes a container; one that is gone already is no error.
func (b *Backend) remove(ctx context.Context, ref string) error {
	_, err := b.cli.ContainerRemove(ctx, ref, client.ContainerRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w: %w", ref, err, errdefs.ErrUnavailable)
	}
	return nil
}

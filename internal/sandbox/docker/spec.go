package docker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/seccomp"
	"github.com/cellbox/cellbox/internal/statefile"
)

// Paths inside the container.
const (
	cgroupMount = "/sys/fs/cgroup"
	shmBytes    = 64 << 20
)

// tokenEnv is the variable that hands the guest its attach token.
const tokenEnv = "CELLBOX_GUEST_TOKEN"

// specInput is everything a sandbox's container depends on.
type specInput struct {
	spec     sandbox.Spec
	name     string // the container's name
	image    string // the engine's image id
	mplCache bool   // the image holds matplotlib's font cache at image.MPLCachePath
	server   string // this server's identity
	guest    string // host path of the guest binary
	token    string // the attach token
	etc      string // host folder with passwd, group, hosts and an empty resolv.conf
	runtime  string
	gvisor   bool
	goarch   string // the engine's architecture, in Go's names
	uid, gid int
}

// containerSpec returns the container of one sandbox.
func containerSpec(in specInput) (*container.Config, *container.HostConfig, error) {
	s := in.spec
	guest := sandbox.GuestCommand{Binary: image.GuestPath, Cgroup: cgroupMount, UID: in.uid, GID: in.gid, OrphanExit: s.OrphanExit, TokenEnv: tokenEnv, Egress: guestproto.EgressListen}
	if in.gvisor {
		guest.Cgroup = "" // gVisor's cgroupfs is the sentry's own, without the host's limits
		guest.MemoryMB = s.Limits.MemoryMB
	}
	if in.mplCache {
		guest.MPLCache = image.MPLCachePath
	}
	profile, err := json.Marshal(seccomp.Profile(in.goarch, in.gvisor))
	if err != nil {
		return nil, nil, err
	}
	caps := make([]string, len(sandbox.GuestCapabilities))
	for i, c := range sandbox.GuestCapabilities {
		caps[i] = strings.TrimPrefix(c, "CAP_")
	}
	bind := func(src, dst string, ro bool) mount.Mount {
		return mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: ro,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}
	}
	cfg := &container.Config{
		Image: in.image,
		Cmd:   guest.Args(),
		// The guest unsets the token once read; only the engine's API shows it.
		Env:        append(sandbox.GuestEnv(s.Env), tokenEnv+"="+in.token),
		WorkingDir: api.WorkspaceDir,
		User:       "0:0",
		Hostname:   sandbox.Hostname,
		Labels:     map[string]string{labelSession: s.ID, labelServer: in.server, labelImage: s.Image},
		// The guest ignores SIGTERM: stopping is removing, which kills.
		StopSignal: "SIGKILL",
	}
	host := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		CapAdd:         caps,
		SecurityOpt:    []string{"no-new-privileges", "seccomp=" + string(profile)},
		Tmpfs: map[string]string{
			// exec: the engine would add noexec, which runc's /tmp has not (HOME is /tmp).
			"/tmp": fmt.Sprintf("rw,exec,nosuid,nodev,size=%dm,mode=1777", s.Limits.TmpSize()),
			// The guest's socket: root's alone, inside the container (nothing of the
			// host's, whose owner could be the uid user code runs as).
			sandbox.GuestRunDir: "rw,noexec,nosuid,nodev,size=1m,mode=700",
		},
		ShmSize:       shmBytes,
		Runtime:       in.runtime,
		IpcMode:       container.IPCModePrivate,
		CgroupnsMode:  container.CgroupnsModePrivate,
		MaskedPaths:   sandbox.MaskedPaths,
		ReadonlyPaths: sandbox.ReadonlyPaths,
		// The guest caps its own log; the engine keeps one small file of it.
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
		Mounts: []mount.Mount{
			bind(s.Workspace, api.WorkspaceDir, false),
			// The same folder again where E2B's SDKs expect the user's files.
			bind(s.Workspace, api.HomeDir, false),
			bind(in.guest, image.GuestPath, true),
			// The engine's own hosts and resolv.conf would name the host's resolvers.
			bind(filepath.Join(in.etc, "passwd"), "/etc/passwd", true),
			bind(filepath.Join(in.etc, "group"), "/etc/group", true),
			bind(filepath.Join(in.etc, "hosts"), "/etc/hosts", true),
			bind(filepath.Join(in.etc, "resolv.conf"), "/etc/resolv.conf", true),
		},
		Resources: resources(s.Limits, in.gvisor),
	}
	return cfg, host, nil
}

// resources turns limits into the engine's. Zero limits stay unset (no limit).
func resources(l sandbox.Limits, gvisor bool) container.Resources {
	r := container.Resources{
		Ulimits: []*container.Ulimit{{Name: "nofile", Soft: 1024, Hard: 4096}, {Name: "core", Soft: 0, Hard: 0}},
	}
	if l.MemoryMB > 0 {
		r.Memory = int64(l.MemoryMB) << 20
		if gvisor {
			r.Memory = int64(sandbox.GVisorHostMemoryMB(l.MemoryMB)) << 20
		}
		r.MemorySwap = r.Memory // memory+swap = memory: no swap
	}
	if l.Pids > 0 {
		n := int64(l.Pids)
		if gvisor {
			n = sandbox.GVisorHostTasks(l.Pids)
			nproc := int64(max(l.Pids-1, 1))
			r.Ulimits = append(r.Ulimits, &container.Ulimit{Name: "nproc", Soft: nproc, Hard: nproc})
		}
		r.PidsLimit = &n
	}
	if l.CPUs > 0 {
		r.NanoCPUs = max(int64(l.CPUs*1e9), 1e7)
	}
	return r
}

// writeUserFiles writes the /etc files every sandbox gets into <stateDir>/etc.
func (b *Backend) writeUserFiles(stateDir string) error {
	b.etc = filepath.Join(stateDir, "etc")
	if err := os.MkdirAll(b.etc, 0o755); err != nil {
		return err
	}
	files := sandbox.EtcFiles(b.uid, b.gid)
	files["resolv.conf"] = ""
	for name, content := range files {
		if err := statefile.Update(filepath.Join(b.etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

package runc

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/runc/template"
	"github.com/cellbox/cellbox/internal/sandbox/seccomp"
)

// Paths inside the sandbox.
const (
	guestPath    = image.GuestPath
	mplCachePath = image.MPLCachePath
	cgroupMount  = "/sys/fs/cgroup"
	shmSize      = "size=65536k"
	cpuPeriod    = 100000
	// templateDir is where the kernel template's folder is bound (a folder of the bundle's
	// run folder is its mount point).
	templateDir = sandbox.GuestRunDir + "/template"
)

// ociVersion is the spec version written: the fields used here are all in 1.0.2, and older
// runtimes (crun 1.8) refuse a version newer than theirs.
const ociVersion = "1.0.2"

// specInput is everything the OCI spec of one sandbox depends on.
type specInput struct {
	spec     sandbox.Spec
	rootfs   string   // the root filesystem: the shared skeleton, or an image's root
	binds    []string // host paths bind-mounted read-only at the same path (host mode)
	etc      string   // image mode: the host folder of the passwd, group and hosts bound over the image's
	guest    string   // host path of the cellbox binary
	mplCache string   // host folder of matplotlib's font cache, or ""
	run      string   // host folder mounted at sandbox.GuestRunDir: the guest's socket and token
	uid, gid uint32   // user code; the guest is root with sandbox.GuestCapabilities only
	// template: host folder of the kernel template's socket, bound at templateDir; "": none
	template string

	// rootMPLCache: the root has matplotlib's font cache at mplCachePath (an image's).
	rootMPLCache bool
	// limitSwap: set the memory+swap limit equal to the memory limit, so a memory bomb is
	// killed instead of swapping (needs swap accounting on cgroup v1).
	limitSwap bool
	goarch    string
	// gvisor: the runtime is runsc, whose sentry is the sandbox's kernel.
	gvisor bool
	// cgroups is the parent of the sandbox's cgroup (Config.CgroupParent).
	cgroups string
	// guestSeccomp: the guest installs the seccomp filter on itself, from the program the
	// backend writes into the run folder (sandbox.GuestSeccomp); the spec has none. Else
	// the runtime installs seccomp.Profile.
	guestSeccomp bool
	// userns: the sandbox has a user namespace of its own, which maps every uid and gid to
	// itself (files keep their owners), so that CRIU can checkpoint it (see checkpoint.go).
	// Its /sys is then a tmpfs holding only the cgroup mount.
	userns bool
}

// usernsSize is how many uids and gids a sandbox's own user namespace maps (to
// themselves): root, user code's and nobody's among them.
const usernsSize = 65536

// DefaultCgroupParent is where sandboxes' cgroups are made by default: relative, so under
// the server's own cgroup.
const DefaultCgroupParent = "cellbox"

// CheckCgroupParent says whether p can be a Config.CgroupParent: a clean path of plain names
// ("a/b" under the server's cgroup, "/a/b" from the root), never the root itself.
func CheckCgroupParent(p string) error {
	rel := strings.TrimPrefix(p, "/")
	ok := rel != "" && path.Clean(rel) == rel && len(p) <= 256
	for _, e := range strings.Split(rel, "/") {
		ok = ok && e != "" && e != "." && e != ".." && !strings.ContainsAny(e, " \t\n:,")
	}
	if !ok {
		return fmt.Errorf("cgroup parent %q: want a clean path of plain names, like cellbox (under the server's cgroup) or /cellbox (from the cgroup root): %w", p, errdefs.ErrInvalidArgument)
	}
	return nil
}

// buildSpec returns the OCI runtime spec of one sandbox.
func buildSpec(in specInput) *specs.Spec {
	s := in.spec
	guest := sandbox.GuestCommand{Binary: guestPath, Cgroup: cgroupMount, UID: int(in.uid), GID: int(in.gid), OrphanExit: s.OrphanExit, Egress: guestproto.EgressListen,
		Log: sandbox.GuestRunDir + "/" + sandbox.GuestLog}
	if in.gvisor {
		// gVisor's cgroupfs is the sentry's own, without the host's limits and OOM count:
		// the guest keeps memory and processes under their limits itself.
		guest.Cgroup = ""
		guest.MemoryMB, guest.Pids = s.Limits.MemoryMB, s.Limits.Pids
	}
	if in.template != "" {
		guest.Template = templateDir + "/" + template.Socket
	}
	filter := seccomp.Profile(in.goarch, in.gvisor)
	if in.guestSeccomp && !in.gvisor {
		guest.Seccomp, filter = sandbox.GuestRunDir+"/"+sandbox.GuestSeccomp, nil
	}
	if in.mplCache != "" || in.rootMPLCache {
		guest.MPLCache = mplCachePath
	}
	noCaps := []string{}
	caps := slices.Clone(sandbox.GuestCapabilities)

	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", shmSize}},
	}
	if !in.gvisor {
		// runsc skips an mqueue mount (there is no /dev/mqueue inside).
		mounts = append(mounts,
			specs.Mount{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}})
	}
	if in.userns {
		// A user namespace may mount sysfs only where the host's is fully visible, which it
		// is not in a container (masked paths): a tmpfs holds the cgroup mount instead.
		mounts = append(mounts,
			specs.Mount{Destination: "/sys", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "nodev", "mode=755", "size=64k"}})
	} else {
		mounts = append(mounts,
			specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}})
	}
	cgroup := specs.Mount{Destination: cgroupMount, Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}}
	if in.gvisor {
		// The sentry's own cgroup2 hierarchy (argv's --in-sandbox-cgroup=v2), where runsc
		// makes the sandbox's cgroup: the guest limits it, leaves it and starts user code in
		// it (guest.CgroupMount). Writable for the guest; its files are root's.
		cgroup.Options = cgroup.Options[:4]
	}
	mounts = append(mounts, cgroup)
	for _, p := range in.binds {
		mounts = append(mounts, roBind(p, p))
	}
	if in.etc != "" {
		for _, name := range []string{"passwd", "group", "hosts"} {
			mounts = append(mounts, roBind(filepath.Join(in.etc, name), "/etc/"+name))
		}
	}
	mounts = append(mounts,
		specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%dm", s.Limits.TmpSize())}},
		specs.Mount{Destination: api.WorkspaceDir, Type: "bind", Source: s.Workspace, Options: []string{"bind", "rw", "nosuid", "nodev"}},
		// The same folder again where E2B's SDKs expect the user's files.
		specs.Mount{Destination: api.HomeDir, Type: "bind", Source: s.Workspace, Options: []string{"bind", "rw", "nosuid", "nodev"}},
		roBind(in.guest, guestPath),
		// Root-owned, 0700: user code cannot reach the socket or the token in it.
		specs.Mount{Destination: sandbox.GuestRunDir, Type: "bind", Source: in.run, Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
	)
	if in.template != "" {
		// In the guest's root-only folder: user code cannot reach the template's socket.
		mounts = append(mounts, roBind(in.template, templateDir))
	}
	if in.mplCache != "" {
		mounts = append(mounts, roBind(in.mplCache, mplCachePath))
	}

	namespaces := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.CgroupNamespace},
	}
	if in.gvisor {
		// In a cgroup namespace of its own the sandbox's cgroup would be the namespace's
		// root, whose limits runsc's nsdelegate keeps from being written inside.
		namespaces = slices.DeleteFunc(namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.CgroupNamespace })
	}
	var idMap []specs.LinuxIDMapping
	if in.userns {
		namespaces = append(namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		idMap = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 0, Size: usernsSize}}
	}
	return &specs.Spec{
		Version: ociVersion,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: guest.Args(),
			Env:  sandbox.GuestEnv(s.Env),
			Cwd:  api.WorkspaceDir,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps, Inheritable: noCaps, Ambient: noCaps,
			},
			Rlimits:         slices.Clone(rlimits),
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: in.rootfs, Readonly: true},
		Hostname: sandbox.Hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			Namespaces:    namespaces,
			UIDMappings:   idMap,
			GIDMappings:   idMap,
			CgroupsPath:   in.cgroups + "/" + s.ID,
			Resources:     resources(s.Limits, in.limitSwap, in.gvisor),
			Devices:       devices(),
			Seccomp:       filter,
			MaskedPaths:   sandbox.MaskedPaths,
			ReadonlyPaths: sandbox.ReadonlyPaths,
		},
	}
}

// rlimits are the guest's resource limits, which user code inherits.
var rlimits = []specs.POSIXRlimit{
	{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 4096},
	{Type: "RLIMIT_CORE", Soft: 0, Hard: 0},
}

func roBind(src, dst string) specs.Mount {
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"bind", "ro", "nosuid", "nodev"}}
}

// resources turns limits into cgroup settings. Zero limits stay unset (no limit).
func resources(l sandbox.Limits, limitSwap, gvisor bool) *specs.LinuxResources {
	r := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}
	for _, d := range devices() {
		major, minor := d.Major, d.Minor
		r.Devices = append(r.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Minor: &minor, Access: "rwm"})
	}
	ptyMajor, ptmxMinor := int64(5), int64(2)
	r.Devices = append(r.Devices,
		specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &ptyMajor, Minor: &ptmxMinor, Access: "rwm"}, // /dev/pts/ptmx
		specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: ptr(int64(136)), Access: "rwm"},              // /dev/pts/*
	)
	if l.MemoryMB > 0 {
		limit := int64(l.MemoryMB) << 20
		if gvisor {
			limit = int64(sandbox.GVisorHostMemoryMB(l.MemoryMB)) << 20
		}
		r.Memory = &specs.LinuxMemory{Limit: &limit}
		if limitSwap {
			r.Memory.Swap = ptr(limit) // memory+swap = memory: no swap (cgroup v2: memory.swap.max 0)
		}
	}
	if l.Pids > 0 {
		n := int64(l.Pids)
		if gvisor {
			n = sandbox.GVisorHostTasks(l.Pids)
		}
		r.Pids = &specs.LinuxPids{Limit: ptr(n)}
	}
	if l.CPUs > 0 {
		quota := max(int64(l.CPUs*cpuPeriod), 1000)
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: ptr(uint64(cpuPeriod))}
	}
	return r
}

// devices are the device nodes in the sandbox's /dev (Docker's defaults, less the console).
func devices() []specs.LinuxDevice {
	mode := func() *os.FileMode { m := os.FileMode(0o666); return &m }
	zero := func() *uint32 { z := uint32(0); return &z }
	d := func(path string, major, minor int64) specs.LinuxDevice {
		return specs.LinuxDevice{Path: path, Type: "c", Major: major, Minor: minor, FileMode: mode(), UID: zero(), GID: zero()}
	}
	return []specs.LinuxDevice{
		d("/dev/null", 1, 3), d("/dev/zero", 1, 5), d("/dev/full", 1, 7),
		d("/dev/random", 1, 8), d("/dev/urandom", 1, 9), d("/dev/tty", 5, 0),
	}
}

func ptr[T any](v T) *T { return &v }

package runc

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/seccomp"
)

func testInput() specInput {
	return specInput{
		spec: sandbox.Spec{
			ID: "abc-1", Workspace: "/srv/ws/abc-1",
			Limits:     sandbox.Limits{MemoryMB: 512, CPUs: 1.5, Pids: 128, TmpMB: 100},
			Env:        map[string]string{"FOO": "bar", "LANG": "de_DE.UTF-8"},
			OrphanExit: 24 * time.Hour,
		},
		rootfs: "/state/rootfs", binds: []string{"/usr", "/etc/ssl"},
		guest: "/opt/cellbox", mplCache: "/var/cache/mpl", run: "/state/bundles/abc-1/run",
		uid: 1000, gid: 1000, limitSwap: true, goarch: "amd64", cgroups: DefaultCgroupParent,
	}
}

func mountAt(s *specs.Spec, dst string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dst {
			return &s.Mounts[i]
		}
	}
	return nil
}

func hasAll(have []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func TestSpecProcess(t *testing.T) {
	s := buildSpec(testInput())
	p := s.Process
	if p.User.UID != 0 || p.User.GID != 0 || len(p.User.AdditionalGids) != 0 {
		t.Errorf("user %+v, want the guest as 0:0 (with sandbox.GuestCapabilities only) and no other groups", p.User)
	}
	want := []string{guestPath, "guest", "--workspace", "/mnt/data", "--cgroup", "/sys/fs/cgroup",
		"--user-uid", "1000", "--user-gid", "1000",
		"--listen", "/.cellbox/run/guest.sock", "--token-file", "/.cellbox/run/token", "--mpl-cache", mplCachePath,
		"--egress-listen", "127.0.0.1:3128", "--orphan-exit", "24h0m0s", "--log", "/.cellbox/run/guest.log"}
	if !slices.Equal(p.Args, want) {
		t.Errorf("args %q, want %q", p.Args, want)
	}
	if !hasAll(p.Env, "HOME=/tmp", "FOO=bar", "LANG=de_DE.UTF-8", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") || len(p.Env) != 4 {
		t.Errorf("env %q", p.Env)
	}
	if p.Cwd != "/mnt/data" || p.Terminal {
		t.Errorf("cwd %q terminal %v", p.Cwd, p.Terminal)
	}
	c := p.Capabilities
	// The guest keeps what it needs to run user code under another uid, and nothing else:
	// user code is setuid'd from 0 to 1000, which clears its sets.
	wantCaps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"}
	if c == nil || !slices.Equal(c.Bounding, wantCaps) || !slices.Equal(c.Effective, wantCaps) ||
		!slices.Equal(c.Permitted, wantCaps) || c.Inheritable == nil || len(c.Inheritable)+len(c.Ambient) != 0 {
		t.Errorf("capabilities %+v, want %v bounding, effective and permitted, nothing else", c, wantCaps)
	}
	if !p.NoNewPrivileges {
		t.Error("no_new_privs is off")
	}
	limits := map[string]specs.POSIXRlimit{}
	for _, r := range p.Rlimits {
		limits[r.Type] = r
	}
	if r := limits["RLIMIT_CORE"]; r.Type == "" || r.Hard != 0 {
		t.Errorf("RLIMIT_CORE %+v, want 0", r)
	}
	if r := limits["RLIMIT_NOFILE"]; r.Soft == 0 || r.Hard > 65536 {
		t.Errorf("RLIMIT_NOFILE %+v", r)
	}

	in := testInput()
	in.mplCache = ""
	if args := buildSpec(in).Process.Args; slices.Contains(args, "--mpl-cache") {
		t.Errorf("args %q name an mpl cache that is not configured", args)
	}
}

func TestSpecNamespacesAndRoot(t *testing.T) {
	s := buildSpec(testInput())
	if s.Root == nil || !s.Root.Readonly || s.Root.Path != "/state/rootfs" {
		t.Errorf("root %+v, want the skeleton, read-only", s.Root)
	}
	if s.Hostname != "cellbox" {
		t.Errorf("hostname %q", s.Hostname)
	}
	var got []specs.LinuxNamespaceType
	for _, ns := range s.Linux.Namespaces {
		if ns.Path != "" {
			t.Errorf("namespace %s joins %s instead of being new", ns.Type, ns.Path)
		}
		got = append(got, ns.Type)
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace, specs.CgroupNamespace} {
		if !slices.Contains(got, want) {
			t.Errorf("no new %s namespace", want)
		}
	}
	if len(s.Linux.UIDMappings) != 0 || len(s.Linux.Sysctl) != 0 {
		t.Error("unexpected uid mappings or sysctls")
	}
	if s.Linux.CgroupsPath != "cellbox/abc-1" {
		t.Errorf("cgroups path %q", s.Linux.CgroupsPath)
	}
	if s.Version != ociVersion {
		t.Errorf("version %q", s.Version)
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/sys/firmware", "/proc/acpi", "/proc/scsi"} {
		if !slices.Contains(s.Linux.MaskedPaths, p) {
			t.Errorf("%s is not masked", p)
		}
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"} {
		if !slices.Contains(s.Linux.ReadonlyPaths, p) {
			t.Errorf("%s is not read-only", p)
		}
	}
}

func TestSpecMounts(t *testing.T) {
	s := buildSpec(testInput())
	type want struct {
		typ  string
		src  string
		opts []string
	}
	for dst, w := range map[string]want{
		"/proc":               {"proc", "", []string{"nosuid", "noexec", "nodev"}},
		"/dev":                {"tmpfs", "", []string{"nosuid"}},
		"/dev/pts":            {"devpts", "", []string{"newinstance"}},
		"/dev/shm":            {"tmpfs", "", []string{"nosuid", "nodev", "mode=1777", "size=65536k"}},
		"/sys":                {"sysfs", "", []string{"ro", "nosuid", "nodev", "noexec"}},
		"/sys/fs/cgroup":      {"cgroup", "", []string{"ro", "nosuid", "nodev", "noexec"}},
		"/tmp":                {"tmpfs", "", []string{"nosuid", "nodev", "size=100m", "mode=1777"}},
		"/mnt/data":           {"bind", "/srv/ws/abc-1", []string{"bind", "rw", "nosuid", "nodev"}},
		"/home/user":          {"bind", "/srv/ws/abc-1", []string{"bind", "rw", "nosuid", "nodev"}},
		"/usr":                {"bind", "/usr", []string{"bind", "ro", "nosuid", "nodev"}},
		"/etc/ssl":            {"bind", "/etc/ssl", []string{"bind", "ro", "nosuid", "nodev"}},
		guestPath:             {"bind", "/opt/cellbox", []string{"bind", "ro", "nosuid", "nodev"}},
		"/.cellbox/mpl-cache": {"bind", "/var/cache/mpl", []string{"bind", "ro", "nosuid", "nodev"}},
		"/.cellbox/run":       {"bind", "/state/bundles/abc-1/run", []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
	} {
		m := mountAt(s, dst)
		if m == nil {
			t.Errorf("no mount at %s", dst)
			continue
		}
		if m.Type != w.typ || (w.src != "" && m.Source != w.src) || !hasAll(m.Options, w.opts...) {
			t.Errorf("mount at %s: %+v, want type %s source %q options including %q", dst, m, w.typ, w.src, w.opts)
		}
	}
	// Nothing else of the host: every bind is one of the above.
	for _, m := range s.Mounts {
		if m.Type == "bind" && !slices.Contains([]string{"/srv/ws/abc-1", "/usr", "/etc/ssl", "/opt/cellbox", "/var/cache/mpl", "/state/bundles/abc-1/run"}, m.Source) {
			t.Errorf("unexpected bind of %s at %s", m.Source, m.Destination)
		}
		// The workspace (at both its names), and the guest's own run folder (0700, root's).
		if m.Type == "bind" && m.Source != "/srv/ws/abc-1" && m.Destination != sandbox.GuestRunDir && !slices.Contains(m.Options, "ro") {
			t.Errorf("bind at %s is writable", m.Destination)
		}
		if slices.Contains(m.Options, "rbind") {
			t.Errorf("recursive bind at %s", m.Destination)
		}
	}
	// The default /tmp size.
	in := testInput()
	in.spec.Limits.TmpMB = 0
	if m := mountAt(buildSpec(in), "/tmp"); !slices.Contains(m.Options, "size=256m") {
		t.Errorf("default /tmp options %q, want size=256m", m.Options)
	}
}

func TestSpecResources(t *testing.T) {
	r := buildSpec(testInput()).Linux.Resources
	if r.Memory == nil || *r.Memory.Limit != 512<<20 || r.Memory.Swap == nil || *r.Memory.Swap != 512<<20 {
		t.Errorf("memory %+v, want limit and memory+swap 512 MiB", r.Memory)
	}
	if r.Pids == nil || *r.Pids.Limit != 128 {
		t.Errorf("pids %+v", r.Pids)
	}
	if r.CPU == nil || *r.CPU.Quota != 150000 || *r.CPU.Period != 100000 {
		t.Errorf("cpu %+v, want 150000/100000", r.CPU)
	}
	if len(r.Devices) == 0 || r.Devices[0].Allow || r.Devices[0].Type != "" || r.Devices[0].Access != "rwm" {
		t.Errorf("device rules %+v, want deny-all first", r.Devices)
	}

	in := testInput()
	in.limitSwap = false
	if m := buildSpec(in).Linux.Resources.Memory; m.Swap != nil {
		t.Errorf("swap limit %d set without swap accounting", *m.Swap)
	}
	in.spec.Limits = sandbox.Limits{}
	r = buildSpec(in).Linux.Resources
	if r.Memory != nil || r.Pids != nil || r.CPU != nil {
		t.Errorf("zero limits gave %+v %+v %+v", r.Memory, r.Pids, r.CPU)
	}
}

func TestSpecDevices(t *testing.T) {
	var got []string
	for _, d := range buildSpec(testInput()).Linux.Devices {
		got = append(got, d.Path)
	}
	want := []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}
	if !slices.Equal(got, want) {
		t.Errorf("devices %q, want %q", got, want)
	}
}

func TestSpecSeccomp(t *testing.T) {
	sc := buildSpec(testInput()).Linux.Seccomp
	if sc == nil || sc.DefaultAction != specs.ActErrno {
		t.Fatalf("seccomp %+v, want default action errno", sc)
	}
	if !slices.Contains(sc.Architectures, specs.ArchX86_64) {
		t.Errorf("architectures %q", sc.Architectures)
	}
	allowed := map[string]bool{}
	for _, s := range sc.Syscalls {
		if s.Action == specs.ActAllow && len(s.Args) == 0 {
			for _, n := range s.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range []string{"read", "write", "openat", "execve", "mmap", "futex", "epoll_pwait", "wait4", "socket", "pidfd_open", "rt_sigaction", "exit_group"} {
		if !allowed[n] {
			t.Errorf("%s is not allowed", n)
		}
	}
	for _, n := range []string{"mount", "umount2", "pivot_root", "chroot", "ptrace", "process_vm_readv", "process_vm_writev",
		"kexec_load", "kexec_file_load", "bpf", "keyctl", "add_key", "request_key", "unshare", "setns", "userfaultfd",
		"perf_event_open", "open_by_handle_at", "name_to_handle_at", "init_module", "finit_module", "delete_module",
		"reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "iopl", "ioperm", "quotactl",
		"io_uring_setup", "fsopen", "fsmount", "move_mount", "open_tree", "pidfd_getfd", "kcmp", "syslog",
		"lookup_dcookie", "vm86", "clone3", "clone", "personality"} {
		if allowed[n] {
			t.Errorf("%s is allowed without conditions", n)
		}
	}
	var clone, clone3 bool
	for _, s := range sc.Syscalls {
		switch {
		case slices.Equal(s.Names, []string{"clone"}):
			clone = s.Action == specs.ActAllow && len(s.Args) == 1 && s.Args[0].Op == specs.OpMaskedEqual &&
				s.Args[0].Value == seccomp.CloneNamespaceFlags && s.Args[0].ValueTwo == 0
		case slices.Equal(s.Names, []string{"clone3"}):
			clone3 = s.Action == specs.ActErrno && s.ErrnoRet != nil && *s.ErrnoRet == 38
		}
	}
	if !clone {
		t.Error("clone is not allowed only without namespace flags")
	}
	if !clone3 {
		t.Error("clone3 does not fail with ENOSYS")
	}
}

// TestSpecGuestSeccomp: where the guest installs the filter itself, the spec has none and
// the guest is told where the program is, first; never under gVisor, whose sentry takes
// the spec's.
func TestSpecGuestSeccomp(t *testing.T) {
	in := testInput()
	in.guestSeccomp = true
	s := buildSpec(in)
	if s.Linux.Seccomp != nil {
		t.Error("the spec has a seccomp filter the guest installs itself")
	}
	if a := s.Process.Args; len(a) < 4 || a[1] != "guest" || a[2] != "--seccomp" || a[3] != sandbox.GuestRunDir+"/"+sandbox.GuestSeccomp {
		t.Errorf("args %q do not open with --seccomp and the run folder's program", a)
	}
	if !s.Process.NoNewPrivileges {
		t.Error("no no_new_privs: the guest could not install its filter")
	}
	in.gvisor = true
	s = buildSpec(in)
	if s.Linux.Seccomp == nil || slices.Contains(s.Process.Args, "--seccomp") {
		t.Errorf("under gVisor: spec filter %v, args %q; want the spec's filter alone", s.Linux.Seccomp != nil, s.Process.Args)
	}
}

// TestSpecGVisor: what differs under runsc, and nothing else.
func TestSpecGVisor(t *testing.T) {
	in := testInput()
	in.gvisor = true
	s := buildSpec(in)
	if slices.Contains(s.Process.Args, "--cgroup") {
		t.Errorf("args %q pass the guest a cgroup folder gVisor does not have", s.Process.Args)
	}
	if m := mountAt(s, "/dev/mqueue"); m != nil {
		t.Errorf("mount at /dev/mqueue under gVisor: %+v", m)
	}
	// The sentry's own cgroups, where the guest keeps the process limit: writable (for the
	// guest), in the root cgroup namespace (whose root's limits nsdelegate would keep).
	if m := mountAt(s, "/sys/fs/cgroup"); m == nil || m.Type != "cgroup" || slices.Contains(m.Options, "ro") {
		t.Errorf("cgroup mount under gVisor: %+v", m)
	}
	if slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.CgroupNamespace }) {
		t.Errorf("namespaces %+v: a cgroup namespace under gVisor", s.Linux.Namespaces)
	}
	if i := slices.Index(s.Process.Args, "--pids"); i < 0 || s.Process.Args[i+1] != strconv.Itoa(in.spec.Limits.Pids) {
		t.Errorf("args %q do not give the guest the process limit", s.Process.Args)
	}
	// The memory limit is the guest's; the host's is above it, a backstop.
	if i := slices.Index(s.Process.Args, "--memory-mb"); i < 0 || s.Process.Args[i+1] != strconv.Itoa(in.spec.Limits.MemoryMB) {
		t.Errorf("args %q do not give the guest the memory limit", s.Process.Args)
	}
	if m := s.Linux.Resources.Memory; m == nil || *m.Limit != int64(sandbox.GVisorHostMemoryMB(in.spec.Limits.MemoryMB))<<20 || *m.Limit <= int64(in.spec.Limits.MemoryMB)<<20 {
		t.Errorf("host memory limit %+v, want the sentry's room above %d MiB", m, in.spec.Limits.MemoryMB)
	}
	if r := s.Linux.Resources.Pids; r == nil || *r.Limit != 128*64+256 {
		t.Errorf("host pids limit %+v, want the sentry's room for 128 processes", r)
	}
	var clone3 bool
	for _, sc := range s.Linux.Seccomp.Syscalls {
		clone3 = clone3 || (slices.Equal(sc.Names, []string{"clone3"}) && sc.Action == specs.ActAllow)
	}
	if !clone3 {
		t.Error("clone3 is not allowed under gVisor (its seccomp answers EPERM, and libc does not fall back)")
	}

	// The rest is runc's spec.
	runc := buildSpec(testInput())
	if len(s.Mounts) != len(runc.Mounts)-1 || len(s.Linux.Namespaces) != len(runc.Linux.Namespaces)-1 ||
		!slices.Equal(s.Process.Capabilities.Bounding, runc.Process.Capabilities.Bounding) || !s.Process.NoNewPrivileges ||
		!slices.Equal(s.Linux.MaskedPaths, runc.Linux.MaskedPaths) || !slices.Equal(s.Process.Rlimits, runc.Process.Rlimits) ||
		slices.Contains(runc.Process.Args, "--memory-mb") || slices.Contains(runc.Process.Args, "--pids") {
		t.Error("the gVisor spec differs from runc's in more than mqueue, cgroups, the guest's memory and pids, and clone3")
	}
}

// imageInput is testInput in image mode, as Create makes it.
func imageInput(mplCache bool) specInput {
	in := testInput()
	in.rootfs, in.binds, in.etc = "/images/default/abc/rootfs", nil, "/state/rootfs/etc"
	in.mplCache, in.rootMPLCache = "", mplCache
	return in
}

// TestSpecImage: on an image's root, nothing of the host but the backend's own files, and
// the rest as in host mode.
func TestSpecImage(t *testing.T) {
	s := buildSpec(imageInput(true))
	if s.Root == nil || !s.Root.Readonly || s.Root.Path != "/images/default/abc/rootfs" {
		t.Errorf("root %+v, want the image's, read-only", s.Root)
	}
	binds := map[string]string{}
	for _, m := range s.Mounts {
		if m.Type == "bind" {
			binds[m.Destination] = m.Source
		}
	}
	want := map[string]string{
		"/etc/passwd": "/state/rootfs/etc/passwd", "/etc/group": "/state/rootfs/etc/group", "/etc/hosts": "/state/rootfs/etc/hosts",
		"/mnt/data": "/srv/ws/abc-1", "/home/user": "/srv/ws/abc-1", guestPath: "/opt/cellbox", sandbox.GuestRunDir: "/state/bundles/abc-1/run",
	}
	if !maps.Equal(binds, want) {
		t.Errorf("binds %v, want %v", binds, want)
	}
	for _, dst := range []string{"/etc/passwd", "/etc/group", "/etc/hosts"} {
		if m := mountAt(s, dst); m == nil || !hasAll(m.Options, "bind", "ro", "nosuid", "nodev") {
			t.Errorf("mount at %s: %+v, want a read-only bind", dst, m)
		}
	}
	// The image's own font cache, not the host's.
	wantArgs := slices.Clone(buildSpec(testInput()).Process.Args)
	if !slices.Equal(s.Process.Args, wantArgs) {
		t.Errorf("args %q, want %q", s.Process.Args, wantArgs)
	}
	if args := buildSpec(imageInput(false)).Process.Args; slices.Contains(args, "--mpl-cache") {
		t.Errorf("args %q name an mpl cache the image does not have", args)
	}

	// The rest is host mode's spec.
	host := buildSpec(testInput())
	var hostOther, imageOther []specs.Mount
	for _, m := range host.Mounts {
		if m.Type != "bind" {
			hostOther = append(hostOther, m)
		}
	}
	for _, m := range s.Mounts {
		if m.Type != "bind" {
			imageOther = append(imageOther, m)
		}
	}
	s.Process.Args, host.Process.Args = nil, nil
	if !reflect.DeepEqual(hostOther, imageOther) || !reflect.DeepEqual(s.Process, host.Process) ||
		!reflect.DeepEqual(s.Linux, host.Linux) || s.Hostname != host.Hostname {
		t.Error("the image's spec differs from host mode's in more than the root, the binds and the font cache")
	}
}

func TestSpecJSON(t *testing.T) {
	data, err := json.Marshal(buildSpec(testInput()))
	if err != nil {
		t.Fatal(err)
	}
	var back specs.Spec
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"noNewPrivileges":true`) || !strings.Contains(string(data), `"readonly":true`) {
		t.Errorf("spec JSON misses fields: %s", data)
	}
}

func TestBuildRootfs(t *testing.T) {
	for _, merged := range []bool{true, false} {
		t.Run(map[bool]string{true: "merged-usr", false: "split-usr"}[merged], func(t *testing.T) {
			host := t.TempDir()
			mk := func(p string) { os.MkdirAll(filepath.Join(host, p), 0o755) }
			write := func(p string) { os.WriteFile(filepath.Join(host, p), []byte("x"), 0o644) }
			mk("usr/bin")
			mk("usr/share/zoneinfo")
			if merged {
				os.Symlink("usr/bin", filepath.Join(host, "bin"))
				os.Symlink("usr/lib", filepath.Join(host, "lib"))
			} else {
				mk("bin")
				mk("lib")
			}
			mk("etc/alternatives")
			mk("etc/python3.11")
			mk("etc/ssl")
			write("etc/ld.so.cache")
			write("etc/matplotlibrc")
			write("etc/shadow")
			write("etc/passwd")
			os.Symlink("/usr/share/zoneinfo/UTC", filepath.Join(host, "etc/localtime"))
			old := hostRoot
			hostRoot = host
			defer func() { hostRoot = old }()

			dir := filepath.Join(t.TempDir(), "rootfs")
			binds, err := buildRootfs(dir, 1000, 1000)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"/usr", "/etc/ld.so.cache", "/etc/alternatives", "/etc/ssl", "/etc/matplotlibrc", "/etc/python3.11"}
			if !merged {
				want = append(want, "/bin", "/lib")
			}
			slices.Sort(want)
			slices.Sort(binds)
			if !slices.Equal(binds, want) {
				t.Errorf("binds %q, want %q", binds, want)
			}
			if merged {
				if target, err := os.Readlink(filepath.Join(dir, "bin")); err != nil || target != "usr/bin" {
					t.Errorf("bin: %q, %v; want a symlink to usr/bin", target, err)
				}
			}
			if target, _ := os.Readlink(filepath.Join(dir, "etc/localtime")); target != "/usr/share/zoneinfo/UTC" {
				t.Errorf("localtime -> %q", target)
			}
			if _, err := os.Stat(filepath.Join(dir, "etc/shadow")); err == nil {
				t.Error("shadow is in the skeleton")
			}
			passwd, _ := os.ReadFile(filepath.Join(dir, "etc/passwd"))
			if !strings.Contains(string(passwd), "user:x:1000:1000:user:/tmp:") {
				t.Errorf("passwd %q", passwd)
			}
			if fi, err := os.Stat(filepath.Join(dir, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
				t.Errorf("tmp mount point: %v, %v; want sticky and 0777", fi.Mode(), err)
			}
			for _, p := range []string{guestPath, "mnt/data", "proc", "dev", "sys", "etc/hosts", "etc/group"} {
				if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
					t.Errorf("skeleton lacks %s: %v", p, err)
				}
			}
			// Idempotent.
			if _, err := buildRootfs(dir, 1000, 1000); err != nil {
				t.Errorf("second build: %v", err)
			}
		})
	}
}

func TestRuntimeMessage(t *testing.T) {
	for in, want := range map[string]string{
		`time="2026-01-01T00:00:00Z" level=error msg="runc run failed: container with id exists: x"` + "\n": "runc run failed: container with id exists: x",
		"some warning\nunknown version specified\n":                                                         "unknown version specified",
		"":                                    "no error message",
		`level=error msg="a \"quoted\" word"`: `a "quoted" word`,
	} {
		if got := runtimeMessage([]byte(in)); got != want {
			t.Errorf("runtimeMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestArgv(t *testing.T) {
	b := &Backend{root: "/state/runtime"}
	if got, want := b.argv("run", "x"), []string{"--root", "/state/runtime", "run", "x"}; !slices.Equal(got, want) {
		t.Errorf("runc argv %q, want %q", got, want)
	}
	b.gvisor, b.platform = true, PlatformSystrap
	// Global flags go before the subcommand.
	want := []string{"--root", "/state/runtime", "--network=none", "--oci-seccomp", "--host-uds=create", "--platform=systrap", "--in-sandbox-cgroup=v2", "kill", "x", "KILL"}
	if got := b.argv("kill", "x", "KILL"); !slices.Equal(got, want) {
		t.Errorf("runsc argv %q, want %q", got, want)
	}
}

func TestCheckCgroupParent(t *testing.T) {
	for _, p := range []string{"cellbox", "/cellbox", "/kubepods/cellbox", "a/b-c_d.e"} {
		if err := CheckCgroupParent(p); err != nil {
			t.Errorf("CheckCgroupParent(%q) = %v; want nil", p, err)
		}
	}
	for _, p := range []string{"", "/", "//", "/a/../b", "../x", "a/", "a//b", "./a", "/a/./b", "a b", "a\nb", "a:b", "a,b", strings.Repeat("a", 257)} {
		if err := CheckCgroupParent(p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CheckCgroupParent(%q) = %v; want invalid", p, err)
		}
	}
	in := testInput()
	in.cgroups = "/cellbox"
	if s := buildSpec(in); s.Linux.CgroupsPath != "/cellbox/abc-1" {
		t.Errorf("cgroups path %q with parent /cellbox; want /cellbox/abc-1", s.Linux.CgroupsPath)
	}
}

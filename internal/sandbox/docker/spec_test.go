package docker

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox"
)

func testInput() specInput {
	return specInput{
		spec: sandbox.Spec{ID: "s1", Workspace: "/ws/s1", Image: "default", Env: map[string]string{"A": "1"},
			Limits: sandbox.Limits{MemoryMB: 512, CPUs: 0.5, Pids: 100, TmpMB: 32}, OrphanExit: time.Hour},
		name: "cellbox-srv-s1", image: "sha256:abc", server: "srv", guest: "/bin/cellbox",
		token: "t0k", etc: "/state/etc", uid: 1000, gid: 1000, goarch: "arm64",
	}
}

func TestContainerSpec(t *testing.T) {
	cfg, host, err := containerSpec(testInput())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "0:0" || cfg.Image != "sha256:abc" || cfg.Hostname != sandbox.Hostname {
		t.Errorf("user %q image %q hostname %q", cfg.User, cfg.Image, cfg.Hostname)
	}
	if cfg.Labels[labelSession] != "s1" || cfg.Labels[labelServer] != "srv" {
		t.Errorf("labels %v", cfg.Labels)
	}
	args := strings.Join(cfg.Cmd, " ")
	for _, want := range []string{image.GuestPath + " guest ", "--cgroup /sys/fs/cgroup", "--user-uid 1000 --user-gid 1000",
		"--listen /.cellbox/run/guest.sock --token-env " + tokenEnv, "--orphan-exit 1h0m0s"} {
		if !strings.Contains(args, want) {
			t.Errorf("command %q lacks %q", args, want)
		}
	}
	if strings.Contains(args, "--mpl-cache") {
		t.Errorf("command %q has a font cache the image does not", args)
	}
	if !slices.Contains(cfg.Env, "A=1") || !slices.Contains(cfg.Env, "HOME=/tmp") || !slices.Contains(cfg.Env, tokenEnv+"=t0k") {
		t.Errorf("env %v", cfg.Env)
	}
	if host.NetworkMode != "none" || !host.ReadonlyRootfs || host.Privileged {
		t.Errorf("network %q, read-only root %v, privileged %v", host.NetworkMode, host.ReadonlyRootfs, host.Privileged)
	}
	if !slices.Equal(host.CapDrop, []string{"ALL"}) || !slices.Equal(host.CapAdd, []string{"CHOWN", "DAC_OVERRIDE", "KILL", "SETGID", "SETUID"}) {
		t.Errorf("caps drop %v add %v", host.CapDrop, host.CapAdd)
	}
	var profile specs.LinuxSeccomp
	var nnp bool
	for _, o := range host.SecurityOpt {
		if o == "no-new-privileges" {
			nnp = true
		}
		if p, ok := strings.CutPrefix(o, "seccomp="); ok {
			if err := json.Unmarshal([]byte(p), &profile); err != nil {
				t.Fatalf("seccomp profile: %v", err)
			}
		}
	}
	if !slices.Equal(profile.Architectures, []specs.Arch{specs.ArchAARCH64, specs.ArchARM}) {
		t.Errorf("seccomp architectures %v, want the engine's (arm64)", profile.Architectures)
	}
	if !nnp || profile.DefaultAction != specs.ActErrno || len(profile.Syscalls) == 0 {
		t.Errorf("no-new-privileges %v, seccomp default %q with %d rules", nnp, profile.DefaultAction, len(profile.Syscalls))
	}
	if got := host.Tmpfs["/tmp"]; !strings.Contains(got, "size=32m") || !strings.Contains(got, "nosuid") || !strings.Contains(got, ",exec,") {
		t.Errorf("tmpfs /tmp %q", got)
	}
	// The guest's socket is in the container only, root's alone: no host folder, whose
	// owner might be the uid user code runs as.
	if got := host.Tmpfs[sandbox.GuestRunDir]; !strings.Contains(got, "mode=700") || !strings.Contains(got, "noexec") {
		t.Errorf("tmpfs %s %q", sandbox.GuestRunDir, got)
	}
	r := host.Resources
	if r.Memory != 512<<20 || r.MemorySwap != r.Memory || r.NanoCPUs != 5e8 || r.PidsLimit == nil || *r.PidsLimit != 100 {
		t.Errorf("resources: memory %d swap %d cpus %d pids %v", r.Memory, r.MemorySwap, r.NanoCPUs, r.PidsLimit)
	}
	mounts := map[string]string{}
	for _, m := range host.Mounts {
		ro := "rw"
		if m.ReadOnly {
			ro = "ro"
		}
		mounts[m.Target] = m.Source + " " + ro
	}
	for target, want := range map[string]string{
		"/mnt/data": "/ws/s1 rw", "/home/user": "/ws/s1 rw", image.GuestPath: "/bin/cellbox ro",
		"/etc/passwd": "/state/etc/passwd ro",
		"/etc/hosts":  "/state/etc/hosts ro", "/etc/resolv.conf": "/state/etc/resolv.conf ro",
	} {
		if mounts[target] != want {
			t.Errorf("mount at %s: %q, want %q", target, mounts[target], want)
		}
	}
	if len(mounts) != 7 {
		t.Errorf("%d mounts, want 7: %v", len(mounts), mounts)
	}
	if !slices.Contains(host.MaskedPaths, "/proc/kcore") || !slices.Contains(host.ReadonlyPaths, "/proc/sys") {
		t.Errorf("masked %v read-only %v", host.MaskedPaths, host.ReadonlyPaths)
	}
}

func TestContainerSpecGVisorAndFontCache(t *testing.T) {
	in := testInput()
	in.gvisor, in.runtime, in.mplCache = true, "runsc", true
	cfg, host, err := containerSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(cfg.Cmd, " ")
	if strings.Contains(args, "--cgroup") || !strings.Contains(args, "--mpl-cache "+image.MPLCachePath) {
		t.Errorf("command %q: want no cgroup, the image's font cache", args)
	}
	if host.Runtime != "runsc" {
		t.Errorf("runtime %q", host.Runtime)
	}
	r := host.Resources
	// The memory limit is the guest's; the engine's is above it, a backstop.
	mb := in.spec.Limits.MemoryMB
	if !strings.Contains(args, fmt.Sprintf("--memory-mb %d", mb)) || r.Memory != int64(sandbox.GVisorHostMemoryMB(mb))<<20 || r.Memory <= int64(mb)<<20 || r.MemorySwap != r.Memory {
		t.Errorf("command %q, engine memory %d swap %d: want the guest to keep %d MiB, the engine more", args, r.Memory, r.MemorySwap, mb)
	}
	if *r.PidsLimit != sandbox.GVisorHostTasks(100) {
		t.Errorf("host pids %d", *r.PidsLimit)
	}
	var nproc int64
	for _, u := range r.Ulimits {
		if u.Name == "nproc" {
			nproc = u.Hard
		}
	}
	if nproc != 99 {
		t.Errorf("nproc %d, want 99", nproc)
	}
}

// TestWriteTar: what an image's import carries: files with owners and modes, links, hard
// links once, and the mount points' folders without their contents.
func TestWriteTar(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "proc/1"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("binary"), 0o755))
	must(os.Chmod(filepath.Join(root, "usr/bin/tool"), 0o755|os.ModeSetuid))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool2")))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.WriteFile(filepath.Join(root, "proc/1/status"), []byte("x"), 0o644))
	var buf bytes.Buffer
	must(writeTar(&buf, root))
	tr := tar.NewReader(&buf)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(err)
		data, _ := io.ReadAll(tr)
		got[h.Name] = string(rune(h.Typeflag)) + " " + h.Linkname + " " + string(data)
		if h.Name == "usr/bin/tool" && h.Mode&0o4000 == 0 {
			t.Errorf("tool lost its setuid bit: %o", h.Mode)
		}
	}
	want := map[string]string{
		"usr/": "5  ", "usr/bin/": "5  ", "usr/bin/tool": "0  binary", "usr/bin/tool2": "1 usr/bin/tool ",
		"bin": "2 usr/bin ", "proc/": "5  ",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("entries %v", got)
	}
}

// Package sandbox defines how cellbox starts, reaches and stops sandboxes: the Backend and
// Sandbox interfaces every backend (runc, local-unsafe, ...) implements, and the Spec they
// are given.
//
// A backend does little: it creates an isolated place, starts the guest binary there as
// process 1 with the workspace at /mnt/data, and hands back a byte stream to the guest
// (its stdin/stdout, or a socket a later server process can attach to again). Kernels, commands and files are the guest's work (package guest), not the
// backend's. Not for: workspace folders and quotas (package workspace) or sessions.
package sandbox

import (
	"context"
	"io"
	"strconv"
	"time"
)

// Limits bound one sandbox. Zero fields mean "no limit" to a backend; the session layer
// fills in defaults before a Spec reaches a backend.
type Limits struct {
	MemoryMB int
	CPUs     float64
	Pids     int
	TmpMB    int
}

// Spec says what sandbox to create.
type Spec struct {
	// ID names the sandbox: [a-z0-9-], unique among live sandboxes of this server.
	ID string
	// Workspace is the host folder that appears as /mnt/data inside. It already exists.
	Workspace string
	Limits    Limits
	// Image names the image (package image) the sandbox runs on; "" is the backend's own
	// root: the host's system folders for runc's host mode, the process's own for
	// local-unsafe. A backend without such an image fails with errdefs.ErrNotFound and a
	// message that names the command that builds it; one that runs on no image (runc in
	// host mode, local-unsafe) refuses a name with errdefs.ErrInvalidArgument.
	Image string
	// Env is the guest's own environment (the kernel's comes later, over the protocol).
	// Without Capabilities.GuestProcPrivate user code can read it: no secrets here.
	Env map[string]string
	// OrphanExit: a sandbox that outlives its server process (Capabilities.Reattach) stops
	// by itself once no server has been attached to it for this long; 0: never.
	OrphanExit time.Duration
	// Checkpointable: the sandbox must be one that Checkpointer.Checkpoint can write to
	// disk (runc: in a user namespace of its own, its kernels started in it rather than
	// forked from a template). A backend whose sandboxes all are (gVisor) ignores it; one
	// that cannot make any (Capabilities.Checkpoint "") starts an ordinary sandbox.
	Checkpointable bool
}

// Checkpointer is a Sandbox that can be written to disk, to be brought back by the backend's
// Restorer later, on this server process or another on the same state folder.
type Checkpointer interface {
	// Checkpoint writes the sandbox (its processes, their memory, the guest) into dir, an
	// empty folder the caller owns, and then stops it as Stop does, or, with keep, keeps
	// it frozen: nothing in it runs, from before the checkpoint until Thaw (meanwhile the
	// caller may copy its workspace as the checkpoint saw it). The guest must have been
	// readied first (guestproto's Checkpoint): the connection is closed then, and Conn is
	// of no use after Checkpoint. errors.ErrUnsupported: this sandbox cannot be
	// checkpointed (see Spec.Checkpointable). After any other error the sandbox runs on
	// (not frozen), and Conn is a new connection to its guest.
	Checkpoint(ctx context.Context, dir string, keep bool) error
	// Thaw lets a sandbox that Checkpoint kept go on: its guest listens again, and Conn is
	// a new connection to it.
	Thaw(ctx context.Context) error
	// Abandon tells a guest that was readied for a checkpoint that none comes: it listens
	// again, and Conn is a new connection to it.
	Abandon(ctx context.Context) error
}

// Restorer is a Backend that brings back checkpoints.
type Restorer interface {
	// Restore starts sandbox spec.ID from the checkpoint in dir (Checkpointer), on
	// spec.Workspace (the checkpoint's own workspace, or a copy of it) with spec.Limits.
	// spec.Image is the checkpoint's: a checkpoint runs on the image build it was taken on.
	// The checkpoint stays in dir and may be restored again (a fork). A checkpoint that is
	// missing, damaged or not this backend's, or whose image build is gone, fails with
	// errdefs.ErrFailedPrecondition (it will not restore, however often tried); a runtime
	// that failed otherwise, with errdefs.ErrUnavailable.
	Restore(ctx context.Context, spec Spec, dir string) (Sandbox, error)
}

// Sandbox is one running sandbox.
type Sandbox interface {
	ID() string
	// Conn is the byte stream to the guest (its stdin and stdout, or a socket), ready for
	// guestproto.Dial.
	Conn() io.ReadWriteCloser
	// GuestWorkspace is the workspace path as the guest sees it (/mnt/data when isolated).
	GuestWorkspace() string
	// Done is closed when the sandbox's process 1 has exited.
	Done() <-chan struct{}
	// Stop kills everything in the sandbox and releases what the backend holds for it
	// (not the workspace). It is idempotent and safe to call concurrently.
	Stop(ctx context.Context) error
	// Detach lets go of the sandbox without stopping it: the connection closes, and the
	// sandbox runs on for a later Backend.Attach, by this server process or the next. A
	// backend that cannot re-attach stops it instead.
	Detach() error
}

// Updater is a Sandbox whose memory, CPU and process limits can change while it runs: a
// warm sandbox takes the limits of the session that takes it. Limits.TmpMB cannot change.
// errors.ErrUnsupported: this sandbox cannot (the caller starts a new one instead).
type Updater interface {
	Update(ctx context.Context, l Limits) error
}

// Capabilities says what a backend enforces, so tests and operators know what to expect.
type Capabilities struct {
	// Isolated: own mount, pid, network, ipc and uts namespaces, non-root, no capabilities.
	Isolated bool
	// Limits: memory, pids and CPU limits are enforced.
	Limits bool
	// NoNetwork: the sandbox has no network interface but loopback.
	NoNetwork bool
	// GuestProtected: user code runs under a uid other than the guest's, and can neither
	// signal the guest, nor read or write its memory, nor open its descriptors, nor reach
	// its control channel.
	GuestProtected bool
	// GuestProcPrivate: user code cannot list the guest's descriptors, nor read its
	// environment or memory map (/proc/<guest>/fd, environ, maps) either. Where it can
	// (gVisor), nothing secret may be in the guest's environment (Spec.Env).
	GuestProcPrivate bool
	// OOMReported: code past the memory limit is killed alone, reported as oom, and the
	// sandbox goes on. Without it the whole sandbox may end instead (gVisor: the host
	// kills the sentry), which the session layer reports as crashed.
	OOMReported bool
	// CPUClock: CPU clocks inside (process_time, /proc/<pid>/stat) count the CPU a process
	// got, not the time it was throttled (gVisor's count both).
	CPUClock bool
	// HostProcesses: the sandbox's processes are host processes, in the host's /proc
	// (gVisor's live inside its sentry).
	HostProcesses bool
	// Reattach: sandboxes outlive the server process, and Attach finds them again.
	Reattach bool
	// LimitsChange: its sandboxes are Updaters whose memory, CPU and process limits change
	// while they run. Without it Update, where there is one, is errors.ErrUnsupported.
	LimitsChange bool
	// Checkpoint names how the backend checkpoints sandboxes (Checkpointer, Restorer):
	// "criu" or "gvisor"; "": it cannot, and CheckpointMissing says why.
	Checkpoint        string
	CheckpointMissing string
}

// GuestCapabilities are the guest's capabilities, and all the sandbox has (the bounding set): to
// start user code under its own uid (SETUID, SETGID), to stop it (KILL), and to create
// workspace files on its behalf and give them to it (DAC_OVERRIDE, CHOWN). The guest is
// uid 0 in the sandbox, so it keeps them across its own execve. User code gets none: it is
// started by setuid from 0 to a non-zero uid, which clears every set, and no_new_privs
// forbids regaining any through execve. The guest is not one of the user's uid: user code
// can neither signal it nor read its /proc files.
var GuestCapabilities = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"}

// KeepNone is a Cleanup keep that keeps nothing.
func KeepNone(string) bool { return false }

// Backend creates sandboxes.
type Backend interface {
	Name() string
	Capabilities() Capabilities
	// Create starts a sandbox whose guest is ready to be dialed over Conn.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Attach connects to the running sandbox id that an earlier server process created (or
	// this one detached); its Conn is a new connection to the same guest. It fails with
	// errdefs.ErrNotFound when there is no such sandbox, or no usable one: a sandbox that
	// is there but dead or unreachable is stopped and removed, never left running. When
	// the backend cannot tell (its runtime failed), the error is errdefs.ErrUnavailable
	// and the sandbox is left as it is. ErrUnsupported: the backend cannot re-attach.
	Attach(ctx context.Context, id string) (Sandbox, error)
	// Cleanup stops and removes the sandboxes an earlier run of this server left behind,
	// except those keep says to keep (keep may be nil).
	Cleanup(ctx context.Context, keep func(id string) bool) error
}

// Hostname is every sandbox's host name.
const Hostname = "cellbox"

// EtcFiles are the /etc files every backend gives a sandbox, by path below /etc: the
// accounts of root, the user code's uid and gid, and nobody; and the hosts file.
func EtcFiles(uid, gid int) map[string]string {
	u, g := strconv.Itoa(uid), strconv.Itoa(gid)
	return map[string]string{
		"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			"user:x:" + u + ":" + g + ":user:/tmp:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group": "root:x:0:\nuser:x:" + g + ":\nnogroup:x:65534:\n",
		"hosts": "127.0.0.1\tlocalhost " + Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
}

// GVisorHostMemoryMB is the host's memory limit (the cgroup's) of a gVisor sandbox whose
// own limit is mb. gVisor's sentry has no OOM killer of its own, and the host's kills the
// sentry, ending the sandbox: the guest keeps user code under mb itself
// (GuestCommand.MemoryMB), and the host's limit sits above it, with room for the sentry's
// own memory (its heap, page tables: some 40 MiB idle) and for what a fast allocation
// takes past mb before the guest's next look. It stays a backstop.
func GVisorHostMemoryMB(mb int) int {
	return mb + max(mb/4, 256)
}

// GVisorHostTasks is the host's pids limit (the cgroup's) of a gVisor sandbox whose own
// limit is pids. The host's count holds gVisor's sentry, its gofer and, on the ptrace
// platform, a stub process per address space with a stub thread for every sentry thread
// that ran it: some 30 host tasks per process of the sandbox (measured: 75 for a shell
// alone, 2,400 after a fork bomb under a limit of 64), so pids itself would not let even a
// shell boot. The sandbox's own limit is inside: the guest's, in the sentry's cgroup2
// hierarchy (GuestCommand.Pids), or RLIMIT_NPROC under the docker backend; the host's is a
// backstop, and hitting it kills the sentry and so the whole sandbox.
func GVisorHostTasks(pids int) int64 {
	const perProcess, base = 64, 256
	return int64(pids)*perProcess + base
}

// Package sandbox defines how cellbox starts, reaches and stops sandboxes: the Backend and
// Sandbox interfaces every backend (runc, local-unsafe, ...) implements, and the Spec they
// are given.
//
// A backend does little: it creates an isolated place, starts the guest binary there as
// process 1 with the workspace at /mnt/data, and hands back a byte stream to the guest's
// stdin/stdout. Kernels, commands and files are the guest's work (package guest), not the
// backend's. Not for: workspace folders and quotas (package workspace) or sessions.
package sandbox

import (
	"context"
	"io"
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
	// Env is the guest's own environment (the kernel's comes later, over the protocol).
	// Without Capabilities.GuestProcPrivate user code can read it: no secrets here.
	Env map[string]string
}

// Sandbox is one running sandbox.
type Sandbox interface {
	ID() string
	// Conn is the byte stream to the guest: writes go to its stdin, reads come from its stdout.
	Conn() io.ReadWriteCloser
	// GuestWorkspace is the workspace path as the guest sees it (/mnt/data when isolated).
	GuestWorkspace() string
	// Done is closed when the sandbox's process 1 has exited.
	Done() <-chan struct{}
	// Stop kills everything in the sandbox and releases what the backend holds for it
	// (not the workspace). It is idempotent and safe to call concurrently.
	Stop(ctx context.Context) error
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
}

// Backend creates sandboxes.
type Backend interface {
	Name() string
	Capabilities() Capabilities
	// Create starts a sandbox whose guest is ready to be dialed over Conn.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Cleanup stops and removes sandboxes an earlier run of this server left behind.
	Cleanup(ctx context.Context) error
}

package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Where a re-attachable guest (runc's, docker's) keeps its socket and token, inside the
// sandbox: a folder only the guest's uid may enter, bound from the backend's state.
const (
	GuestRunDir = "/.cellbox/run"
	GuestSocket = "guest.sock"
	GuestToken  = "token"
	// GuestSeccomp is the seccomp program the guest installs on itself (GuestCommand.Seccomp),
	// written by the backend: struct sock_filter entries in the machine's byte order.
	GuestSeccomp = "seccomp.bpf"
)

// MaskedPaths are hidden in every sandbox (an empty file or folder over them), and
// ReadonlyPaths read-only: the /proc and /sys files that tell of, or change, the host.
var (
	MaskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
		"/proc/timer_stats", "/sys/devices/virtual/powercap", "/sys/firmware",
	}
	ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// DefaultTmpMB is the size of /tmp when Limits.TmpMB is 0.
const DefaultTmpMB = 256

// TmpSize is the size of /tmp in MiB.
func (l Limits) TmpSize() int {
	if l.TmpMB > 0 {
		return l.TmpMB
	}
	return DefaultTmpMB
}

// GuestCommand is how a backend starts a guest that listens on GuestRunDir's socket.
type GuestCommand struct {
	Binary string // the guest binary, inside
	Cgroup string // the sandbox's own cgroup folder, inside; "": none (gVisor)
	// MemoryMB, not 0 under gVisor only: the guest keeps user code under this limit itself
	// (the host's OOM kill would end the whole sandbox; see GVisorHostMemoryMB).
	MemoryMB int
	// Pids, not 0 under gVisor only: the guest keeps user code's processes and threads
	// under this limit itself, in the sandbox's cgroup of the sentry's own cgroup2
	// hierarchy, mounted at /sys/fs/cgroup; the host's pids cgroup counts the sentry's
	// threads instead.
	Pids       int
	MPLCache   string // matplotlib's font cache, inside; "": none
	UID, GID   int    // user code's
	OrphanExit time.Duration
	// TokenEnv: the guest reads its attach token from this variable of its environment
	// (and unsets it); "": from GuestRunDir's token file.
	TokenEnv string
	// Template is the kernel template's socket, inside; "": none.
	Template string
	// Egress is where the guest serves the egress proxy, on the sandbox's own loopback
	// (guestproto.EgressListen); "": none.
	Egress string
	// Log is the file inside that the guest logs to (GuestLog); "": its stderr.
	Log string
	// Seccomp is a file inside holding a seccomp program (GuestSeccomp) that the guest
	// installs on all its threads before anything else, and exits if it cannot; "": the
	// runtime installs the filter (or none).
	Seccomp string
}

// GuestLog is the guest's own log file in GuestRunDir, when GuestCommand.Log names it: a
// file opened inside, which a checkpoint takes along (a runtime's stdio is the host's).
const GuestLog = "guest.log"

// Args is the guest's command line.
func (g GuestCommand) Args() []string {
	args := []string{g.Binary, "guest"}
	if g.Seccomp != "" {
		args = append(args, "--seccomp", g.Seccomp)
	}
	args = append(args, "--workspace", api.WorkspaceDir)
	if g.Cgroup != "" {
		args = append(args, "--cgroup", g.Cgroup)
	}
	if g.MemoryMB > 0 {
		args = append(args, "--memory-mb", strconv.Itoa(g.MemoryMB))
	}
	if g.Pids > 0 {
		args = append(args, "--pids", strconv.Itoa(g.Pids))
	}
	args = append(args, "--user-uid", strconv.Itoa(g.UID), "--user-gid", strconv.Itoa(g.GID), "--listen", GuestRunDir+"/"+GuestSocket)
	if g.TokenEnv != "" {
		args = append(args, "--token-env", g.TokenEnv)
	} else {
		args = append(args, "--token-file", GuestRunDir+"/"+GuestToken)
	}
	if g.MPLCache != "" {
		args = append(args, "--mpl-cache", g.MPLCache)
	}
	if g.Template != "" {
		args = append(args, "--template", g.Template)
	}
	if g.Egress != "" {
		args = append(args, "--egress-listen", g.Egress)
	}
	if g.OrphanExit > 0 {
		args = append(args, "--orphan-exit", g.OrphanExit.String())
	}
	if g.Log != "" {
		args = append(args, "--log", g.Log)
	}
	return args
}

// GuestEnv is the guest's environment: a PATH, HOME and LANG, then env (Spec.Env), as
// sorted KEY=VALUE.
func GuestEnv(env map[string]string) []string {
	all := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
	maps.Copy(all, env)
	var list []string
	for _, k := range slices.Sorted(maps.Keys(all)) {
		list = append(list, k+"="+all[k])
	}
	return list
}

// Live is a backend's sandboxes that it holds (created or attached, and not yet stopped or
// detached), by id. The zero value is ready.
type Live[S comparable] struct {
	mu sync.Mutex
	m  map[string]S
}

// Add adds s as id, unless id is held already: then it reports false.
func (l *Live[S]) Add(id string, s S) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[id]; ok {
		return false
	}
	if l.m == nil {
		l.m = map[string]S{}
	}
	l.m[id] = s
	return true
}

// Forget drops id if it is s (and not another sandbox that took the id since).
func (l *Live[S]) Forget(id string, s S) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.m[id]; ok && cur == s {
		delete(l.m, id)
	}
}

// Has reports whether id is held.
func (l *Live[S]) Has(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.m[id]
	return ok
}

// RemoveLeftovers removes the entries of dir (one per sandbox id) that live does not hold
// and keep does not name: what an earlier server process left behind.
func RemoveLeftovers[S comparable](dir string, live *Live[S], keep func(id string) bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !live.Has(e.Name()) && !keep(e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

var validID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// CheckID says why id cannot name a sandbox (1 to 63 of [a-z0-9-], not starting with -),
// or nil.
func CheckID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("sandbox id %q: want 1 to 63 of [a-z0-9-]: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// NewToken is a re-attachable guest's attach token: 32 random bytes, in hex.
func NewToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return hex.EncodeToString(b[:])
}

// Package seccomp is the sandbox's seccomp filter, the same for every backend that runs
// sandboxes on the host's kernel or gVisor's (runc writes it into the OCI spec, docker
// hands it to the engine as a profile): an allow-list of what ordinary programs need.
//
// Not for: capabilities, namespaces or the rest of a sandbox's spec (the backends).
package seccomp

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// allowedSyscalls is the seccomp allow-list: what ordinary programs (Python and its native
// libraries, a shell, coreutils, the Go guest) need. Docker's default profile is the
// reference; this list is narrower. Everything else fails with EPERM, notably: mount and
// the new mount API, umount, pivot_root, chroot, swapon/off, reboot, kexec_*, *_module,
// bpf, perf_event_open, userfaultfd, keyctl, add_key, request_key, unshare, setns, clone3,
// ptrace, process_vm_*, pidfd_getfd, kcmp, open_by_handle_at, name_to_handle_at, io_uring_*,
// iopl, ioperm, quotactl, acct, settimeofday, clock_settime, lookup_dcookie, fanotify_init,
// move_pages, migrate_pages, vm86 and syslog.
// Names a kernel or libseccomp does not know are skipped by the runtime.
var allowedSyscalls = []string{
	"accept", "accept4", "access", "adjtimex", "alarm", "arch_prctl",
	"bind", "brk",
	"capget", "capset", "chdir", "chmod", "chown", "chown32",
	"clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64",
	"clock_nanosleep", "clock_nanosleep_time64", "close", "close_range", "connect",
	"copy_file_range", "creat",
	"dup", "dup2", "dup3",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
	"epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "execve",
	"execveat", "exit", "exit_group",
	"faccessat", "faccessat2", "fadvise64", "fadvise64_64", "fallocate", "fchdir", "fchmod",
	"fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat", "fcntl", "fcntl64",
	"fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr", "fsetxattr",
	"fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate",
	"ftruncate64", "futex", "futex_time64", "futex_waitv", "futimesat",
	"getcpu", "getcwd", "get_mempolicy", "getdents", "getdents64", "getegid", "getegid32", "geteuid",
	"geteuid32", "getgid", "getgid32", "getgroups", "getgroups32", "getitimer",
	"getpeername", "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom",
	"getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit", "get_robust_list",
	"getrusage", "getsid", "getsockname", "getsockopt", "get_thread_area", "gettid",
	"gettimeofday", "getuid", "getuid32", "getxattr",
	"inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "io_cancel",
	"ioctl", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
	"ioprio_get", "ioprio_set", "io_setup", "io_submit", "ipc",
	"kill",
	"lchown", "lchown32", "lgetxattr", "link", "linkat", "listen", "listxattr",
	"llistxattr", "_llseek", "lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64",
	"madvise", "mbind", "membarrier", "memfd_create", "mincore", "mkdir", "mkdirat", "mknod",
	"mknodat", "mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mq_getsetattr",
	"mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend",
	"mq_timedsend_time64", "mq_unlink", "mremap", "msgctl", "msgget", "msgrcv", "msgsnd",
	"msync", "munlock", "munlockall", "munmap",
	"nanosleep", "newfstatat", "_newselect",
	"open", "openat", "openat2",
	"pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free",
	"pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl", "pread64", "preadv",
	"preadv2", "prlimit64", "pselect6", "pselect6_time64", "pwrite64", "pwritev",
	"pwritev2",
	"read", "readahead", "readlink", "readlinkat", "readv", "recv", "recvfrom", "recvmmsg",
	"recvmmsg_time64", "recvmsg", "remap_file_pages", "removexattr", "rename", "renameat",
	"renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction", "rt_sigpending",
	"rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
	"rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo",
	"sched_getaffinity", "sched_getattr", "sched_getparam", "sched_get_priority_max",
	"sched_get_priority_min", "sched_getscheduler", "sched_rr_get_interval",
	"sched_rr_get_interval_time64", "sched_setaffinity", "sched_setattr",
	"sched_setparam", "sched_setscheduler", "sched_yield", "seccomp", "select", "semctl",
	"semget", "semop", "semtimedop", "semtimedop_time64", "send", "sendfile", "sendfile64",
	"sendmmsg", "sendmsg", "sendto", "setfsgid", "setfsgid32", "setfsuid", "setfsuid32",
	"setgid", "setgid32", "setgroups", "setgroups32", "setitimer", "set_mempolicy", "set_mempolicy_home_node", "setpgid",
	"setpriority", "setregid", "setregid32", "setresgid", "setresgid32", "setresuid",
	"setresuid32", "setreuid", "setreuid32", "setrlimit", "set_robust_list", "setsid",
	"setsockopt", "set_thread_area", "set_tid_address", "setuid", "setuid32", "setxattr",
	"shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd",
	"signalfd4", "sigprocmask", "sigreturn", "socket", "socketcall", "socketpair",
	"splice", "stat", "stat64", "statfs", "statfs64", "statx", "symlink", "symlinkat",
	"sync", "sync_file_range", "syncfs", "sysinfo",
	"tee", "tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun",
	"timer_gettime", "timer_gettime64", "timer_settime", "timer_settime64",
	"timerfd_create", "timerfd_gettime", "timerfd_gettime64", "timerfd_settime",
	"timerfd_settime64", "times", "tkill", "truncate", "truncate64",
	"ugetrlimit", "umask", "uname", "unlink", "unlinkat", "utime", "utimensat",
	"utimensat_time64", "utimes",
	"vfork",
	"wait4", "waitid", "waitpid", "write", "writev",
	// arm and arm64 only.
	"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint",
	"cacheflush", "set_tls",
}

// CloneNamespaceFlags are clone(2)'s CLONE_NEW* flags: a clone with any of them is refused,
// so code cannot make user namespaces (the others need capabilities it does not have).
const CloneNamespaceFlags = 0x7E020000

// personalities that programs set in practice (Docker allows the same): PER_LINUX,
// PER_LINUX32, UNAME26, PER_LINUX32|UNAME26, and the query 0xffffffff.
var personalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// Profile is the sandbox's seccomp filter for goarch (runtime.GOARCH: the server's own): an allow-list, everything
// else EPERM, clone3 ENOSYS (so libc falls back to clone, whose flags can be checked).
//
// Under gVisor (gvisor) the filter runs in the sentry, which answers every refusal with
// EPERM whatever the rule says: libc does not fall back to clone on EPERM, so clone3 is
// allowed there. The sentry (2022-12) has no clone3 and answers ENOSYS itself; should a
// later one have it, namespace flags would pass through it, into gVisor's namespaces.
func Profile(goarch string, gvisor bool) *specs.LinuxSeccomp {
	eperm, enosys := uint(1), uint(38)
	clone3 := specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys}
	if gvisor {
		clone3 = specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActAllow}
	}
	s := &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   seccompArches(goarch),
		Syscalls: []specs.LinuxSyscall{
			{Names: allowedSyscalls, Action: specs.ActAllow},
			{Names: []string{"clone"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
				{Index: cloneFlagsArg(goarch), Value: CloneNamespaceFlags, ValueTwo: 0, Op: specs.OpMaskedEqual},
			}},
			clone3,
		},
	}
	for _, p := range personalities {
		s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{
			Names: []string{"personality"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: p, Op: specs.OpEqualTo}},
		})
	}
	return s
}

// cloneFlagsArg is the index of clone's flags argument (s390 swaps the first two).
func cloneFlagsArg(goarch string) uint {
	if goarch == "s390x" {
		return 1
	}
	return 0
}

func seccompArches(goarch string) []specs.Arch {
	switch goarch {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	case "386":
		return []specs.Arch{specs.ArchX86}
	case "arm":
		return []specs.Arch{specs.ArchARM}
	case "ppc64le":
		return []specs.Arch{specs.ArchPPC64LE}
	case "s390x":
		return []specs.Arch{specs.ArchS390X, specs.ArchS390}
	case "riscv64":
		return []specs.Arch{specs.ArchRISCV64}
	}
	return nil // the runtime's native architecture only
}

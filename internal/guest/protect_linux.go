package guest

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// ignored are the signals the guest ignores: every one a process may catch, save SIGCHLD
// (the reaper needs it) and SIGURG (the Go runtime's). The guest is ended by SIGKILL.
// They are caught and dropped, not set to SIG_IGN, which the kernel and commands would
// inherit through execve (Python leaves SIGINT alone when it starts ignored).
var ignored = []syscall.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGPIPE, unix.SIGALRM, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGXCPU,
	unix.SIGXFSZ, unix.SIGVTALRM, unix.SIGPROF, unix.SIGWINCH, unix.SIGIO, unix.SIGPWR,
	unix.SIGSTKFLT, unix.SIGTRAP, unix.SIGABRT,
}

// protect puts the guest process out of reach of user code as far as the process itself
// can: it is not dumpable (so /proc/<guest>/mem, environ and fd need CAP_SYS_PTRACE, even
// for a process of the same uid) and it ignores every signal it can ignore. That user code
// runs under another uid (Options.UserUID) does the rest: it cannot signal the guest at all.
func protect(log *slog.Logger) {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		log.Warn("cannot make the guest non-dumpable", "error", err)
	}
	sigs := make([]os.Signal, len(ignored))
	for i, s := range ignored {
		sigs[i] = s
	}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, sigs...)
	go func() {
		for range ch {
		}
	}()
}

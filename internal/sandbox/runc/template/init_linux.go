package template

import "syscall"

// sysProcAttr: the template's own namespaces, its own process group (a Ctrl-C meant for the
// server is not its), and death with the server's thread as a second line behind stdin's EOF.
func sysProcAttr() (*syscall.SysProcAttr, error) {
	return &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}, nil
}

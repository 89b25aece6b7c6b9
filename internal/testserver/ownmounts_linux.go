package testserver

import (
	"syscall"
	"testing"
)

// ServeOwnMounts is Serve with the server in a mount namespace of its own: what it mounts
// (its workspaces' images) no other process sees, and it is unmounted when the server exits,
// as at a reboot of the host.
func ServeOwnMounts(t testing.TB, state string, args ...string) *Served {
	t.Helper()
	return serve(t, state, &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}, args) // and / made private
}

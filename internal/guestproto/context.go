package guestproto

import (
	"fmt"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// Execution contexts are separate namespaces in a session's one kernel, each with its own
// working directory (api.ExecuteRequest.Context). "" is the default context; a named one
// is made at its first execution and lives until it is deleted or the kernel restarts.

// MaxContexts caps the named contexts of one kernel.
const MaxContexts = 64

// maxContextName caps a context's name.
const maxContextName = 64

// CheckContext checks the name of a named context: 1 to 64 letters, digits, '_', '.' and
// '-'. Both the server and the guest check it.
func CheckContext(name string) error {
	ok := name != "" && len(name) <= maxContextName
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c == '_' || c == '.' || c == '-' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
	}
	if ok {
		return nil
	}
	if len(name) > maxContextName {
		name = name[:maxContextName] + "..."
	}
	return fmt.Errorf("context name %q is not valid: use 1 to %d letters, digits, '_', '.' and '-': %w",
		name, maxContextName, errdefs.ErrInvalidArgument)
}

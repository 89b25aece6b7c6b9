package guestproto

import (
	"errors"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/errdefs"
)

func TestCheckContext(t *testing.T) {
	for _, ok := range []string{"a", "ctx-1", "my_ctx.v2", "A", strings.Repeat("x", 64), ".", ".."} {
		if err := CheckContext(ok); err != nil {
			t.Errorf("CheckContext(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/b", "../x", "/", "a\x00b", "a b", "ctx\n", "é", "a:b", strings.Repeat("x", 65), strings.Repeat("x", 10<<10)} {
		err := CheckContext(bad)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CheckContext(%.20q) = %v, want invalid argument", bad, err)
		}
		if err != nil && len(err.Error()) > 300 {
			t.Errorf("CheckContext(%.20q): a message of %d bytes", bad, len(err.Error()))
		}
	}
}

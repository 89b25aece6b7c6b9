package guest

import (
	"fmt"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// deleteContext drops a named execution context of the kernel: its namespace and working
// directory. The runner forgets it between cells (kmu).
func (s *server) deleteContext(name string) guestproto.Message {
	if name == "" {
		return errMsg(api.CodeInvalidArgument, "name the context to delete; the default context cannot be deleted")
	}
	if err := guestproto.CheckContext(name); err != nil {
		return errFrom(err)
	}
	s.kmu.Lock()
	defer s.kmu.Unlock()
	dropped := s.dropLangKernels(name, false) // the context's kernels of other languages
	k := s.currentKernel()
	if dropped && (k == nil || k.isDead() || !s.ctxs[name]) {
		return guestproto.Message{OK: true}
	}
	if k == nil || k.isDead() || !s.ctxs[name] {
		return errMsg(api.CodeNotFound, fmt.Sprintf("no execution context %q in this session's kernel: "+
			"it was never used, was deleted, or the kernel restarted since", name))
	}
	delete(s.ctxs, name)
	cfg := withDefaults(*s.config())
	r := newRun("", true, seconds(cfg.DefaultTimeoutS), 0, nil)
	r.op, r.context = "drop", name
	k.begin(r)
	<-r.done
	if r.died {
		// Every context went with the kernel.
		if err := s.restartLocked(false); err != nil {
			s.log.Warn("restart the kernel", "error", err)
		}
	}
	return guestproto.Message{OK: true}
}

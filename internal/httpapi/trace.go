package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// trace is where the time of a request that asks for it (api.TraceHeader) went: its
// answer carries a Server-Timing header (a trailer, with Server-Sent Events).
type trace struct {
	start time.Time        // when the server took the request
	guest guestproto.Trace // filled by an execution's call to the guest
}

type traceKey struct{}

// withTrace returns r with a trace starting at start in its context, when r asks for one.
func withTrace(r *http.Request, start time.Time) *http.Request {
	if r.Header.Get(api.TraceHeader) == "" {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), traceKey{}, &trace{start: start}))
}

// traceOf is r's trace, or nil.
func traceOf(r *http.Request) *trace {
	t, _ := r.Context().Value(traceKey{}).(*trace)
	return t
}

// guestTrace is what an execution's call to the guest fills in (nil: no trace asked).
func (t *trace) guestTrace() *guestproto.Trace {
	if t == nil {
		return nil
	}
	return &t.guest
}

// serverTiming is the Server-Timing value: the spans measured, nested, in milliseconds.
func (t *trace) serverTiming() string {
	var b strings.Builder
	add := func(name string, d time.Duration, desc string) {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s;dur=%.3f;desc=%q", name, float64(d)/float64(time.Millisecond), desc)
	}
	add("server", time.Since(t.start), "cellbox server")
	g := t.guest
	if g.Call > 0 {
		add("guest_call", g.Call, "server to guest and back")
	}
	if g.Guest > 0 {
		add("guest", g.Guest, "guest")
		add("files", g.Files, "guest: workspace scans")
		add("kernel", g.Kernel, "guest to runner and back")
	}
	if g.Runner > 0 {
		add("runner", g.Runner, "runner")
		add("run_cell", g.RunCell, "IPython run_cell")
	}
	return b.String()
}

package session

import (
	"context"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// runKernel runs req in the kernel behind g, and returns its result and the tool set the
// run reported (nil: the tools did not change). quiet asks for a Quiet execute
// (guestproto.Request.Quiet): no execution count, nothing in the kernel's history. It is
// the one place a guestproto.ToolSet arrives from the guest; everything after it
// (Manager.afterRun, toolsReported) is tested by feeding tool sets directly.
func runKernel(ctx context.Context, g *guestproto.Client, req api.ExecuteRequest, quiet bool, hooks ExecuteHooks) (*api.ExecuteResult, *guestproto.ToolSet, error) {
	var set *guestproto.ToolSet
	res, err := g.ExecuteWith(ctx, req, guestproto.ExecuteOptions{Quiet: quiet, OnOutput: hooks.OnOutput, OnInput: hooks.OnInput,
		Trace: hooks.Trace, OnTools: func(ts guestproto.ToolSet) { set = &ts }})
	return res, set, err
}

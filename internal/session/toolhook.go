package session

import (
	"context"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// runKernel runs req in the kernel behind g, and returns its result and the tool set the
// run reported (nil: the tools did not change). quiet asks for a Quiet execute
// (guestproto.Request.Quiet): no execution count, nothing in the kernel's history.
//
// MERGE(tools-kernel): this is the one place a guestproto.ToolSet arrives from the guest,
// and where Quiet is set. Until the kernel side's client API lands it runs a plain execute
// and reports no tool set; the merge wires both to the client's API. Everything after it
// (Manager.afterRun, toolsReported) is tested by feeding tool sets directly.
func runKernel(ctx context.Context, g *guestproto.Client, req api.ExecuteRequest, quiet bool, onOutput func(api.Output)) (*api.ExecuteResult, *guestproto.ToolSet, error) {
	_ = quiet
	res, err := g.Execute(ctx, req, onOutput)
	return res, nil, err
}

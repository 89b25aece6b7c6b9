package guestproto

import "time"

// Trace is where one execution's time went, hop by hop. Each span is measured inside one
// process with its monotonic clock and travels as a duration, never as a timestamp another
// process's clock would have to agree with. The spans nest: Call holds Guest, which holds
// Files and Kernel (one after the other), Kernel holds Runner, Runner holds RunCell. The
// runners of languages other than Python report no Runner or RunCell (0).
type Trace struct {
	// Call: the server's client, from opening the call's stream to reading its result.
	Call time.Duration `json:"-"`
	// Guest: the guest, from taking the call's stream to writing the result.
	Guest time.Duration `json:"guest"`
	// Files: the guest, the workspace's snapshots before and after the cell and their
	// difference (the result's files).
	Files time.Duration `json:"files"`
	// Kernel: the guest, from writing the cell to its kernel's runner to reading its end.
	Kernel time.Duration `json:"kernel"`
	// Runner: the runner, from reading the cell to writing its end.
	Runner time.Duration `json:"runner"`
	// RunCell: the runner, IPython's run_cell of the cell's code.
	RunCell time.Duration `json:"run_cell"`
}

// fit makes what the guest reported fit in what the client measured: each span within the
// one that holds it, none negative. The guest is untrusted; a trace is for reading only.
func (t *Trace) fit() {
	in := func(d *time.Duration, parent time.Duration) { *d = max(0, min(*d, parent)) }
	in(&t.Guest, t.Call)
	in(&t.Files, t.Guest)
	in(&t.Kernel, t.Guest-t.Files)
	in(&t.Runner, t.Kernel)
	in(&t.RunCell, t.Runner)
}

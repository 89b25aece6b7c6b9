package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
)

// Pause, resume and fork (issue 29): each of n pausable sessions (their kernels with the
// pre-imports, numpy, pandas and matplotlib, and a DataFrame made) is paused, then resumed
// by a cell; the host's available memory is read before and after the pauses; one of them
// is forked into 10.

// pauseResult is what the pause figures measured; pausable false: the server cannot pause.
type pauseResult struct {
	pausable        bool
	why             string
	pause, resume   []time.Duration
	fork            []time.Duration
	bytes           float64 // checkpoint bytes per paused session
	freed           float64 // host's available memory a pause gives back, per session
	pssBefore       float64 // PSS of a pausable session's processes before its pause, bytes
	pssAfter        float64 // the same after its resume (and one cell)
	forkN, sessions int
}

// pausedCell is what each paused session's kernel holds: the pre-imports and a little data.
const pausedCell = "import pandas as pd, numpy as np\ndf = pd.DataFrame(np.random.rand(1000, 10))\nx = 41"

func (b *bench) pauseFigures(ctx context.Context, n int) (*pauseResult, error) {
	r := &pauseResult{forkN: 10}
	var ids []string
	defer func() {
		for _, id := range ids {
			b.c.DeleteSession(context.WithoutCancel(ctx), id)
		}
	}()
	for range n {
		s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{IdleAction: api.IdleActionPause})
		if client.Code(err) == api.CodeFailedPrecondition {
			r.why = err.Error()
			return r, nil
		}
		if err != nil {
			return nil, err
		}
		ids = append(ids, s.ID)
		if res, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: pausedCell}); err != nil || res.Status != api.StatusOK {
			return nil, fmt.Errorf("the cell before a pause: %+v, %v", res, err)
		}
	}
	r.pausable, r.sessions = true, n
	time.Sleep(time.Second) // the kernels' memory settles
	var err error
	if r.pssBefore, err = b.meanPSS(ctx, ids); err != nil {
		return nil, err
	}
	before, err := memAvailable()
	if err != nil {
		return nil, err
	}
	var bytes float64
	for _, id := range ids {
		t := time.Now()
		s, err := b.c.Pause(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("pause: %w", err)
		}
		r.pause = append(r.pause, time.Since(t))
		bytes += float64(s.CheckpointBytes)
	}
	time.Sleep(time.Second)
	after, err := memAvailable()
	if err != nil {
		return nil, err
	}
	r.bytes, r.freed = bytes/float64(n), (after-before)/float64(n)
	for _, id := range ids {
		t := time.Now()
		res, err := b.c.Execute(ctx, id, api.ExecuteRequest{Code: "print(x + 1)"})
		if err != nil || res.Status != api.StatusOK || len(res.Outputs) == 0 || strings.TrimSpace(res.Outputs[0].Text) != "42" {
			return nil, fmt.Errorf("the first cell after a resume: %+v, %v", res, err)
		}
		r.resume = append(r.resume, time.Since(t))
	}
	if r.pssAfter, err = b.meanPSS(ctx, ids); err != nil {
		return nil, err
	}
	// Fork of 10, a few times: the source runs between them.
	for range min(3, n) {
		t := time.Now()
		f, err := b.c.Fork(ctx, ids[0], api.ForkRequest{Count: r.forkN})
		if err != nil {
			return nil, fmt.Errorf("fork: %w", err)
		}
		r.fork = append(r.fork, time.Since(t))
		for _, s := range f.Sessions {
			b.c.DeleteSession(ctx, s.ID)
		}
	}
	return r, nil
}

func (r *pauseResult) cells(c map[string]string) {
	if !r.pausable {
		c[rowPause] = "cannot: " + r.why
		return
	}
	c[rowPause] = stat(r.pause)
	c[rowResume] = stat(r.resume)
	c[rowPaused] = fmt.Sprintf("%.1f MB on disk; %.1f MiB of memory back (n=%d)", r.bytes/1e6, r.freed/(1<<20), r.sessions)
	c[rowFork] = stat(r.fork)
	c[rowResumedPSS] = fmt.Sprintf("%.1f MiB before its pause, %.1f MiB after its resume", r.pssBefore/(1<<20), r.pssAfter/(1<<20))
}

// meanPSS is the mean PSS of the processes of the sessions ids (at most the first 5).
func (b *bench) meanPSS(ctx context.Context, ids []string) (float64, error) {
	ids = ids[:min(len(ids), 5)]
	var sum float64
	for _, id := range ids {
		key, err := b.cgroupKey(ctx, id)
		if err != nil {
			return 0, err
		}
		p, _, err := cgroupMemory(key)
		if err != nil {
			return 0, err
		}
		sum += p
	}
	return sum / float64(len(ids)), nil
}

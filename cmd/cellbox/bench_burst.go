package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
)

// The burst benchmark (cellbox bench --burst N): N sessions created at once, each timed
// from its create call to the result of its first cell, `print(1+1)`, as computesdk's
// sandbox benchmark times its "100 at once" runs. Beside it, in the same run, the same N
// started at once as bare `python3 -c 'print(1+1)'` processes on the host.

// burstResult is one burst.
type burstResult struct {
	times  []time.Duration // create → first result, of those that succeeded
	errors []string        // one per session that failed
	wall   time.Duration   // first create → last result
	hits   float64         // the pool's hits during the burst
}

func benchBurst(ctx context.Context, cfg config.Config, n int, rounds int) error {
	b, stop, err := startBench(ctx, cfg, "burst")
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("\n| burst of %d sessions at once: create → first result of `print(1+1)` | p50 | p90 | max | errors | wall (all done) | pool hits |\n|---|---|---|---|---|---|---|\n", n)
	for i := range rounds {
		b.progress("burst %d of %d: waiting for the warm pool", i+1, rounds)
		ready, err := b.waitPoolTarget(ctx)
		if err != nil {
			return err
		}
		b.progress("burst %d of %d: %d sessions", i+1, rounds, n)
		r, err := b.burst(ctx, n)
		if err != nil {
			return err
		}
		fmt.Printf("| cellbox, burst %d (%d warm) | %s | %s | %s | %d | %s | %.0f |\n", i+1, ready,
			ms(pct(r.times, 50)), ms(pct(r.times, 90)), ms(pct(r.times, 100)), len(r.errors), ms(r.wall), r.hits)
		for j, e := range r.errors {
			if j == 3 {
				fmt.Printf("|   … and %d more errors | | | | | | |\n", len(r.errors)-3)
				break
			}
			fmt.Printf("|   error: %s | | | | | | |\n", strings.ReplaceAll(e, "|", "/"))
		}
	}
	bare := bareBurst(cfg.Python, n)
	fmt.Printf("| reference: %d bare `python3 -c 'print(1+1)'` started at once | %s | %s | %s | %d | %s | — |\n",
		n, ms(pct(bare.times, 50)), ms(pct(bare.times, 90)), ms(pct(bare.times, 100)), len(bare.errors), ms(bare.wall))
	return nil
}

// burst creates n sessions at once, times each to its first result and deletes them all.
func (b *bench) burst(ctx context.Context, n int) (*burstResult, error) {
	hits0, err := b.metric(ctx, "cellbox_pool_hits_total")
	if err != nil {
		return nil, err
	}
	r, ids := atOnce(n, func() (string, error) { return b.firstPrint(ctx) })
	hits1, err := b.metric(ctx, "cellbox_pool_hits_total")
	if err != nil {
		return nil, err
	}
	r.hits = hits1 - hits0
	var del sync.WaitGroup
	for _, id := range ids {
		del.Go(func() { b.c.DeleteSession(ctx, id) })
	}
	del.Wait()
	return r, nil
}

// firstPrint creates a session and runs print(1+1) in it; it returns the session's id
// (when it was made) for the caller to delete.
func (b *bench) firstPrint(ctx context.Context) (string, error) {
	s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	r, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: "print(1+1)"})
	if err != nil {
		return s.ID, fmt.Errorf("execute: %w", err)
	}
	if r.Status != api.StatusOK || len(r.Outputs) != 1 || r.Outputs[0].Text != "2\n" {
		return s.ID, fmt.Errorf("execute: status %s %s, outputs %v", r.Status, r.Message, r.Outputs)
	}
	return s.ID, nil
}

// bareBurst starts n `python3 -c 'print(1+1)'` at once and times each to its exit.
func bareBurst(python string, n int) *burstResult {
	r, _ := atOnce(n, func() (string, error) {
		out, err := exec.Command(python, "-c", "print(1+1)").Output()
		if err == nil && string(out) != "2\n" {
			err = fmt.Errorf("printed %q", out)
		}
		return "", err
	})
	return r
}

// atOnce runs one n times at once, released together, and times each call; the ids it
// returns (a session to delete, "" for none) are collected whether it failed or not.
func atOnce(n int, one func() (id string, err error)) (r *burstResult, ids []string) {
	r = &burstResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			t := time.Now()
			id, err := one()
			d := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if id != "" {
				ids = append(ids, id)
			}
			if err != nil {
				r.errors = append(r.errors, err.Error())
				return
			}
			r.times = append(r.times, d)
		})
	}
	t := time.Now()
	close(start)
	wg.Wait()
	r.wall = time.Since(t)
	return r, ids
}

// waitPoolTarget waits until the warm pools hold what they fill to (which grows after a
// burst, up to --pool-max) and returns how many that is.
func (b *bench) waitPoolTarget(ctx context.Context) (int, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		size, err := b.metric(ctx, "cellbox_pool_size")
		if err != nil {
			return 0, err
		}
		target, err := b.metric(ctx, "cellbox_pool_target")
		if err != nil {
			return 0, err
		}
		if size >= target {
			return int(size), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("the warm pools did not fill within 5 minutes")
}

// metric reads one series of the server's /metrics: a name, with its labels if it has any
// (`name{label="value"}`, as the server writes them).
func (b *bench) metric(ctx context.Context, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("the server's metrics have no %s", name)
}

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"time"

	mobyclient "github.com/moby/moby/client"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/server"
)

// bench measures one setup's server over REST (and a cell over Jupyter's kernel API).
type bench struct {
	c      *client.Client
	url    string // the server's, for Jupyter's kernel API
	cfg    config.Config
	name   string
	docker *mobyclient.Client // the docker backend's engine: where its sandboxes' cgroups are
}

func newBench(url string, cfg config.Config, name string) (*bench, error) {
	b := &bench{c: client.New(url), url: url, cfg: cfg, name: name}
	if cfg.Backend == "docker" {
		opts := []mobyclient.Opt{mobyclient.FromEnv}
		if cfg.DockerHost != "" {
			opts = append(opts, mobyclient.WithHost(cfg.DockerHost))
		}
		var err error
		if b.docker, err = mobyclient.New(opts...); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// startBench starts a server with cfg in this process and a bench of it; stop ends both.
func startBench(ctx context.Context, cfg config.Config, name string) (b *bench, stop func(), err error) {
	s, err := server.Start(ctx, cfg, server.Options{})
	if err != nil {
		return nil, nil, err
	}
	shutdown := func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		s.Shutdown(sctx)
	}
	if b, err = newBench(s.URL, cfg, name); err != nil {
		shutdown()
		return nil, nil, err
	}
	return b, func() { b.close(); shutdown() }, nil
}

func (b *bench) close() {
	if b.docker != nil {
		b.docker.Close()
	}
}

// benchResult is what one setup measured.
type benchResult struct {
	cell, first, plot, once, cold  []time.Duration
	kernelReply, kernelIdle        []time.Duration // the trivial cell over Jupyter's kernel websocket
	firstLimits, firstEnv, restart []time.Duration
	restartBurst                   []time.Duration
	pss, charge                    float64 // idle memory per session, bytes
	avail, work                    float64 // drops of the host's available memory per session, bytes
	availN, workN                  int     // over how many sessions
	paused                         *pauseResult
	trace                          hops // with --trace
}

func (r *benchResult) column(name string) column {
	c := column{name: name, cells: map[string]string{
		rowTrivial: stat(r.cell),
		rowKernel:  stat(r.kernelReply),
		rowIdle:    stat(r.kernelIdle),
		rowImport:  stat(r.first),
		rowPlot:    stat(r.plot),
		rowOnce:    stat(r.once),
		rowCold:    stat(r.cold),
		rowLimits:  stat(r.firstLimits),
		rowEnv:     stat(r.firstEnv),
		rowRestart: stat(r.restart),
		rowBurst:   stat(r.restartBurst),
		rowPSS:     fmt.Sprintf("%.1f MiB", r.pss/(1<<20)),
		rowCharge:  fmt.Sprintf("%.1f MiB → %d", r.charge/(1<<20), int(24*(1<<30)/r.charge)),
		rowAvail:   fmt.Sprintf("%.1f MiB → %d (n=%d)", r.avail/(1<<20), int(24*(1<<30)/r.avail), r.availN),
		rowWork:    fmt.Sprintf("%.1f MiB (n=%d)", r.work/(1<<20), r.workN),
	}}
	if r.paused != nil {
		r.paused.cells(c.cells)
	}
	for key, d := range r.trace {
		c.cells[key] = ms(pct(d, 50))
	}
	if d := r.trace[rowTraced]; d != nil {
		c.cells[rowTraced] = stat(d)
	}
	return c
}

func (b *bench) progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: %s: "+format+"\n", append([]any{b.name}, a...)...)
}

func (b *bench) run(ctx context.Context, n benchN) (*benchResult, error) {
	b.progress("waiting for the warm pool (%d)", b.cfg.PoolSize)
	if err := b.waitPool(ctx); err != nil {
		return nil, err
	}
	r := &benchResult{}
	var err error
	b.progress("trivial cell round trip ×%d", n.cells)
	if r.cell, err = b.warmCells(ctx, "", trivialCell, n.cells, 20, nil); err != nil {
		return nil, err
	}
	if !b.cfg.NoJupyter {
		b.progress("trivial cell over Jupyter's kernel websocket ×%d", n.cells)
		if r.kernelReply, r.kernelIdle, err = b.kernelCells(ctx, n.cells, 20); err != nil {
			return nil, fmt.Errorf("over Jupyter's kernel websocket: %w", err)
		}
	}
	if n.trace {
		b.progress("trivial cell traced ×%d", n.cells)
		if r.trace, err = b.tracedCells(ctx, n.cells, 20); err != nil {
			return nil, fmt.Errorf("traced: %w", err)
		}
	}
	b.progress("new session → first result ×%d", n.starts)
	if r.first, err = b.newSessions(ctx, n.starts); err != nil {
		return nil, err
	}
	b.progress("new session with other limits → first result ×%d", n.starts)
	if r.firstLimits, err = b.newSessionsWith(ctx, n.starts, api.CreateSessionRequest{Limits: &api.Limits{MemoryMB: b.cfg.MemoryMB / 2, Pids: b.cfg.Pids / 2}}); err != nil {
		return nil, err
	}
	b.progress("new session with env → first result ×%d", n.starts)
	if r.firstEnv, err = b.newSessionsWith(ctx, n.starts, api.CreateSessionRequest{Env: map[string]string{"API_TOKEN": "bench"}}); err != nil {
		return nil, err
	}
	b.progress("kernel restart ×%d", n.starts)
	if r.restart, err = b.restarts(ctx, n.starts, restartGap); err != nil {
		return nil, err
	}
	if r.restartBurst, err = b.restarts(ctx, n.starts, 0); err != nil {
		return nil, err
	}
	b.progress("plot cell ×%d", n.plots)
	if r.plot, err = b.warmCells(ctx, "", plotCell, n.plots, 3, onePNG); err != nil {
		return nil, err
	}
	b.progress("one-shot print(1+1) ×%d", n.starts)
	if r.once, err = b.oneShots(ctx, n.starts, nil); err != nil {
		return nil, err
	}
	if r.cold, err = b.oneShots(ctx, min(n.starts, 5), &api.Limits{MemoryMB: b.cfg.MemoryMB + 1}); err != nil {
		return nil, err
	}
	b.progress("idle memory over %d warm sessions", n.idle)
	if err := b.idleMemory(ctx, n.idle, r); err != nil {
		return nil, err
	}
	// Last: its sessions' ends would free memory while the idle memory is measured.
	b.progress("pause, resume and fork of 10 ×%d", n.starts)
	if r.paused, err = b.pauseFigures(ctx, n.starts); err != nil {
		return nil, err
	}
	return r, nil
}

func (b *bench) waitPool(ctx context.Context) error {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		h, err := b.c.Health(ctx)
		if err != nil {
			return err
		}
		if h.Pool >= b.cfg.PoolSize+sum(b.cfg.LanguagePoolSizes()) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the warm pool did not fill within 3 minutes")
}

// sum adds a map's values: the warm sandboxes of the language pools, which Health counts
// beside the default image's.
func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// warmCells times n runs of code in one session of language lang ("": Python), after warm
// untimed ones; check (may be nil) checks each result.
func (b *bench) warmCells(ctx context.Context, lang, code string, n, warm int, check func(*api.ExecuteResult) error) ([]time.Duration, error) {
	s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{Language: lang})
	if err != nil {
		return nil, err
	}
	defer b.c.DeleteSession(ctx, s.ID)
	var d []time.Duration
	for i := -warm; i < n; i++ {
		t := time.Now()
		r, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: code})
		if err != nil {
			return nil, err
		}
		if i >= 0 {
			d = append(d, time.Since(t))
		}
		if r.Status != api.StatusOK {
			return nil, fmt.Errorf("%.40q: status %s %s", code, r.Status, r.Message)
		}
		if check != nil {
			if err := check(r); err != nil {
				return nil, fmt.Errorf("%.40q: %w", code, err)
			}
		}
	}
	return d, nil
}

// pngMagic starts every PNG file.
var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// onePNG checks that a result holds exactly one output, a PNG display_data.
func onePNG(r *api.ExecuteResult) error {
	var pngs int
	for _, o := range r.Outputs {
		s, _ := o.Data["image/png"].(string)
		if o.Type != api.OutputDisplayData || s == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || !bytes.HasPrefix(raw, pngMagic) {
			return fmt.Errorf("image/png is not a base64 PNG")
		}
		pngs++
	}
	if pngs != 1 || len(r.Outputs) != 1 {
		return fmt.Errorf("want one PNG display_data, got %d PNGs in %d outputs", pngs, len(r.Outputs))
	}
	return nil
}

func (b *bench) newSessions(ctx context.Context, n int) ([]time.Duration, error) {
	return b.newSessionsWith(ctx, n, api.CreateSessionRequest{})
}

// newSessionsWith times n sessions created with req, each to its first result: the import
// cell's.
func (b *bench) newSessionsWith(ctx context.Context, n int, req api.CreateSessionRequest) ([]time.Duration, error) {
	return b.firstResults(ctx, n, req, importCell, nil)
}

// firstResults times n sessions created with req, each to the result of code, with the
// warm pools full before each (its language's too); check (may be nil) checks each result.
func (b *bench) firstResults(ctx context.Context, n int, req api.CreateSessionRequest, code string, check func(*api.ExecuteResult) error) ([]time.Duration, error) {
	var d []time.Duration
	for range n {
		if err := b.waitPool(ctx); err != nil {
			return nil, err
		}
		if err := b.waitLangPool(ctx, req.Language); err != nil {
			return nil, err
		}
		t := time.Now()
		s, err := b.c.CreateSession(ctx, req)
		if err != nil {
			return nil, err
		}
		r, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: code})
		if err != nil {
			return nil, err
		}
		d = append(d, time.Since(t))
		b.c.DeleteSession(ctx, s.ID)
		if r.Status != api.StatusOK {
			return nil, fmt.Errorf("first cell: status %s %s", r.Status, r.Message)
		}
		if check != nil {
			if err := check(r); err != nil {
				return nil, fmt.Errorf("first cell: %w", err)
			}
		}
	}
	return d, nil
}

// restartGap is the pause before each restart of the one-at-a-time row: a kernel start
// that does not meet the background work of the one before it (the template forks its
// next spare after a kernel is forked).
const restartGap = 250 * time.Millisecond

// restarts times n kernel restarts of one session, each until the restart's answer: a new
// kernel ready with the pre-imports. Each waits gap before it starts.
func (b *bench) restarts(ctx context.Context, n int, gap time.Duration) ([]time.Duration, error) {
	s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		return nil, err
	}
	defer b.c.DeleteSession(ctx, s.ID)
	var d []time.Duration
	for range n {
		time.Sleep(gap)
		t := time.Now()
		if _, err := b.c.Restart(ctx, s.ID); err != nil {
			return nil, err
		}
		d = append(d, time.Since(t))
	}
	if r, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: "import pandas\nprint(1)"}); err != nil || r.Status != api.StatusOK {
		return nil, fmt.Errorf("after the restarts: %v %+v", err, r)
	}
	return d, nil
}

func (b *bench) oneShots(ctx context.Context, n int, limits *api.Limits) ([]time.Duration, error) {
	var d []time.Duration
	for range n {
		if err := b.waitPool(ctx); err != nil {
			return nil, err
		}
		t := time.Now()
		r, err := b.c.ExecuteOnce(ctx, api.OneShotRequest{Code: "print(1+1)", Limits: limits})
		if err != nil {
			return nil, err
		}
		d = append(d, time.Since(t))
		if r.Status != api.StatusOK {
			return nil, fmt.Errorf("one-shot: status %s %s", r.Status, r.Message)
		}
	}
	return d, nil
}

package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/server"
)

func init() {
	register("bench", "measure cellbox against the targets of DESIGN.md (prints a markdown table)", benchMain)
}

func benchMain(args []string) int {
	cfg := config.Default()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	cfg.Flags(fs)
	cells := fs.Int("cells", 500, "trivial cells to time")
	starts := fs.Int("starts", 10, "new sessions and one-shots to time")
	idle := fs.Int("idle", 20, "idle warm sessions to measure memory over")
	if err := config.Load(fs, args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "cellbox bench:", err)
		return 2
	}
	cfg.Addr = "127.0.0.1:0"
	cfg.EndSessionsOnExit = true
	if cfg.LogLevel == "info" {
		cfg.LogLevel = "warn"
	}
	if cfg.MaxSessions < *idle+4 {
		cfg.MaxSessions = *idle + 4
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "cellbox bench: bad settings:\n", err)
		return 2
	}
	ctx := context.Background()
	s, err := server.Start(ctx, cfg, server.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cellbox bench:", err)
		return 1
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		s.Shutdown(sctx)
	}()
	b := &bench{c: client.New(s.URL), cfg: cfg}
	if err := b.run(ctx, *cells, *starts, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "cellbox bench:", err)
		return 1
	}
	return 0
}

type bench struct {
	c   *client.Client
	cfg config.Config
}

func (b *bench) progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
}

func (b *bench) run(ctx context.Context, cells, starts, idle int) error {
	b.progress("waiting for the warm pool (%d)", b.cfg.PoolSize)
	if err := b.waitPool(ctx); err != nil {
		return err
	}
	var rows [][]string
	add := func(what string, d []time.Duration, ref string) {
		rows = append(rows, []string{what, fmt.Sprintf("%s / %s", ms(pct(d, 50)), ms(pct(d, 99))), ref})
	}

	b.progress("trivial cell round trip ×%d", cells)
	cell, err := b.trivialCells(ctx, cells)
	if err != nil {
		return err
	}
	bare := timeCmd(20, b.cfg.Python, "-c", "x=1")
	add("trivial cell `x=1`, warm session, REST round trip", cell, "bare `python3 -c 'x=1'` (a new process): "+ms(pct(bare, 50)))

	b.progress("new session → first result ×%d", starts)
	first, err := b.newSessions(ctx, starts)
	if err != nil {
		return err
	}
	imports := timeCmd(5, b.cfg.Python, "-c", "import pandas, matplotlib.pyplot")
	add("new session → first result, pandas + matplotlib ready (warm pool)", first, "bare `python3 -c 'import pandas, matplotlib.pyplot'`: "+ms(pct(imports, 50)))

	b.progress("one-shot print(1+1) ×%d", starts)
	once, err := b.oneShots(ctx, starts, nil)
	if err != nil {
		return err
	}
	print2 := timeCmd(20, b.cfg.Python, "-c", "print(1+1)")
	add("one-shot `print(1+1)`, warm pool", once, "bare `python3 -c 'print(1+1)'`: "+ms(pct(print2, 50)))
	cold, err := b.oneShots(ctx, min(starts, 5), &api.Limits{MemoryMB: b.cfg.MemoryMB + 1})
	if err != nil {
		return err
	}
	add("one-shot `print(1+1)`, cold (new sandbox + kernel + pre-imports)", cold, "")

	b.progress("idle memory over %d warm sessions", idle)
	per, err := b.idleMemory(ctx, idle)
	if err != nil {
		return err
	}
	bareRSS := bareImportRSS(b.cfg.Python)

	fmt.Printf("| figure | cellbox p50 / p99 | reference |\n| --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s |\n", r[0], r[1], r[2])
	}
	fmt.Printf("| idle warm session, numpy+pandas+matplotlib imported: memory (PSS of all its processes) | %.1f MiB → %d sessions in 24 GiB | bare python3 with the same imports: %.1f MiB RSS |\n",
		per/(1<<20), int(24*(1<<30)/per), bareRSS/(1<<20))
	return nil
}

func (b *bench) waitPool(ctx context.Context) error {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		h, err := b.c.Health(ctx)
		if err != nil {
			return err
		}
		if h.Pool >= b.cfg.PoolSize {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the warm pool did not fill within 3 minutes")
}

func (b *bench) trivialCells(ctx context.Context, n int) ([]time.Duration, error) {
	s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		return nil, err
	}
	defer b.c.DeleteSession(ctx, s.ID)
	var d []time.Duration
	for i := -20; i < n; i++ { // 20 warm-up cells
		t := time.Now()
		r, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: "x=1"})
		if err != nil {
			return nil, err
		}
		if r.Status != api.StatusOK {
			return nil, fmt.Errorf("x=1: status %s", r.Status)
		}
		if i >= 0 {
			d = append(d, time.Since(t))
		}
	}
	return d, nil
}

func (b *bench) newSessions(ctx context.Context, n int) ([]time.Duration, error) {
	var d []time.Duration
	for range n {
		if err := b.waitPool(ctx); err != nil {
			return nil, err
		}
		t := time.Now()
		s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{})
		if err != nil {
			return nil, err
		}
		r, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: "import pandas as pd, matplotlib.pyplot as plt\npd.__version__"})
		if err != nil {
			return nil, err
		}
		d = append(d, time.Since(t))
		if r.Status != api.StatusOK {
			return nil, fmt.Errorf("first cell: status %s", r.Status)
		}
		b.c.DeleteSession(ctx, s.ID)
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
			return nil, fmt.Errorf("one-shot: status %s", r.Status)
		}
	}
	return d, nil
}

// idleMemory starts n sessions, lets them idle, and returns the mean proportional set
// size (PSS: shared pages split among their users) of each session's processes.
func (b *bench) idleMemory(ctx context.Context, n int) (float64, error) {
	var ids []string
	defer func() {
		for _, id := range ids {
			b.c.DeleteSession(ctx, id)
		}
	}()
	for range n {
		s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{})
		if err != nil {
			return 0, err
		}
		ids = append(ids, s.ID)
		if _, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: "x = 1"}); err != nil {
			return 0, err
		}
	}
	time.Sleep(2 * time.Second)
	var total float64
	for _, id := range ids {
		pss, err := cgroupPSS(id)
		if err != nil {
			return 0, err
		}
		total += pss
	}
	return total / float64(n), nil
}

// cgroupPSS sums the PSS of every process whose cgroup path names the sandbox id.
func cgroupPSS(id string) (float64, error) {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var total float64
	found := false
	for _, p := range procs {
		cg, err := os.ReadFile(filepath.Join(p, "cgroup"))
		if err != nil || !strings.Contains(string(cg), "/"+id) {
			continue
		}
		found = true
		total += smapsField(filepath.Join(p, "smaps_rollup"), "Pss:")
	}
	if !found {
		return 0, fmt.Errorf("no process of sandbox %s found (idle memory needs the runc backend)", id)
	}
	return total, nil
}

func smapsField(path, field string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == field {
			kb, _ := strconv.ParseFloat(fs[1], 64)
			return kb * 1024
		}
	}
	return 0
}

func bareImportRSS(python string) float64 {
	out, err := exec.Command(python, "-c", "import numpy, pandas, matplotlib, matplotlib.pyplot, IPython\n"+
		"print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS')][0])").Output()
	if err != nil {
		return 0
	}
	kb, _ := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	return kb * 1024
}

func timeCmd(n int, name string, args ...string) []time.Duration {
	var d []time.Duration
	for range n {
		t := time.Now()
		if exec.Command(name, args...).Run() != nil {
			return nil
		}
		d = append(d, time.Since(t))
	}
	return d
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	return s[max(0, min(i, len(s))-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

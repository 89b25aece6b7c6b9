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
	runtimes := fs.String("runtimes", "", "OCI runtimes to measure one after the other, side by side, e.g. runc,runsc (default: --runtime)")
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
	rts := []string{cfg.Runtime}
	if *runtimes != "" {
		rts = strings.Split(*runtimes, ",")
	}
	var results []*benchResult
	for _, rt := range rts {
		c := cfg
		c.Runtime = rt
		if len(rts) > 1 {
			c.StateDir = filepath.Join(cfg.StateDir, rt) // each server locks its own
		}
		if err := c.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, "cellbox bench: bad settings:\n", err)
			return 2
		}
		r, err := benchRuntime(context.Background(), c, *cells, *starts, *idle)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cellbox bench: %s: %v\n", rt, err)
			return 1
		}
		results = append(results, r)
	}
	printResults(cfg.Python, rts, results)
	return 0
}

// benchRuntime starts a server with cfg, measures it and stops it.
func benchRuntime(ctx context.Context, cfg config.Config, cells, starts, idle int) (*benchResult, error) {
	s, err := server.Start(ctx, cfg, server.Options{})
	if err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		s.Shutdown(sctx)
	}()
	b := &bench{c: client.New(s.URL), cfg: cfg}
	return b.run(ctx, cells, starts, idle)
}

type bench struct {
	c   *client.Client
	cfg config.Config
}

// benchResult is what one runtime measured.
type benchResult struct {
	cell, first, once, cold []time.Duration
	pss, charge             float64 // idle memory per session, bytes
}

func (b *bench) progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: %s: "+format+"\n", append([]any{b.cfg.Runtime}, a...)...)
}

func (b *bench) run(ctx context.Context, cells, starts, idle int) (*benchResult, error) {
	b.progress("waiting for the warm pool (%d)", b.cfg.PoolSize)
	if err := b.waitPool(ctx); err != nil {
		return nil, err
	}
	r := &benchResult{}
	var err error
	b.progress("trivial cell round trip ×%d", cells)
	if r.cell, err = b.trivialCells(ctx, cells); err != nil {
		return nil, err
	}
	b.progress("new session → first result ×%d", starts)
	if r.first, err = b.newSessions(ctx, starts); err != nil {
		return nil, err
	}
	b.progress("one-shot print(1+1) ×%d", starts)
	if r.once, err = b.oneShots(ctx, starts, nil); err != nil {
		return nil, err
	}
	if r.cold, err = b.oneShots(ctx, min(starts, 5), &api.Limits{MemoryMB: b.cfg.MemoryMB + 1}); err != nil {
		return nil, err
	}
	b.progress("idle memory over %d warm sessions", idle)
	if r.pss, r.charge, err = b.idleMemory(ctx, idle); err != nil {
		return nil, err
	}
	return r, nil
}

// printResults prints one markdown table with a column per runtime and the bare python3
// references.
func printResults(python string, rts []string, results []*benchResult) {
	bare := timeCmd(20, python, "-c", "x=1")
	imports := timeCmd(5, python, "-c", "import pandas, matplotlib.pyplot")
	print2 := timeCmd(20, python, "-c", "print(1+1)")
	bareRSS := bareImportRSS(python)

	fmt.Print("| figure |")
	for _, rt := range rts {
		fmt.Printf(" %s |", rt)
	}
	fmt.Print(" reference |\n| --- |")
	for range rts {
		fmt.Print(" --- |")
	}
	fmt.Println(" --- |")
	row := func(what, ref string, cell func(r *benchResult) string) {
		fmt.Printf("| %s |", what)
		for _, r := range results {
			fmt.Printf(" %s |", cell(r))
		}
		fmt.Printf(" %s |\n", ref)
	}
	p50p99 := func(d func(r *benchResult) []time.Duration) func(r *benchResult) string {
		return func(r *benchResult) string { return fmt.Sprintf("%s / %s", ms(pct(d(r), 50)), ms(pct(d(r), 99))) }
	}
	row("trivial cell `x=1`, warm session, REST round trip, p50 / p99", "bare `python3 -c 'x=1'` (a new process): "+ms(pct(bare, 50)),
		p50p99(func(r *benchResult) []time.Duration { return r.cell }))
	row("new session → first result, pandas + matplotlib ready (warm pool), p50 / p99", "bare `python3 -c 'import pandas, matplotlib.pyplot'`: "+ms(pct(imports, 50)),
		p50p99(func(r *benchResult) []time.Duration { return r.first }))
	row("one-shot `print(1+1)`, warm pool, p50 / p99", "bare `python3 -c 'print(1+1)'`: "+ms(pct(print2, 50)),
		p50p99(func(r *benchResult) []time.Duration { return r.once }))
	row("one-shot `print(1+1)`, cold (new sandbox + kernel + pre-imports), p50 / p99", "",
		p50p99(func(r *benchResult) []time.Duration { return r.cold }))
	row("idle warm session, numpy + pandas + matplotlib imported: PSS of its host processes", fmt.Sprintf("bare python3 with the same imports: %.1f MiB RSS", bareRSS/(1<<20)),
		func(r *benchResult) string { return fmt.Sprintf("%.1f MiB", r.pss/(1<<20)) })
	row("the same: its cgroup's charge, anon + shmem (no page cache) → sessions in 24 GiB", "",
		func(r *benchResult) string {
			return fmt.Sprintf("%.1f MiB → %d", r.charge/(1<<20), int(24*(1<<30)/r.charge))
		})
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

// idleMemory starts n sessions, lets them idle, and returns two means per session: the
// proportional set size (PSS: shared pages split among their users) of its host processes
// (under runc the guest and the kernel; under gVisor the sentry, the gofer and the stub
// processes), and what its cgroup is charged for but page cache: anon + shmem, where
// gVisor keeps the sandbox's memory (a memfd), which its processes need not have mapped.
func (b *bench) idleMemory(ctx context.Context, n int) (pss, charge float64, err error) {
	var ids []string
	defer func() {
		for _, id := range ids {
			b.c.DeleteSession(ctx, id)
		}
	}()
	for range n {
		s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{})
		if err != nil {
			return 0, 0, err
		}
		ids = append(ids, s.ID)
		if _, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: "x = 1"}); err != nil {
			return 0, 0, err
		}
	}
	time.Sleep(2 * time.Second)
	for _, id := range ids {
		p, c, err := cgroupMemory(id)
		if err != nil {
			return 0, 0, err
		}
		pss += p
		charge += c
	}
	return pss / float64(n), charge / float64(n), nil
}

// cgroupMemory sums the PSS of every process whose cgroup path names the sandbox id, and
// reads the anon and shmem charge of that cgroup (memory.stat, cgroup v1 or v2).
func cgroupMemory(id string) (pss, charge float64, err error) {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var memcg string
	for _, p := range procs {
		cg, err := os.ReadFile(filepath.Join(p, "cgroup"))
		if err != nil || !strings.Contains(string(cg), "/"+id) {
			continue
		}
		pss += smapsField(filepath.Join(p, "smaps_rollup"), "Pss:")
		for _, line := range strings.Split(string(cg), "\n") {
			// "4:memory:/path" (v1) or "0::/path" (v2)
			if f := strings.SplitN(line, ":", 3); len(f) == 3 && strings.HasSuffix(f[2], "/"+id) {
				if f[1] == "memory" {
					memcg = filepath.Join("/sys/fs/cgroup/memory", f[2])
				} else if f[0] == "0" && memcg == "" {
					memcg = filepath.Join("/sys/fs/cgroup", f[2])
				}
			}
		}
	}
	if memcg == "" {
		return 0, 0, fmt.Errorf("no process of sandbox %s found (idle memory needs the runc backend)", id)
	}
	stat := filepath.Join(memcg, "memory.stat")
	if _, err := os.Stat(filepath.Join(memcg, "memory.current")); err == nil { // v2
		charge = statField(stat, "anon") + statField(stat, "shmem")
	} else {
		charge = statField(stat, "total_rss") + statField(stat, "total_shmem")
	}
	if charge == 0 {
		return 0, 0, fmt.Errorf("no memory charge in %s", stat)
	}
	return pss, charge, nil
}

// statField reads a field of a cgroup's memory.stat ("name value" lines, bytes).
func statField(path, field string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+" "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n
		}
	}
	return 0
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

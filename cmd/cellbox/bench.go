package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
)

func init() {
	register("bench", "measure cellbox's setups, and the Docker flows people use today, side by side (prints a markdown table)", benchMain)
}

// The workloads: the same code in every setup and every Docker flow.
const (
	// trivialCell is the smallest cell: what one round trip costs.
	trivialCell = "x=1"
	// importCell is a fresh session's first cell: pandas and pyplot imported, a result.
	importCell = "import pandas as pd, matplotlib.pyplot as plt\npd.__version__"
	// plotCode draws the plot. As a cell (plotCell), plt.show() makes it one PNG
	// display_data; as a script (plotScript), it is written out as PNG on stdout.
	plotCode   = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\n"
	plotCell   = plotCode + "plt.show()"
	plotScript = plotCode + "import sys\nplt.savefig(sys.stdout.buffer, format='png')"
)

// setup is one way to run cellbox: a backend, a root filesystem and an OCI runtime.
type setup struct {
	name    string
	backend string
	rootfs  string // runc: host | image; "" for docker, which always runs on images
	runtime string
}

// setups are the names --setups takes.
var setups = []setup{
	{"runc", "runc", "host", "runc"},
	{"runc-image", "runc", "image", "runc"},
	{"docker", "docker", "", "runc"},
	{"runsc", "runc", "host", "runsc"},
	{"runsc-image", "runc", "image", "runsc"},
	{"docker-runsc", "docker", "", "runsc"},
}

// parseSetups parses --setups, a comma list of setups' names.
func parseSetups(s string) ([]setup, error) {
	var out []setup
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if seen[name] {
			return nil, fmt.Errorf("setup %s is given twice", name)
		}
		seen[name] = true
		i := slices.IndexFunc(setups, func(st setup) bool { return st.name == name })
		if i < 0 {
			var names []string
			for _, st := range setups {
				names = append(names, st.name)
			}
			return nil, fmt.Errorf("unknown setup %q: choose among %s", name, strings.Join(names, ", "))
		}
		out = append(out, setups[i])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no setup given")
	}
	return out, nil
}

// setupOf is the setup the serve flags describe (--backend, --rootfs, --runtime).
func setupOf(cfg config.Config) setup {
	st := setup{backend: cfg.Backend, rootfs: cfg.RootFS, runtime: cfg.Runtime}
	switch {
	case cfg.Backend == "docker":
		st.name, st.rootfs = "docker", ""
		if cfg.Runtime != "runc" {
			st.name += "-" + cfg.Runtime
		}
	case cfg.Backend == "runc":
		st.name = filepath.Base(cfg.Runtime)
		if cfg.RootFS == "image" {
			st.name += "-image"
		}
	default:
		st.name = cfg.Backend
	}
	return st
}

// apply returns cfg set up for st, with its own state folder under cfg's; images come from
// --images-dir, else the images folder of cfg's state folder (cellbox image build
// --state-dir puts them there).
func (st setup) apply(cfg config.Config) config.Config {
	c := cfg
	c.Backend, c.Runtime = st.backend, st.runtime
	if st.rootfs != "" {
		c.RootFS = st.rootfs
	}
	c.ImagesDir = cfg.Images()
	c.StateDir = filepath.Join(cfg.StateDir, st.name) // each server locks its own
	return c
}

func benchMain(args []string) int {
	cfg := config.Default()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	cfg.Flags(fs)
	cells := fs.Int("cells", 500, "trivial cells to time")
	plots := fs.Int("plots", 50, "plot cells to time")
	starts := fs.Int("starts", 10, "new sessions and one-shots to time")
	idle := fs.Int("idle", 200, "idle warm sessions to measure memory over")
	setupList := fs.String("setups", "", "cellbox setups to measure one after the other, side by side: a comma list of runc, runc-image, docker, runsc, runsc-image, docker-runsc (default: the one --backend, --rootfs and --runtime say)")
	flowList := fs.String("flows", "", "Docker flows to measure after the setups, a comma list of docker-run, docker-exec, nbconvert (default: none)")
	flowRuns := fs.Int("flow-runs", 20, "runs of each workload in each Docker flow")
	dockerCLI := fs.String("docker-cli", "docker", "the docker command the flows run")
	languages := fs.String("languages", "", "instead of the setups: each of these languages (js, ts, r, bash; comma list) beside Python: new session → first result, a trivial cell, an idle session's memory")
	burst := fs.Int("burst", 0, "instead of the setups: N sessions created at once, each timed from create to its first result (print(1+1)), beside N bare python3 started at once")
	bursts := fs.Int("bursts", 3, "with --burst: how many bursts, one after the other, each after the warm pool has refilled")
	trace := fs.Bool("trace", false, "time the trivial cells once more with the "+api.TraceHeader+" header, and print where their time went, hop by hop (p50 of each), beside references for the ends: a loopback HTTP exchange, IPython's run_cell in a bare process")
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
	if cfg.MaxSessions < *idle+cfg.PoolSize+4 {
		cfg.MaxSessions = *idle + cfg.PoolSize + 4
	}
	sts := []setup{setupOf(cfg)}
	if *setupList != "" {
		var err error
		if sts, err = parseSetups(*setupList); err != nil {
			fmt.Fprintln(os.Stderr, "cellbox bench: --setups:", err)
			return 2
		}
	}
	var flows []flow
	if *flowList != "" {
		var err error
		if flows, err = parseFlows(*flowList); err != nil {
			fmt.Fprintln(os.Stderr, "cellbox bench: --flows:", err)
			return 2
		}
	}
	ctx := context.Background()
	n := benchN{cells: *cells, plots: *plots, starts: *starts, idle: *idle, flowRuns: *flowRuns, trace: *trace}
	if *burst > 0 {
		if cfg.MaxSessions < *burst+cfg.PoolSize+4 {
			cfg.MaxSessions = *burst + cfg.PoolSize + 4
		}
		if err := benchBurst(ctx, cfg, *burst, *bursts); err != nil {
			fmt.Fprintln(os.Stderr, "cellbox bench:", err)
			return 1
		}
		return 0
	}
	if *languages != "" {
		if err := benchLanguages(ctx, cfg, *languages, n); err != nil {
			fmt.Fprintln(os.Stderr, "cellbox bench:", err)
			return 1
		}
		return 0
	}
	var cols []column
	for _, st := range sts {
		c := st.apply(cfg)
		if err := c.Validate(); err != nil {
			fmt.Fprintf(os.Stderr, "cellbox bench: %s: bad settings:\n%v\n", st.name, err)
			return 2
		}
		r, err := benchSetup(ctx, c, st.name, n)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cellbox bench: %s: %v\n", st.name, err)
			return 1
		}
		cols = append(cols, r.column(st.name))
	}
	if len(flows) > 0 {
		fc, err := benchFlows(ctx, cfg, flows, *dockerCLI, *flowRuns)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cellbox bench: %v\n", err)
			return 1
		}
		cols = append(cols, fc...)
	}
	printTable(ctx, cfg.Python, n, len(flows) > 0, cols)
	return 0
}

// benchN is how many of each thing are timed, and whether the trivial cell is traced.
type benchN struct {
	cells, plots, starts, idle, flowRuns int
	trace                                bool
}

// benchSetup starts a server with cfg, measures it and stops it.
func benchSetup(ctx context.Context, cfg config.Config, name string, n benchN) (*benchResult, error) {
	b, stop, err := startBench(ctx, cfg, name)
	if err != nil {
		return nil, err
	}
	defer stop()
	return b.run(ctx, n)
}

// A column of the table: a setup or a Docker flow, its figure for each row key.
type column struct {
	name  string
	cells map[string]string
}

// The rows of the table, by key.
const (
	rowTrivial    = "trivial"
	rowKernel     = "kernel"
	rowIdle       = "kernel-idle"
	rowImport     = "import"
	rowPlot       = "plot"
	rowOnce       = "once"
	rowCold       = "cold"
	rowLimits     = "limits"
	rowEnv        = "env"
	rowRestart    = "restart"
	rowBurst      = "restart-burst"
	rowPSS        = "pss"
	rowCharge     = "charge"
	rowAvail      = "avail"
	rowWork       = "work"
	rowPause      = "pause"
	rowResume     = "resume"
	rowPaused     = "paused"
	rowFork       = "fork"
	rowResumedPSS = "resumed-pss"
)

// printTable prints one markdown table: a column per setup and flow, then the bare python3
// of this machine for reference.
func printTable(ctx context.Context, python string, n benchN, flows bool, cols []column) {
	bare := timeCmd(20, python, "-c", trivialCell)
	kernelRef, idleRef := jupyterClientRefs(ctx, python, n.cells)
	imports := timeCmd(5, python, "-c", importCell)
	plot := timeCmd(5, python, "-c", plotScript)
	print2 := timeCmd(20, python, "-c", "print(1+1)")
	bareRSS := bareImportRSS(python)

	per := ""
	if flows {
		per = fmt.Sprintf("; flows: one call, n=%d", n.flowRuns)
	}
	rows := []struct{ key, label, ref string }{
		{rowTrivial, fmt.Sprintf("trivial cell `x=1` (cellbox: warm session, REST round trip, n=%d%s)", n.cells, per),
			"bare `python3 -c 'x=1'` (a new process): " + ms(pct(bare, 50))},
		{rowKernel, fmt.Sprintf("the same over Jupyter's kernel websocket (cellbox: a kernel of `POST /api/kernels`, JSON text frames; execute_request sent → execute_reply read, n=%d)", n.cells), kernelRef},
		{rowIdle, "the same → its status idle read (after the reply)", idleRef},
	}
	if n.trace {
		rows = append(rows, traceRows(ctx, python, n.cells)...)
	}
	rows = append(rows, []struct{ key, label, ref string }{
		{rowImport, fmt.Sprintf("`import pandas, matplotlib.pyplot` (cellbox: new session → first result, warm pool, n=%d%s)", n.starts, per),
			"bare `python3 -c` of the same: " + ms(pct(imports, 50))},
		{rowPlot, fmt.Sprintf("plot `plt.plot([1, 2, 3])` → one PNG (cellbox: warm session, n=%d%s)", n.plots, per),
			"bare `python3 -c`, PNG to stdout: " + ms(pct(plot, 50))},
		{rowOnce, fmt.Sprintf("one-shot `print(1+1)`, warm pool, n=%d", n.starts), "bare `python3 -c 'print(1+1)'`: " + ms(pct(print2, 50))},
		{rowCold, fmt.Sprintf("one-shot `print(1+1)` with other limits (no pool before issue 11: new sandbox + kernel + pre-imports), n=%d", min(n.starts, 5)), ""},
		{rowLimits, fmt.Sprintf("the import cell in a new session with other limits (memory, pids), n=%d", n.starts), ""},
		{rowEnv, fmt.Sprintf("the import cell in a new session with env, n=%d", n.starts), ""},
		{rowRestart, fmt.Sprintf("kernel restart → a new kernel ready with the pre-imports, one at a time (%s apart), n=%d", restartGap, n.starts), ""},
		{rowBurst, fmt.Sprintf("the same, back to back, n=%d", n.starts), ""},
		{rowPSS, fmt.Sprintf("idle warm session, numpy + pandas + matplotlib imported: PSS of its processes (mean of %d)", min(n.idle, 20)),
			fmt.Sprintf("bare python3 with the same imports: %.1f MiB RSS", bareRSS/(1<<20))},
		{rowCharge, "the same: its cgroup's charge, anon + shmem (no page cache) → sessions in 24 GiB", ""},
		{rowAvail, "idle warm session: the host's available memory (MemAvailable) it takes, everything included (guest, kernel, page tables, the kernel's objects, the server's share) → sessions in 24 GiB", ""},
		{rowWork, "a session after a pandas describe() and a PNG plot: the available memory it takes beyond an idle one", ""},
		{rowPause, fmt.Sprintf("pause an idle session (pre-imports and a 1000×10 DataFrame) → its sandbox on disk and stopped, n=%d", n.starts), ""},
		{rowResume, fmt.Sprintf("resume it: a cell on the paused session → its first result, n=%d", n.starts), ""},
		{rowPaused, "a paused session: its checkpoint's size, and the host's available memory its pause gave back", ""},
		{rowResumedPSS, "a pausable session (under runc its kernel started in its sandbox, not forked from the template): PSS of its processes, mean of 5", ""},
		{rowFork, fmt.Sprintf("fork a session into 10 (each a copy of its kernel and workspace, ready), n=%d", min(3, n.starts)), ""},
	}...)
	fmt.Print("| figure |")
	for _, c := range cols {
		fmt.Printf(" %s |", c.name)
	}
	fmt.Print(" reference |\n| --- |")
	for range cols {
		fmt.Print(" --- |")
	}
	fmt.Println(" --- |")
	for _, r := range rows {
		fmt.Printf("| %s |", r.label)
		for _, c := range cols {
			v := c.cells[r.key]
			if v == "" {
				v = "—"
			}
			fmt.Printf(" %s |", v)
		}
		fmt.Printf(" %s |\n", r.ref)
	}
	fmt.Println("\nTimes: p50 / p99 where n ≥ 100, else p50 / max.")
}

// stat is a timing's cell: p50 / p99, or p50 / max when there are too few for a p99.
func stat(d []time.Duration) string {
	if len(d) == 0 {
		return ""
	}
	return ms(pct(d, 50)) + " / " + ms(pct(d, 99)) // p99 of fewer than 100 is the max
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

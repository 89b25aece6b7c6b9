package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/listen"
)

// The rows of --trace: the trivial cell's path, hop by hop (p50 of each hop's own time).
const (
	rowTraced  = "trace"
	rowHTTP    = "trace-http"
	rowServer  = "trace-server"
	rowChannel = "trace-channel"
	rowGuest   = "trace-guest"
	rowFiles   = "trace-files"
	rowPipe    = "trace-pipe"
	rowRunner  = "trace-runner"
	rowRunCell = "trace-run-cell"
)

// hops are a traced cell's times, each hop's own (a span less the spans it holds).
type hops map[string][]time.Duration

// tracedCells times n trivial cells with api.TraceHeader in one session, after warm
// untimed ones, and splits each along its Server-Timing entries.
func (b *bench) tracedCells(ctx context.Context, n, warm int) (hops, error) {
	s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		return nil, err
	}
	defer b.c.DeleteSession(ctx, s.ID)
	h := hops{}
	for i := -warm; i < n; i++ {
		t := time.Now()
		r, timings, err := b.c.ExecuteTraced(ctx, s.ID, api.ExecuteRequest{Code: trivialCell})
		if err != nil {
			return nil, err
		}
		total := time.Since(t)
		if r.Status != api.StatusOK {
			return nil, fmt.Errorf("%q: status %s %s", trivialCell, r.Status, r.Message)
		}
		span := map[string]time.Duration{}
		for _, tm := range timings {
			span[tm.Name] = tm.Dur
		}
		for _, name := range []string{"server", "guest_call", "guest", "files", "kernel", "runner", "run_cell"} {
			if _, ok := span[name]; !ok {
				return nil, fmt.Errorf("the answer's Server-Timing has no %s: %v", name, timings)
			}
		}
		if i < 0 {
			continue
		}
		h[rowTraced] = append(h[rowTraced], total)
		h[rowHTTP] = append(h[rowHTTP], total-span["server"])
		h[rowServer] = append(h[rowServer], span["server"]-span["guest_call"])
		h[rowChannel] = append(h[rowChannel], span["guest_call"]-span["guest"])
		h[rowGuest] = append(h[rowGuest], span["guest"]-span["files"]-span["kernel"])
		h[rowFiles] = append(h[rowFiles], span["files"])
		h[rowPipe] = append(h[rowPipe], span["kernel"]-span["runner"])
		h[rowRunner] = append(h[rowRunner], span["runner"]-span["run_cell"])
		h[rowRunCell] = append(h[rowRunCell], span["run_cell"])
	}
	return h, nil
}

// traceRows are the rows of --trace, with their same-run references: a loopback HTTP
// exchange of the same sizes, and IPython's run_cell in a bare process.
func traceRows(ctx context.Context, python string, n int) []struct{ key, label, ref string } {
	httpRef := "not measured"
	if d, err := loopbackExchanges(ctx, n); err == nil {
		httpRef = "a loopback HTTP exchange of the same sizes (Go client and server in one process): " + ms(pct(d, 50))
	}
	cellRef := "IPython's run_cell in a bare process: not measured"
	if d, err := bareRunCells(ctx, python, n); err == nil {
		cellRef = "IPython's run_cell of the same in a bare process (no runner, no sandbox): " + ms(pct(d, 50))
	} else {
		cellRef += ": " + err.Error()
	}
	return []struct{ key, label, ref string }{
		{rowTraced, fmt.Sprintf("the trivial cell again, traced (`%s` header), n=%d: round trip; then each hop's own time, p50 (p50s do not add up)", api.TraceHeader, n), ""},
		{rowHTTP, "… client, loopback HTTP and net/http (round trip − server)", httpRef},
		{rowServer, "… server: handler, session lookup, admission, its own JSON (server − guest_call)", ""},
		{rowChannel, "… server ↔ guest: yamux stream over the Unix socket, both ends' JSON (guest_call − guest)", ""},
		{rowGuest, "… guest's own work (guest − files − kernel)", ""},
		{rowFiles, "… guest's workspace scans before and after (files)", ""},
		{rowPipe, "… guest ↔ runner: the pipes, both ends' JSON (kernel − runner)", ""},
		{rowRunner, "… runner's own work (runner − run_cell)", ""},
		{rowRunCell, "… IPython's run_cell", cellRef},
	}
}

// loopbackExchanges times n POSTs of a trivial cell's request to an in-process HTTP server
// on loopback that answers with a trivial cell's result: the floor of a REST round trip.
func loopbackExchanges(ctx context.Context, n int) ([]time.Duration, error) {
	ln, err := listen.TCP("cellbox bench's reference server", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	res, _ := json.Marshal(api.ExecuteResult{Status: api.StatusOK, ExecutionCount: 1, Outputs: []api.Output{}, Files: []api.FileChange{}})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.ExecuteRequest
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		w.Write(res)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	c := client.New("http://" + ln.Addr().String())
	var d []time.Duration
	for i := -20; i < n; i++ {
		t := time.Now()
		if _, err := c.Execute(ctx, "s", api.ExecuteRequest{Code: trivialCell}); err != nil {
			return nil, err
		}
		if i >= 0 {
			d = append(d, time.Since(t))
		}
	}
	return d, nil
}

// bareRunCell times IPython's run_cell of argv[2], argv[1] times after 20 untimed, in a
// shell of its own: one line of nanoseconds.
const bareRunCell = `import sys, time
from IPython.core.interactiveshell import InteractiveShell
sh = InteractiveShell.instance()
out = []
for i in range(-20, int(sys.argv[1])):
    t = time.perf_counter_ns()
    sh.run_cell(sys.argv[2], store_history=True)
    if i >= 0:
        out.append(time.perf_counter_ns() - t)
sys.__stdout__.write(" ".join(map(str, out)) + "\n")
`

// bareRunCells times IPython's run_cell of the trivial cell in a bare python process.
func bareRunCells(ctx context.Context, python string, n int) ([]time.Duration, error) {
	cmd := exec.CommandContext(ctx, python, "-c", bareRunCell, strconv.Itoa(n), trivialCell)
	cmd.Stderr = io.Discard
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", python, err)
	}
	f := strings.Fields(string(out))
	var d []time.Duration
	for _, s := range f {
		ns, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("not the script's figures: %.100s", out)
		}
		d = append(d, time.Duration(ns))
	}
	if len(d) != n {
		return nil, fmt.Errorf("not the script's figures: %.100s", out)
	}
	return d, nil
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox/docker"
)

// flow is a way people run Python in Docker today, without cellbox: the baseline cellbox's
// setups are measured against. Flows run the docker command, as their users do.
type flow struct {
	name  string
	image string // the cellbox image its containers run (cellbox/NAME in the engine)
	// notebook: the code runs as a notebook's one cell (plotCell); else as python3 -c
	// (plotScript).
	notebook bool
}

// flows are the names --flows takes.
var flows = []flow{
	// docker run --rm IMAGE python3 -c CODE: a container per call.
	{name: "docker-run", image: image.DefaultName},
	// docker exec CONTAINER python3 -c CODE into one long-lived container.
	{name: "docker-exec", image: image.DefaultName},
	// docker run --rm IMAGE jupyter nbconvert --execute of a one-cell notebook, per call.
	{name: "nbconvert", image: "bench", notebook: true},
}

func parseFlows(s string) ([]flow, error) {
	var out []flow
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(flows, func(f flow) bool { return f.name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown flow %q: choose among docker-run, docker-exec, nbconvert", name)
		}
		if slices.ContainsFunc(out, func(f flow) bool { return f.name == name }) {
			return nil, fmt.Errorf("flow %s is given twice", name)
		}
		out = append(out, flows[i])
	}
	return out, nil
}

// flowWorkload is a row's code as a flow runs it.
type flowWorkload struct {
	row          string
	cell, script string
	png          bool // the result must hold the plot's PNG
}

var flowWorkloads = []flowWorkload{
	{row: rowTrivial, cell: trivialCell, script: trivialCell},
	{row: rowImport, cell: importCell, script: importCell},
	{row: rowPlot, cell: plotCell, script: plotScript, png: true},
}

// flowRunner runs the flows' containers with the docker command cli.
type flowRunner struct {
	cli  string
	env  map[string][]string // docker run's -e flags per image
	ref  map[string]string   // the engine's id of each image
	exec string              // docker-exec's long-lived container
}

// benchFlows makes the flows' images ready in the engine (imported from the image store as
// the docker backend does), then times n runs of each workload in each flow.
func benchFlows(ctx context.Context, cfg config.Config, fl []flow, cli string, n int) ([]column, error) {
	fr := &flowRunner{cli: cli, env: map[string][]string{}, ref: map[string]string{}}
	store := image.NewStore(cfg.Images(), image.DefaultMirror)
	be, err := docker.New(docker.Config{Host: cfg.DockerHost, StateDir: filepath.Join(cfg.StateDir, "flows"), Images: store})
	if err != nil {
		return nil, err
	}
	defer be.Close()
	for _, f := range fl {
		if _, ok := fr.env[f.image]; ok {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: flows: making image %s ready in the Docker engine\n", f.image)
		id, err := be.ImageID(ctx, f.image)
		if err != nil {
			return nil, fmt.Errorf("flow %s: %w", f.name, err)
		}
		fr.ref[f.image] = id
		fr.env[f.image] = nil
		// The sandboxes' matplotlib font cache, which a well-made image would hold too.
		if im, err := store.Get(f.image); err == nil && im.MPLCache {
			fr.env[f.image] = []string{"-e", "MPLCONFIGDIR=" + image.MPLCachePath}
		}
	}
	var cols []column
	for _, f := range fl {
		if f.name == "docker-exec" {
			stop, err := fr.startExec(ctx, f)
			if err != nil {
				return nil, err
			}
			defer stop()
		}
		col := column{name: f.name, cells: map[string]string{}}
		for _, w := range flowWorkloads {
			fmt.Fprintf(os.Stderr, "bench: %s: %s ×%d\n", f.name, w.row, n)
			var d []time.Duration
			for i := -1; i < n; i++ { // one warm-up run
				t := time.Now()
				if err := fr.run(ctx, f, w); err != nil {
					return nil, fmt.Errorf("flow %s, %s: %w", f.name, w.row, err)
				}
				if i >= 0 {
					d = append(d, time.Since(t))
				}
			}
			col.cells[w.row] = stat(d)
		}
		cols = append(cols, col)
	}
	return cols, nil
}

// startExec starts docker-exec's long-lived container; stop removes it.
func (fr *flowRunner) startExec(ctx context.Context, f flow) (stop func(), err error) {
	name := fmt.Sprintf("cellbox-bench-exec-%d", os.Getpid())
	args := append([]string{"run", "-d", "--rm", "--network", "none", "--name", name}, fr.env[f.image]...)
	args = append(args, fr.ref[f.image], "sleep", "infinity")
	if _, err := fr.docker(ctx, nil, args...); err != nil {
		return nil, fmt.Errorf("flow %s: start its container: %w", f.name, err)
	}
	fr.exec = name
	return func() {
		fr.docker(context.WithoutCancel(ctx), nil, "rm", "-f", name)
	}, nil
}

// run runs w once the way f does, and checks what came back.
func (fr *flowRunner) run(ctx context.Context, f flow, w flowWorkload) error {
	run := append([]string{"run", "--rm", "--network", "none"}, fr.env[f.image]...)
	var args []string
	var stdin []byte
	switch f.name {
	case "docker-run":
		args = append(run, fr.ref[f.image], "python3", "-c", w.script)
	case "docker-exec":
		args = []string{"exec", fr.exec, "python3", "-c", w.script}
	case "nbconvert":
		args = append(run, "-i", fr.ref[f.image], "jupyter", "nbconvert", "--to", "notebook", "--execute", "--stdin", "--stdout")
		stdin = notebook(w.cell)
	}
	out, err := fr.docker(ctx, stdin, args...)
	if err != nil {
		return err
	}
	switch {
	case !w.png:
	case f.notebook:
		if got := bytes.Count(out, []byte(`"image/png"`)); got != 1 {
			return fmt.Errorf("the executed notebook holds %d PNGs, want 1", got)
		}
	case !bytes.HasPrefix(out, pngMagic):
		return fmt.Errorf("no PNG on stdout")
	}
	return nil
}

// docker runs the docker command and returns its stdout.
func (fr *flowRunner) docker(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, fr.cli, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		return nil, fmt.Errorf("%s %s: %w: %s", fr.cli, args[0], err, msg)
	}
	return out, nil
}

// notebook is a notebook (nbformat 4) of one code cell.
func notebook(code string) []byte {
	nb := map[string]any{
		"nbformat": 4, "nbformat_minor": 4,
		"metadata": map[string]any{
			"kernelspec": map[string]string{"name": "python3", "display_name": "Python 3", "language": "python"},
		},
		"cells": []map[string]any{{
			"cell_type": "code", "execution_count": nil, "metadata": map[string]any{}, "outputs": []any{}, "source": code,
		}},
	}
	b, _ := json.Marshal(nb)
	return b
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/testbin"
)

func TestParseSetups(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string // names; nil: an error
	}{
		{"runc", []string{"runc"}},
		{"runc, runc-image,docker,runsc,runsc-image,docker-runsc", []string{"runc", "runc-image", "docker", "runsc", "runsc-image", "docker-runsc"}},
		{"docker,runc,", []string{"docker", "runc"}},
		{"", nil},
		{",", nil},
		{"runc,runc", nil},
		{"crun", nil},
		{"local-unsafe", nil},
	} {
		got, err := parseSetups(tt.in)
		if tt.want == nil {
			if err == nil {
				t.Errorf("parseSetups(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		var names []string
		for _, st := range got {
			names = append(names, st.name)
		}
		if err != nil || !slices.Equal(names, tt.want) {
			t.Errorf("parseSetups(%q) = %v, %v; want %v", tt.in, names, err, tt.want)
		}
	}
}

// Every setup is a valid configuration, on its own state folder under the bench's, with
// the bench's images, and its name is what the same flags give without --setups.
func TestSetupApply(t *testing.T) {
	base := config.Default()
	base.StateDir = "/s"
	for _, st := range setups {
		t.Run(st.name, func(t *testing.T) {
			c := st.apply(base)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if c.StateDir != "/s/"+st.name || c.Images() != "/s/images" {
				t.Errorf("state dir %s, images %s; want /s/%s, /s/images", c.StateDir, c.Images(), st.name)
			}
			if got := setupOf(c).name; got != st.name {
				t.Errorf("setupOf(its config) = %s", got)
			}
			if image := c.DefaultImage() != ""; image != (st.rootfs != "host") {
				t.Errorf("runs on an image: %v, want %v", image, st.rootfs != "host")
			}
		})
	}
	base.ImagesDir = "/images"
	if c := setups[1].apply(base); c.Images() != "/images" {
		t.Errorf("--images-dir /images: a setup's images are %s", c.Images())
	}
}

func TestParseFlows(t *testing.T) {
	got, err := parseFlows("nbconvert, docker-run")
	if err != nil || len(got) != 2 || got[0].name != "nbconvert" || got[1].name != "docker-run" {
		t.Errorf("parseFlows = %v, %v", got, err)
	}
	for _, bad := range []string{"docker-run,docker-run", "podman"} {
		if _, err := parseFlows(bad); err == nil {
			t.Errorf("parseFlows(%q): no error", bad)
		}
	}
}

// The nbconvert flow's image is the default image and a notebook runner.
func TestBenchList(t *testing.T) {
	f, err := os.Open("../../scripts/bench.list")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bench, err := image.Parse("bench", f)
	if err != nil {
		t.Fatal(err)
	}
	def := image.Default()
	if bench.Suite != def.Suite {
		t.Errorf("suite %s, the default image's is %s", bench.Suite, def.Suite)
	}
	for _, p := range append(def.Debian, "jupyter-nbconvert", "python3-ipykernel") {
		if !slices.Contains(bench.Debian, p) {
			t.Errorf("scripts/bench.list lacks %s", p)
		}
	}
}

func TestNotebook(t *testing.T) {
	var nb struct {
		NBFormat int `json:"nbformat"`
		Cells    []struct {
			Type   string `json:"cell_type"`
			Source string `json:"source"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(notebook(plotCell), &nb); err != nil {
		t.Fatal(err)
	}
	if nb.NBFormat != 4 || len(nb.Cells) != 1 || nb.Cells[0].Type != "code" || nb.Cells[0].Source != plotCell {
		t.Errorf("notebook = %+v", nb)
	}
}

// The websocket's row and its reference, each with a few cells: figures come back, the
// status idle after the reply. On the local-unsafe backend: the protocol is the subject, not
// the sandbox.
func TestBenchKernelWebsocket(t *testing.T) {
	testbin.NeedIPython(t, "jupyter_client", "ipykernel")
	s, cfg := localServer(t, nil)
	b, err := newBench(s.URL, cfg, "local-unsafe")
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	check := func(what string, reply, idle []time.Duration, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(reply) != 3 || len(idle) != 3 {
			t.Fatalf("%s: %d replies and %d idles timed, want 3 each", what, len(reply), len(idle))
		}
		for i := range reply {
			if reply[i] <= 0 || idle[i] < reply[i] {
				t.Errorf("%s: cell %d: reply after %v, idle after %v", what, i, reply[i], idle[i])
			}
		}
	}
	reply, idle, err := b.kernelCells(t.Context(), 3, 1)
	check("the websocket", reply, idle, err)
	reply, idle, err = jupyterClientCells(t.Context(), cfg.Python, 3, 1)
	check("jupyter_client", reply, idle, err)

	// A python without them (-S: no site, so no dist-packages): the reference says so,
	// and the bench goes on.
	py := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(py, []byte("#!/bin/sh\nexec "+cfg.Python+" -S \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if r, _ := jupyterClientRefs(t.Context(), py, 3); !strings.Contains(r, "not measured") || !strings.Contains(r, "python3-ipykernel") {
		t.Errorf("the reference without ipykernel: %q", r)
	}
}

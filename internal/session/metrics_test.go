package session

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
)

// A sandbox's start is timed phase by phase: one observation of each for a new session.
func TestStartPhases(t *testing.T) {
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.Preimport = ""
	cfg.PoolSize = 0
	reg := prometheus.NewRegistry()
	m := startManager(t, cfg, localBackend(t), filepath.Join(cfg.StateDir, "workspaces"), reg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := m.Create(ctx, api.CreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	for _, f := range families {
		if f.GetName() != "cellbox_sandbox_start_phase_seconds" {
			continue
		}
		for _, mt := range f.GetMetric() {
			if n := mt.GetHistogram().GetSampleCount(); n != 1 {
				t.Errorf("%v: %d observations, want 1", mt.GetLabel(), n)
			}
			phases = append(phases, mt.GetLabel()[0].GetValue())
		}
	}
	slices.Sort(phases)
	if want := []string{"configure", "connect", "runtime", "workspace"}; !slices.Equal(phases, want) {
		t.Errorf("phases %q, want %q", phases, want)
	}
}

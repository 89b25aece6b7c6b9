package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cellbox/cellbox/internal/config"
)

// TestStateDirLock starts two servers on one state dir: the second fails, naming the first's
// pid, until the first has shut down.
func TestStateDirLock(t *testing.T) {
	cfg := config.Default()
	cfg.Backend = "local-unsafe" // starts no sandbox: no pool
	cfg.PoolSize = 0
	cfg.Addr = "127.0.0.1:0"
	cfg.StateDir = t.TempDir()
	opts := Options{Logger: slog.New(slog.DiscardHandler), Quiet: true}
	ctx := context.Background()

	first, err := Start(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(ctx, cfg, opts)
	want := fmt.Sprintf("another cellbox server uses state dir %s (pid %d)", cfg.StateDir, os.Getpid())
	if !errors.Is(err, ErrStateDirInUse) || err.Error() != want {
		t.Errorf("second Start: %v, want %q", err, want)
	}
	// Another state dir, even inside this one (the CLI's embedded slots), is free.
	other := cfg
	other.StateDir = filepath.Join(cfg.StateDir, "embedded", "0")
	inner, err := Start(ctx, other, opts)
	if err != nil {
		t.Fatalf("Start in a subfolder: %v", err)
	}
	if err := inner.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := Start(ctx, cfg, opts)
	if err != nil {
		t.Fatalf("Start after Shutdown: %v", err)
	}
	if err := again.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

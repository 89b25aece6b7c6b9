package server

import (
	"context"
	"log/slog"
	"testing"

	"github.com/cellbox/cellbox/internal/config"
)

// TestNoListen starts a server for use in process (cellbox mcp): a manager and the MCP
// server, no HTTP listener; it shuts down cleanly.
func TestNoListen(t *testing.T) {
	cfg := config.Default()
	cfg.Backend = "local-unsafe" // starts no sandbox: no pool
	cfg.PoolSize = 0
	cfg.Addr = "256.0.0.1:0" // would fail to listen
	cfg.StateDir = t.TempDir()
	s, err := Start(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Quiet: true, NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.URL != "" || s.http != nil || s.Manager == nil || s.MCP == nil {
		t.Errorf("URL %q, http %v, manager %v, MCP %v; want a manager and MCP, no HTTP", s.URL, s.http, s.Manager, s.MCP)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

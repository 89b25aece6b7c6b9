package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/move"
	"github.com/cellbox/cellbox/internal/server"
)

func init() {
	register("serve", "run the cellbox server (REST API, MCP at /mcp, the agent loop, metrics)", serveMain)
}

func serveMain(args []string) int {
	cfg := config.Default()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.Flags(fs)
	if err := config.Load(fs, args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, "cellbox serve:", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "cellbox serve: bad settings:\n", err)
		return 2
	}
	// Keys come from the variable and the file only: on a command line, ps would show them.
	keys, err := auth.Load(os.Getenv("CELLBOX_API_KEYS"), cfg.APIKeysFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cellbox serve: API keys:", err)
		return 2
	}
	secret := os.Getenv("CELLBOX_CLUSTER_SECRET")
	if secret != "" && (len(secret) < move.MinSecret || strings.ContainsAny(secret, " \t\r\n")) {
		fmt.Fprintf(os.Stderr, "cellbox serve: CELLBOX_CLUSTER_SECRET: want at least %d characters and no spaces (e.g. head -c 32 /dev/urandom | base64)\n", move.MinSecret)
		return 2
	}
	log := server.NewLogger(cfg.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The cluster's secret likewise: from the environment only (a Kubernetes Secret).
	s, err := server.Start(ctx, cfg, server.Options{Logger: log, Keys: keys, ClusterSecret: secret})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cellbox serve:", err)
		return 1
	}
	log.Info("cellbox serving", "url", s.URL, "backend", cfg.Backend, "state_dir", cfg.StateDir, "pool_size", cfg.PoolSize)
	if !cfg.NoWeb {
		fmt.Fprintf(os.Stderr, "cellbox: open %s in a browser: chat with a model about your files, or use the notebook\n", browserURL(s.URL))
	}
	<-ctx.Done()
	stop()
	if cfg.EndSessionsOnExit {
		log.Info("shutting down: interrupting running cells, ending every session; workspaces are kept")
	} else {
		log.Info("shutting down: interrupting running cells; sessions live on for the next server on this state dir")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		log.Error("shutdown", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

// browserURL is url with a wildcard listen address (0.0.0.0, [::]) replaced by loopback, an
// address a browser on this machine can open.
func browserURL(url string) string {
	for _, any := range []string{"//0.0.0.0:", "//[::]:"} {
		if strings.Contains(url, any) {
			return strings.Replace(url, any, "//127.0.0.1:", 1)
		}
	}
	return url
}

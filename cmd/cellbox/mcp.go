package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/server"
)

func init() {
	register("mcp", "serve the python and shell tools over MCP on stdin/stdout (Claude Desktop, Cursor, ...)", mcpMain)
}

// mcpMain serves one MCP connection on stdin/stdout with a session manager in this process
// (no listener). Stdout carries the protocol only: logs go to stderr. It ends, deleting its
// sessions, when stdin closes or on SIGTERM or SIGINT.
func mcpMain(args []string) int {
	cfg := config.Default()
	cfg.PoolSize = 1 // the first call finds a warm sandbox; more would idle
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	cfg.Flags(fs)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, "Usage: cellbox mcp [flags]\n\nServes the python and shell tools over MCP on stdin/stdout (logs on stderr) until\n"+
			"stdin closes. The runc backend needs root. Settings are those of cellbox serve (--addr is\nunused); see docs/mcp.md.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := config.Load(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "cellbox mcp:", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "cellbox mcp: bad settings:\n", err)
		return 2
	}
	// Nothing but the protocol may reach stdout.
	stdout := os.Stdout
	os.Stdout = os.Stderr
	log := server.NewLogger(cfg.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// A slot of its own, as run and repl take: Claude Desktop may start several cellbox mcp,
	// and a cellbox serve may use the state dir too.
	s, err := startEmbedded(ctx, cfg, server.Options{Logger: log, NoListen: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cellbox mcp:", err)
		return 1
	}
	log.Info("cellbox mcp serving on stdio", "backend", cfg.Backend, "state_dir", cfg.StateDir)
	done := make(chan error, 1)
	go func() { done <- s.MCP.Run(context.Background(), &mcp.IOTransport{Reader: os.Stdin, Writer: stdout}) }()
	select {
	case err := <-done:
		if err != nil {
			log.Warn("mcp connection", "err", err)
		}
		log.Info("stdin closed; shutting down")
	case <-ctx.Done():
		log.Info("signal; shutting down")
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		log.Error("shutdown", "err", err)
		return 1
	}
	return 0
}

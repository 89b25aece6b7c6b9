package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/httpapi"
	"github.com/cellbox/cellbox/internal/jupyter"
	"github.com/cellbox/cellbox/internal/mcpserver"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/statefile"
)

// newJupyter makes Jupyter's kernel API (package jupyter), unless --no-jupyter.
func newJupyter(cfg config.Config, m *session.Manager, secret string, log *slog.Logger) (*jupyter.Handler, error) {
	if cfg.NoJupyter {
		return nil, nil
	}
	if cfg.JupyterOpenChannels && cfg.Cluster != "" && secret == "" {
		return nil, errors.New("--jupyter-open-channels in a cluster needs the cluster's secret (CELLBOX_CLUSTER_SECRET): " +
			"kernel ids are sealed with a key made from it, and without one they could be made from session ids")
	}
	key, err := kernelIDKey(cfg, secret)
	if err != nil {
		return nil, err
	}
	return jupyter.New(m, jupyter.Options{IDKey: key, OpenChannels: cfg.JupyterOpenChannels, Version: mcpserver.Version,
		CellTimeout: cfg.MaxExecTimeout, MaxMessageBytes: cfg.MaxBodyBytes, Elsewhere: httpapi.Elsewhere, Logger: log})
}

// kernelIDKey is the key that seals session ids into Jupyter kernel ids. A single server
// keeps a random one in its state dir; a cluster's nodes make the same from the cluster's
// secret (without a secret, from the cluster's name: ids then route but are no secret).
func kernelIDKey(cfg config.Config, secret string) ([]byte, error) {
	if cfg.Cluster != "" {
		seed := secret
		if seed == "" {
			seed = "cellbox cluster " + cfg.Cluster
		}
		mac := hmac.New(sha256.New, []byte(seed))
		mac.Write([]byte("cellbox jupyter kernel ids"))
		return mac.Sum(nil)[:16], nil
	}
	dir := filepath.Join(cfg.StateDir, "jupyter")
	path := filepath.Join(dir, "ids.key")
	key, err := os.ReadFile(path)
	if err == nil && len(key) == 16 {
		return key, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read the Jupyter kernel id key: %w", err)
	}
	key = make([]byte, 16)
	rand.Read(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("make the Jupyter kernel id key: %w", err)
	}
	if err := statefile.Write(path, key, 0o600); err != nil {
		return nil, fmt.Errorf("make the Jupyter kernel id key: %w", err)
	}
	return key, nil
}

package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/agent"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
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

func TestProvidersApplyTheDefaults(t *testing.T) {
	cfg := config.Default()
	cfg.Model, cfg.BaseURL = "llama3.1", "http://127.0.0.1:11434/v1"
	tests := []struct {
		openaiKey, anthropicKey string
		name                    string
		provider, model         string
	}{
		{"sk-x", "", "", "openai", "llama3.1"},
		{"sk-x", "", "openai", "openai", "llama3.1"}, // naming the default provider keeps --model
		{"sk-x", "sk-y", "anthropic", "anthropic", agent.DefaultAnthropicModel},
		{"", "sk-y", "", "anthropic", "llama3.1"},
	}
	for _, tt := range tests {
		t.Setenv("OPENAI_API_KEY", tt.openaiKey)
		t.Setenv("ANTHROPIC_API_KEY", tt.anthropicKey)
		p, model, err := providers(cfg)(tt.name)
		if err != nil || p.Name() != tt.provider || model != tt.model {
			t.Errorf("%+v: %v %q %v", tt, p, model, err)
		}
	}
	if _, _, err := providers(cfg)("gemini"); errdefs.Code(err) != api.CodeInvalidArgument {
		t.Errorf("unknown provider: %v", err)
	}
}

func TestProviderList(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-x")
	t.Setenv("ANTHROPIC_API_KEY", "sk-y")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("ANTHROPIC_BASE_URL", "")
	tests := []struct {
		provider string
		want     string // the names listed, the default starred
	}{
		// openai-responses takes openai's key: listed only when named, not twice by default.
		{"", "openai* anthropic"},
		{"anthropic", "openai anthropic*"},
		{"openai-responses", "openai openai-responses* anthropic"},
	}
	for _, tt := range tests {
		t.Run(tt.provider, func(t *testing.T) {
			cfg := config.Default()
			cfg.Provider = tt.provider
			var got []string
			for _, p := range providerList(cfg) {
				name := p.Name
				if p.Default {
					name += "*"
				}
				got = append(got, name)
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("providers = %v, want %s", got, tt.want)
			}
		})
	}
}

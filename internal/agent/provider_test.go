package agent_test

import (
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/agent"
	"github.com/cellbox/cellbox/internal/errdefs"
)

func TestNewProvider(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-x")
	t.Setenv("ANTHROPIC_API_KEY", "sk-y")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("ANTHROPIC_BASE_URL", "")
	tests := []struct {
		name, model       string
		wantName, wantMdl string
	}{
		{"", "", api.ProviderOpenAI, agent.DefaultOpenAIModel},
		{api.ProviderOpenAI, "llama3", api.ProviderOpenAI, "llama3"},
		{api.ProviderOpenAIResponses, "", api.ProviderOpenAIResponses, agent.DefaultOpenAIModel},
		{api.ProviderOpenAIResponses, "gpt-oss", api.ProviderOpenAIResponses, "gpt-oss"},
		{api.ProviderAnthropic, "", api.ProviderAnthropic, agent.DefaultAnthropicModel},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.model, func(t *testing.T) {
			p, model, err := agent.NewProvider(agent.ProviderConfig{Name: tt.name, Model: tt.model})
			if err != nil || p.Name() != tt.wantName || model != tt.wantMdl {
				t.Errorf("got %v %q %v, want %s %s", p, model, err, tt.wantName, tt.wantMdl)
			}
		})
	}
	_, _, err := agent.NewProvider(agent.ProviderConfig{Name: "gemini"})
	if errdefs.Code(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), api.ProviderOpenAIResponses) {
		t.Errorf("unknown provider: %v, want invalid_argument naming the choices", err)
	}
	// The Responses provider shares openai's variables: without a key for api.openai.com
	// it cannot be set up.
	t.Setenv("OPENAI_API_KEY", "")
	_, _, err = agent.NewProvider(agent.ProviderConfig{Name: api.ProviderOpenAIResponses})
	if errdefs.Code(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("no key: %v, want unavailable naming OPENAI_API_KEY", err)
	}
}

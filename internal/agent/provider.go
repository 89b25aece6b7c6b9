package agent

import (
	"fmt"
	"net/http"
	"os"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/anthropic"
	"github.com/cellbox/cellbox/internal/llm/openai"
)

// Default models, when none is named.
const (
	DefaultOpenAIModel    = "gpt-5"
	DefaultAnthropicModel = "claude-sonnet-4-5"
)

// ProviderConfig names a model API. Credentials and base URLs not given here come from the
// providers' own variables: OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY,
// ANTHROPIC_BASE_URL.
type ProviderConfig struct {
	Name       string // api.ProviderOpenAI | api.ProviderOpenAIResponses | api.ProviderAnthropic | "": Anthropic if only ANTHROPIC_API_KEY is set, else OpenAI
	Model      string // "": the provider's default model
	BaseURL    string
	APIKey     string
	HTTPClient *http.Client
}

// NewProvider returns the provider and the model to use. An unknown name is
// invalid_argument; a provider that cannot be set up (no key, a bad base URL) unavailable.
func NewProvider(c ProviderConfig) (llm.Provider, string, error) {
	name := c.Name
	if name == "" {
		name = DefaultProvider()
	}
	var p llm.Provider
	var err error
	model := c.Model
	switch name {
	case api.ProviderOpenAI:
		if model == "" {
			model = DefaultOpenAIModel
		}
		p, err = openai.New(openai.Options{APIKey: c.APIKey, BaseURL: c.BaseURL, HTTPClient: c.HTTPClient})
	case api.ProviderOpenAIResponses:
		if model == "" {
			model = DefaultOpenAIModel
		}
		p, err = openai.NewResponses(openai.Options{APIKey: c.APIKey, BaseURL: c.BaseURL, HTTPClient: c.HTTPClient})
	case api.ProviderAnthropic:
		if model == "" {
			model = DefaultAnthropicModel
		}
		p, err = anthropic.New(anthropic.Options{APIKey: c.APIKey, BaseURL: c.BaseURL, HTTPClient: c.HTTPClient})
	default:
		return nil, "", errdefs.New(api.CodeInvalidArgument, fmt.Sprintf("unknown provider %q: choose %s (Chat Completions: OpenAI, Ollama, vLLM, ...), %s (OpenAI's Responses API) or %s", name, api.ProviderOpenAI, api.ProviderOpenAIResponses, api.ProviderAnthropic))
	}
	if err != nil {
		// A missing key or a bad base URL: the setup of whoever runs cellbox, not the
		// request's fault.
		return nil, "", errdefs.New(api.CodeUnavailable, err.Error())
	}
	return p, model, nil
}

// DefaultProvider is the provider when none is named: Anthropic when only ANTHROPIC_API_KEY
// is set, else OpenAI.
func DefaultProvider() string {
	if os.Getenv("OPENAI_API_KEY") == "" && os.Getenv("ANTHROPIC_API_KEY") != "" {
		return api.ProviderAnthropic
	}
	return api.ProviderOpenAI
}

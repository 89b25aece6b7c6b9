package llm

import (
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Endpoint says where a provider finds its API: its variables, its default base URL, and the
// host that cannot be used without a key.
type Endpoint struct {
	Provider    string // "openai", in messages
	KeyEnv      string // OPENAI_API_KEY
	BaseEnv     string // OPENAI_BASE_URL
	DefaultBase string // https://api.openai.com/v1
	KeyHost     string // api.openai.com: the host that needs a key
	NoKeyHint   string // added to the missing-key message; may be ""
}

// Resolve returns the API key and the base URL: the ones given, else the variables', else
// the default base. It fails on a base URL that is not http(s) and on a missing key for
// KeyHost; it does not connect.
func (e Endpoint) Resolve(key, base string) (string, *url.URL, error) {
	if key == "" {
		key = os.Getenv(e.KeyEnv)
	}
	if base == "" {
		base = os.Getenv(e.BaseEnv)
	}
	if base == "" {
		base = e.DefaultBase
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", nil, errdefs.New(api.CodeInvalidArgument, e.Provider+": the base URL must be an http:// or https:// URL, like "+e.DefaultBase)
	}
	if key == "" && u.Hostname() == e.KeyHost {
		msg := e.Provider + ": no API key: set " + e.KeyEnv
		if e.NoKeyHint != "" {
			msg += " (" + e.NoKeyHint + ")"
		}
		return "", nil, errdefs.New(api.CodeFailedPrecondition, msg)
	}
	return key, u, nil
}

// StatusError classifies a failed HTTP status of the API, adding to msg (the message so far)
// what a person can do about it, with key kept out: 401 and 403 are unavailable and name
// KeyEnv (not the caller's fault: over REST, the server's model API refused it), 429 is
// resource_exhausted, another 4xx invalid_argument, anything else unavailable.
func (e Endpoint) StatusError(status int, msg, key string) error {
	code := api.CodeUnavailable
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		msg += "; set " + e.KeyEnv + " to a valid key"
	case status == http.StatusTooManyRequests:
		code = api.CodeResourceExhausted
	case status >= 400 && status < 500:
		code = api.CodeInvalidArgument
	}
	return errdefs.New(code, Redact(msg, key))
}

// Redact keeps an API key out of a message.
func Redact(s, key string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[API key]")
}

package errhttp

import (
	"errors"
	"net/http"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Every code has a status of its own, and comes back from it: code → status → code.
func TestRoundTrip(t *testing.T) {
	byStatus := map[int]string{}
	for _, code := range errdefs.Codes() {
		st := Status(code)
		if other, ok := byStatus[st]; ok {
			t.Errorf("codes %q and %q share status %d", code, other, st)
		}
		byStatus[st] = code
		if st < 400 || st > 599 {
			t.Errorf("Status(%q) = %d, not an error status", code, st)
		}
		if code != api.CodeInternal && st == http.StatusInternalServerError {
			t.Errorf("code %q has no status of its own", code)
		}
		if got := ToHTTP(errdefs.New(code, "x")); got != st {
			t.Errorf("ToHTTP(New(%q)) = %d, want %d", code, got, st)
		}
		if got := Code(st); got != code {
			t.Errorf("Code(%d) = %q, want %q", st, got, code)
		}
		err := ToNative(st, "the message")
		if got := errdefs.Code(err); got != code || err.Error() != "the message" {
			t.Errorf("ToNative(%d) = %q (%v), want code %q", st, got, err, code)
		}
	}
}

// What REST v1 answers for each code; clients depend on these (see openapi.json).
func TestStatuses(t *testing.T) {
	for code, want := range map[string]int{
		api.CodeInvalidArgument: 400, api.CodeUnauthenticated: 401, api.CodePermissionDenied: 403,
		api.CodeNotFound: 404, api.CodeFailedPrecondition: 409, api.CodeTooLarge: 413,
		api.CodeResourceExhausted: 429, api.CodeCanceled: 499, api.CodeInternal: 500,
		api.CodeUnavailable: 503, "no_such_code": 500,
	} {
		if got := Status(code); got != want {
			t.Errorf("Status(%q) = %d, want %d", code, got, want)
		}
	}
	if got := ToHTTP(errors.New("unclassified")); got != 500 {
		t.Errorf("ToHTTP(unclassified) = %d, want 500", got)
	}
}

// A status that no code has (a proxy's, a router's) gets the nearest code.
func TestCodeOfOtherStatuses(t *testing.T) {
	for st, want := range map[int]string{
		http.StatusMethodNotAllowed:        api.CodeInvalidArgument,
		http.StatusUnsupportedMediaType:    api.CodeInvalidArgument,
		http.StatusTeapot:                  api.CodeInvalidArgument,
		http.StatusBadGateway:              api.CodeUnavailable,
		http.StatusGatewayTimeout:          api.CodeUnavailable,
		http.StatusNotImplemented:          api.CodeInternal,
		http.StatusOK:                      api.CodeInternal,
		http.StatusHTTPVersionNotSupported: api.CodeInternal,
	} {
		if got := Code(st); got != want {
			t.Errorf("Code(%d) = %q, want %q", st, got, want)
		}
	}
}

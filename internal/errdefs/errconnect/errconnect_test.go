package errconnect

import (
	"errors"
	"slices"
	"testing"

	"connectrpc.com/connect"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// code → Connect → code, for every code. too_large alone comes back as
// resource_exhausted: Connect has no code for it.
func TestRoundTrip(t *testing.T) {
	for _, code := range errdefs.Codes() {
		c := Code(code)
		if got := ToConnect(errdefs.New(code, "x")); got != c {
			t.Errorf("ToConnect(New(%q)) = %v, want %v", code, got, c)
		}
		want := code
		if code == api.CodeTooLarge {
			want = api.CodeResourceExhausted
		}
		if got := APICode(c); got != want {
			t.Errorf("APICode(Code(%q)) = %q (via %v), want %q", code, got, c, want)
		}
		err := ToNative(connect.NewError(c, errors.New("the message")))
		if got := errdefs.Code(err); got != want || err.Error() != "the message" {
			t.Errorf("ToNative of %v = %q (%v), want %q", c, got, err, want)
		}
		if code != api.CodeInternal && c == connect.CodeInternal {
			t.Errorf("code %q has no Connect code of its own", code)
		}
	}
}

// What E2B's SDKs get over envd for each code (they map Connect codes to their own errors).
func TestCodes(t *testing.T) {
	for code, want := range map[string]connect.Code{
		api.CodeInvalidArgument: connect.CodeInvalidArgument, api.CodeNotFound: connect.CodeNotFound,
		api.CodeTooLarge: connect.CodeResourceExhausted, api.CodeResourceExhausted: connect.CodeResourceExhausted,
		api.CodeFailedPrecondition: connect.CodeFailedPrecondition, api.CodeCanceled: connect.CodeCanceled,
		api.CodePermissionDenied: connect.CodePermissionDenied, api.CodeUnauthenticated: connect.CodeUnauthenticated,
		api.CodeUnavailable: connect.CodeUnavailable, api.CodeInternal: connect.CodeInternal,
		"no_such_code": connect.CodeInternal,
	} {
		if got := Code(code); got != want {
			t.Errorf("Code(%q) = %v, want %v", code, got, want)
		}
	}
}

// Every Connect code comes back as a code of the vocabulary.
func TestEveryConnectCode(t *testing.T) {
	codes := errdefs.Codes()
	for c := connect.CodeCanceled; c <= connect.CodeUnauthenticated; c++ {
		if got := APICode(c); !slices.Contains(codes, got) {
			t.Errorf("APICode(%v) = %q, not a code", c, got)
		}
	}
	if err := errors.New("plain"); ToNative(err) != err {
		t.Error("ToNative changed an error that is not Connect's")
	}
}

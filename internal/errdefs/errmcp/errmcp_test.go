package errmcp

import (
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// code → JSON-RPC → code, for every code. JSON-RPC has two codes for them: invalid_argument
// and internal round-trip; every other code comes back as internal.
func TestRoundTrip(t *testing.T) {
	for _, code := range errdefs.Codes() {
		c := Code(code)
		want, wantRPC := api.CodeInternal, int64(jsonrpc.CodeInternalError)
		if code == api.CodeInvalidArgument {
			want, wantRPC = code, jsonrpc.CodeInvalidParams
		}
		if c != wantRPC {
			t.Errorf("Code(%q) = %d, want %d", code, c, wantRPC)
		}
		je := ToJSONRPC(errdefs.New(code, "x"), "the message")
		if je.Code != c || je.Message != "the message" {
			t.Errorf("ToJSONRPC(New(%q)) = %+v", code, je)
		}
		if got := APICode(c); got != want {
			t.Errorf("APICode(Code(%q)) = %q, want %q", code, got, want)
		}
		if got := errdefs.Code(ToNative(je)); got != want {
			t.Errorf("ToNative(ToJSONRPC(New(%q))) = %q, want %q", code, got, want)
		}
	}
}

func TestAPICode(t *testing.T) {
	for c, want := range map[int64]string{
		jsonrpc.CodeInvalidParams: api.CodeInvalidArgument, jsonrpc.CodeInvalidRequest: api.CodeInvalidArgument,
		jsonrpc.CodeInternalError: api.CodeInternal, jsonrpc.CodeMethodNotFound: api.CodeInternal,
		jsonrpc.CodeParseError: api.CodeInternal, -32002: api.CodeInternal,
	} {
		if got := APICode(c); got != want {
			t.Errorf("APICode(%d) = %q, want %q", c, got, want)
		}
	}
	if err := errors.New("plain"); ToNative(err) != err {
		t.Error("ToNative changed an error that is not JSON-RPC's")
	}
}

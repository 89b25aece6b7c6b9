// Package errmcp maps the error vocabulary (package errdefs) to MCP's errors and back, for
// package mcpserver.
//
// MCP has two kinds. A tool call's failure, of the code or of the service, is a result with
// isError that the model reads: no code crosses, whatever the error (mcpserver words it).
// A protocol error (the resources calls) is a JSON-RPC error, whose codes are few: invalid
// params for invalid_argument, internal error for every other code. Only those two
// round-trip; MCP clients know no finer codes. A resource that does not exist is the SDK's
// own error (mcp.ResourceNotFoundError), which carries its URI.
//
// Not for: wording the messages, or hiding an internal error's details (the caller logs it).
package errmcp

import (
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Code is the JSON-RPC error code of an api.Code*.
func Code(code string) int64 {
	if code == api.CodeInvalidArgument {
		return jsonrpc.CodeInvalidParams
	}
	return jsonrpc.CodeInternalError
}

// ToJSONRPC is a JSON-RPC error for err with message msg (the caller's wording of err).
func ToJSONRPC(err error, msg string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: Code(errdefs.Code(err)), Message: msg}
}

// APICode is the api.Code* of a JSON-RPC error code: invalid_argument for invalid params
// and invalid request, internal for the rest.
func APICode(c int64) string {
	switch c {
	case jsonrpc.CodeInvalidParams, jsonrpc.CodeInvalidRequest:
		return api.CodeInvalidArgument
	}
	return api.CodeInternal
}

// ToNative is err with the sentinel of its JSON-RPC code, when it is a *jsonrpc.Error; err
// as it is otherwise.
func ToNative(err error) error {
	var je *jsonrpc.Error
	if !errors.As(err, &je) {
		return err
	}
	return errdefs.New(APICode(je.Code), je.Message)
}

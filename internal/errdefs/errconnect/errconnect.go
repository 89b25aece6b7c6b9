// Package errconnect maps the error vocabulary (package errdefs) to Connect RPC's codes and
// back, for E2B's envd API (package e2b).
//
// Not for: wording the messages, or hiding an internal error's details (the caller logs it).
package errconnect

import (
	"errors"

	"connectrpc.com/connect"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Connect's code of each of ours. too_large has no Connect code of its own: it is
// resource_exhausted, as gRPC answers a message over its size limit.
var toConnect = map[string]connect.Code{
	api.CodeInvalidArgument:    connect.CodeInvalidArgument,
	api.CodeNotFound:           connect.CodeNotFound,
	api.CodeTooLarge:           connect.CodeResourceExhausted,
	api.CodeResourceExhausted:  connect.CodeResourceExhausted,
	api.CodeFailedPrecondition: connect.CodeFailedPrecondition,
	api.CodeCanceled:           connect.CodeCanceled,
	api.CodePermissionDenied:   connect.CodePermissionDenied,
	api.CodeUnauthenticated:    connect.CodeUnauthenticated,
	api.CodeUnavailable:        connect.CodeUnavailable,
	api.CodeInternal:           connect.CodeInternal,
}

// Code is the Connect code of an api.Code*; internal for a code not in the vocabulary.
func Code(code string) connect.Code {
	if c, ok := toConnect[code]; ok {
		return c
	}
	return connect.CodeInternal
}

// ToConnect is the Connect code of err: its code's.
func ToConnect(err error) connect.Code { return Code(errdefs.Code(err)) }

// APICode is the api.Code* of a Connect code. Codes the vocabulary lacks are the nearest:
// already_exists and aborted are failed_precondition, out_of_range is invalid_argument,
// deadline_exceeded is unavailable, and the rest (unknown, unimplemented, data_loss) are
// internal.
func APICode(c connect.Code) string {
	switch c {
	case connect.CodeResourceExhausted:
		return api.CodeResourceExhausted
	case connect.CodeAlreadyExists, connect.CodeAborted:
		return api.CodeFailedPrecondition
	case connect.CodeOutOfRange:
		return api.CodeInvalidArgument
	case connect.CodeDeadlineExceeded:
		return api.CodeUnavailable
	}
	for code, cc := range toConnect {
		if cc == c {
			return code
		}
	}
	return api.CodeInternal
}

// ToNative is err with the sentinel of its Connect code, when it is a *connect.Error; err
// as it is otherwise.
func ToNative(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	return errdefs.New(APICode(ce.Code()), ce.Message())
}

// Package errdefs is cellbox's error vocabulary: a few sentinel errors that every layer wraps,
// each with its code (api.Code*), which is what crosses the guest protocol and every front
// door. The mappings of codes to each transport live beside it, one package each, each tested
// both ways: errhttp (REST, E2B's control plane; the table itself is api's, which client/
// reads too), errconnect (E2B's envd, Connect RPC) and errmcp (MCP's JSON-RPC errors).
//
// It is not for user-code failures: those are statuses in results, never errors.
package errdefs

import (
	"errors"
	"log/slog"

	"github.com/cellbox/cellbox/api"
)

// Sentinels. Wrap them with fmt.Errorf("...: %w", ErrX) or build one with New.
var (
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrNotFound           = errors.New("not found")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrUnavailable        = errors.New("unavailable")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrTooLarge           = errors.New("too large")
	ErrCanceled           = errors.New("canceled")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrUnauthenticated    = errors.New("unauthenticated")
)

var byCode = map[string]error{
	api.CodeInvalidArgument:    ErrInvalidArgument,
	api.CodeNotFound:           ErrNotFound,
	api.CodeResourceExhausted:  ErrResourceExhausted,
	api.CodeUnavailable:        ErrUnavailable,
	api.CodeFailedPrecondition: ErrFailedPrecondition,
	api.CodeTooLarge:           ErrTooLarge,
	api.CodeCanceled:           ErrCanceled,
	api.CodePermissionDenied:   ErrPermissionDenied,
	api.CodeUnauthenticated:    ErrUnauthenticated,
}

// codeOrder makes Code deterministic for an error that wraps more than one sentinel.
var codeOrder = []string{
	api.CodeInvalidArgument, api.CodeNotFound, api.CodeTooLarge, api.CodeResourceExhausted,
	api.CodeFailedPrecondition, api.CodeCanceled, api.CodePermissionDenied, api.CodeUnauthenticated,
	api.CodeUnavailable,
}

// Codes returns every code of the vocabulary, api.CodeInternal (no sentinel) last.
func Codes() []string {
	return append(append([]string(nil), codeOrder...), api.CodeInternal)
}

// coded is an error with a message of its own that still matches its sentinel.
type coded struct {
	sentinel error
	msg      string
}

func (e *coded) Error() string { return e.msg }
func (e *coded) Unwrap() error { return e.sentinel }

// New returns an error with message msg that matches the sentinel of code
// (api.Code*). An unknown code gives an error matching none of them (internal).
func New(code, msg string) error {
	if s, ok := byCode[code]; ok {
		return &coded{sentinel: s, msg: msg}
	}
	return errors.New(msg)
}

// Code returns the api.Code* that classifies err; api.CodeInternal when none does.
func Code(err error) string {
	for _, code := range codeOrder {
		if errors.Is(err, byCode[code]) {
			return code
		}
	}
	return api.CodeInternal
}

// InternalMessage is what a client or a model reads of an internal error: its details are
// for the server's log only (they may name host paths and internals).
const InternalMessage = "internal error; the server log has the details"

// Public returns err's message as a client or a model may read it: an internal error's is
// InternalMessage, and err itself goes to log with attrs (what the server was doing).
func Public(log *slog.Logger, err error, attrs ...any) string {
	if Code(err) != api.CodeInternal {
		return err.Error()
	}
	log.Error("internal error", append(attrs, "err", err)...)
	return InternalMessage
}

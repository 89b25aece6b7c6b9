// Package errdefs is cellbox's error vocabulary: a few sentinel errors that every layer wraps
// and that the HTTP layer maps to status codes in one place (and client/ maps back).
//
// It is not for user-code failures: those are statuses in results, never errors.
package errdefs

import (
	"errors"
	"net/http"

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

// HTTPStatus maps a code (api.Code*) to its HTTP status, in one place for every front door.
func HTTPStatus(code string) int {
	switch code {
	case api.CodeInvalidArgument:
		return http.StatusBadRequest
	case api.CodeNotFound:
		return http.StatusNotFound
	case api.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case api.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case api.CodeFailedPrecondition:
		return http.StatusConflict
	case api.CodeUnavailable:
		return http.StatusServiceUnavailable
	case api.CodePermissionDenied:
		return http.StatusForbidden
	case api.CodeUnauthenticated:
		return http.StatusUnauthorized
	case api.CodeCanceled:
		return 499
	}
	return http.StatusInternalServerError
}

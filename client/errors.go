package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/cellbox/cellbox/api"
)

// Error is a failure the server reported: an HTTP 4xx/5xx with the API's error shape, or
// an "error" event ending a streamed execution.
//
// Test for one with the Is* helpers, or errors.As for the details:
//
//	var e *client.Error
//	if errors.As(err, &e) && e.Code == api.CodeResourceExhausted { ... }
type Error struct {
	// StatusCode is the HTTP status; for an error event of a stream (which began 200 OK) it
	// is the status the same error would have had as a plain response.
	StatusCode int
	// Code is one of api.Code*. A body that is not the error shape (a proxy's page) gets
	// the code matching StatusCode.
	Code    string
	Message string
}

func (e *Error) Error() string {
	return e.Code + ": " + e.Message
}

// Code returns the api.Code* of err when it is (or wraps) an *Error, else "".
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsNotFound reports whether the server said the session or file does not exist.
func IsNotFound(err error) bool { return Code(err) == api.CodeNotFound }

// IsInvalidArgument reports whether the server refused the request as malformed.
func IsInvalidArgument(err error) bool { return Code(err) == api.CodeInvalidArgument }

// IsResourceExhausted reports whether the server is at its session limit.
func IsResourceExhausted(err error) bool { return Code(err) == api.CodeResourceExhausted }

// IsTooLarge reports whether a body or file was above the server's limit.
func IsTooLarge(err error) bool { return Code(err) == api.CodeTooLarge }

// IsUnauthenticated reports whether the server wants an API key (see WithAPIKey) and got
// none, or one it does not know.
func IsUnauthenticated(err error) bool { return Code(err) == api.CodeUnauthenticated }

// IsUnavailable reports whether the server could not serve the request for now (shutting
// down, sandbox failed to start); retrying later may work.
func IsUnavailable(err error) bool { return Code(err) == api.CodeUnavailable }

// responseError builds the *Error of a non-2xx response, reading at most 64 KiB of it.
func responseError(resp *http.Response) *Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body api.ErrorBody
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		return &Error{StatusCode: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message}
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" || len(msg) > 512 {
		msg = http.StatusText(resp.StatusCode)
	}
	return &Error{StatusCode: resp.StatusCode, Code: api.CodeOfHTTPStatus(resp.StatusCode), Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, msg)}
}

// streamError is the *Error of an "error" event.
func streamError(d api.ErrorDetail) *Error {
	return &Error{StatusCode: api.HTTPStatus(d.Code), Code: d.Code, Message: d.Message}
}

// Package errhttp maps the error vocabulary (package errdefs) to HTTP statuses and back, for
// the REST API (httpapi) and E2B's control plane (e2b). The table is api's (api.HTTPStatus),
// which the Go SDK (client/) reads as well, so a status means the same on both sides.
//
// Not for: the body of an error response, which each front door writes in its own shape.
package errhttp

import (
	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Status is the HTTP status of an api.Code*: 500 for a code not in the vocabulary.
func Status(code string) int { return api.HTTPStatus(code) }

// Code is the api.Code* of an HTTP status whose body does not say which.
func Code(status int) string { return api.CodeOfHTTPStatus(status) }

// ToHTTP is the HTTP status of err: its code's; 500 for an error of no code.
func ToHTTP(err error) int { return api.HTTPStatus(errdefs.Code(err)) }

// ToNative is an error with message msg that matches the sentinel of status's code
// (api.CodeOfHTTPStatus); an error of no sentinel for a 5xx that is not 503.
func ToNative(status int, msg string) error {
	return errdefs.New(api.CodeOfHTTPStatus(status), msg)
}

package api

// The HTTP status of each error code: a response whose body has the code has that status
// (see openapi.json). The one table the server (internal/errdefs/errhttp) and the Go SDK
// (client/) both read. Numbers, not net/http's names: the guest links this package, and
// nothing else of it needs net/http.
var httpStatus = map[string]int{
	CodeInvalidArgument:    400,
	CodeUnauthenticated:    401,
	CodePermissionDenied:   403,
	CodeNotFound:           404,
	CodeFailedPrecondition: 409,
	CodeTooLarge:           413,
	CodeResourceExhausted:  429,
	CodeCanceled:           499, // nginx's "client closed request": nobody reads it
	CodeInternal:           500,
	CodeUnavailable:        503,
}

// HTTPStatus is the HTTP status of error code: 500 for a code not in the list.
func HTTPStatus(code string) int {
	if s, ok := httpStatus[code]; ok {
		return s
	}
	return 500
}

// CodeOfHTTPStatus is the error code of an HTTP status whose body does not say (a proxy's
// page, a router's 404 or 405): the code whose status it is, else invalid_argument for a
// 4xx, unavailable for 502 and 504, internal for anything else.
func CodeOfHTTPStatus(status int) string {
	for code, s := range httpStatus {
		if s == status {
			return code
		}
	}
	switch {
	case status == 502 || status == 504:
		return CodeUnavailable
	case status >= 400 && status < 500:
		return CodeInvalidArgument
	}
	return CodeInternal
}

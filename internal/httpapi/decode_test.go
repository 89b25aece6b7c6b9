package httpapi

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/cellbox/cellbox/api"
)

// FuzzDecodeBodies: any request body decodes, or fails as invalid_argument or too_large —
// never a panic, never an internal error.
func FuzzDecodeBodies(f *testing.F) {
	for _, s := range []string{`{"code":"1"}`, `{"cmd":["ls"],"env":{"A":"b"}}`, `{"limits":{"memory_mb":1}}`,
		`{"files":[{"path":"a","content_base64":"eA=="}]}`, `{`, `[]`, `{"code":1}`, `{} {}`, ``} {
		f.Add([]byte(s))
	}
	s := &server{opts: Options{MaxBodyBytes: 4096}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range []any{&api.CreateSessionRequest{}, &api.ExecuteRequest{}, &api.CommandRequest{}, &api.OneShotRequest{}} {
			r := httptest.NewRequest("POST", "/v1/execute", bytes.NewReader(body))
			err := s.decode(httptest.NewRecorder(), r, v)
			if err == nil {
				continue
			}
			if code := s.errorDetail(r, err).Code; code != api.CodeInvalidArgument && code != api.CodeTooLarge {
				t.Fatalf("body %q: error code %s (%v)", body, code, err)
			}
		}
	})
}

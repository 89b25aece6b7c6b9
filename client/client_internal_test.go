package client

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/cellbox/cellbox/api"
)

func TestFilePath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a.txt", "/v1/sessions/s1/files/a.txt"},
		{"a b/ü#?.txt", "/v1/sessions/s1/files/a%20b/%C3%BC%23%3F.txt"},
		{"/mnt/data/x/y", "/v1/sessions/s1/files/%2Fmnt/data/x/y"},
		{"a//./b/", "/v1/sessions/s1/files/a/b"},
		{"../etc/passwd", "/v1/sessions/s1/files/%2E%2E/etc/passwd"},
		{"100%.csv", "/v1/sessions/s1/files/100%25.csv"},
	}
	for _, tt := range tests {
		if got := filePath("s1", tt.in); got != tt.want {
			t.Errorf("filePath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := filePath("a/b", "x"); got != "/v1/sessions/a%2Fb/files/x" {
		t.Errorf("session id not escaped: %q", got)
	}
}

func TestReadEvents(t *testing.T) {
	stream := ": keepalive\r\n\r\nevent: output\r\ndata: {\"a\":1}\r\n\r\n" +
		"event:multi\ndata: one\ndata:two\nid: 7\n\n" +
		"data: no event name\n\n" +
		"event: empty\n\n" + // no data: not dispatched
		"event: tail\ndata: x" // no blank line at the end: not dispatched
	var got []string
	err := readEvents(strings.NewReader(stream), maxEventLine, func(event string, data []byte) error {
		got = append(got, event+"="+string(data))
		return nil
	})
	want := []string{`output={"a":1}`, "multi=one\ntwo", "message=no event name"}
	if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events %q, err %v; want %q", got, err, want)
	}
	// A line above the limit is an error, not a silent cut.
	long := "data: " + strings.Repeat("x", 64<<10) + "\n\n"
	if err := readEvents(strings.NewReader(long), 64<<10, func(string, []byte) error { return nil }); err == nil {
		t.Error("a line above the limit was accepted")
	}
}

// TestNonJSONErrors covers answers that are not the API's error shape, as a proxy in front
// of a server gives them.
func TestNonJSONErrors(t *testing.T) {
	tests := []struct {
		status int
		body   string
		code   string
	}{
		{http.StatusBadGateway, "<html>bad gateway</html>", api.CodeUnavailable},
		{http.StatusNotFound, "404 page not found", api.CodeNotFound},
		{http.StatusUnauthorized, "", api.CodeUnauthenticated},
		{http.StatusForbidden, "", api.CodePermissionDenied},
		{http.StatusInternalServerError, "boom", api.CodeInternal},
		{http.StatusMethodNotAllowed, "", api.CodeInvalidArgument},
		{http.StatusGatewayTimeout, "", api.CodeUnavailable},
		{http.StatusServiceUnavailable, "", api.CodeUnavailable},
		{499, "", api.CodeCanceled},
		{http.StatusTooManyRequests, `{"error":{"code":"resource_exhausted","message":"full"}}`, api.CodeResourceExhausted},
	}
	for _, tt := range tests {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tt.status)
			io.WriteString(w, tt.body)
		}))
		_, err := New(srv.URL).GetSession(t.Context(), "x")
		srv.Close()
		var e *Error
		if !errors.As(err, &e) || e.StatusCode != tt.status || e.Code != tt.code || e.Message == "" {
			t.Errorf("status %d body %q: error %#v, want code %s", tt.status, tt.body, err, tt.code)
		}
	}
}

// TestAPIKey: WithAPIKey sends the key on every call, streams and files included, and a
// 401 is IsUnauthenticated.
func TestAPIKey(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":{"code":"unauthenticated","message":"no key"}}`)
	}))
	defer srv.Close()
	c := New(srv.URL, WithAPIKey("cbx_0123456789abcdef"))
	ctx := t.Context()
	_, err := c.ListSessions(ctx)
	if !IsUnauthenticated(err) {
		t.Errorf("ListSessions: %v, want unauthenticated", err)
	}
	c.ExecuteStream(ctx, "s", api.ExecuteRequest{Code: "1"}, func(api.Output) {})
	c.UploadFile(ctx, "s", "a.txt", strings.NewReader("x"))
	New(srv.URL, WithAPIKey("")).Health(ctx)
	want := []string{"Bearer cbx_0123456789abcdef", "Bearer cbx_0123456789abcdef", "Bearer cbx_0123456789abcdef", ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Authorization headers %q, want %q", got, want)
	}
}

// An error event has the status its code has as a plain response (api.HTTPStatus, the table
// the server answers with).
func TestStreamErrorStatus(t *testing.T) {
	for code, want := range map[string]int{api.CodeNotFound: 404, api.CodeTooLarge: 413, api.CodeCanceled: 499, api.CodeInternal: 500, "other": 500} {
		if e := streamError(api.ErrorDetail{Code: code, Message: "m"}); e.StatusCode != want || e.Code != code {
			t.Errorf("streamError(%q) = %+v, want status %d", code, e, want)
		}
	}
}

// A download's name is a base name whatever the server's Content-Disposition says: a
// client that saves it under File.Name writes into its own folder only.
func TestDownloadNameIsBase(t *testing.T) {
	var disposition string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Disposition", disposition)
		io.WriteString(w, "x")
	}))
	defer srv.Close()
	c := New(srv.URL)
	for _, tc := range []struct{ disposition, path, want string }{
		{`attachment; filename="report.csv"`, "sub/data.csv", "report.csv"},
		{`attachment; filename="../../.bashrc"`, "sub/data.csv", ".bashrc"},
		{`attachment; filename="/etc/cron.d/x"`, "sub/data.csv", "x"},
		{`attachment; filename="..\\..\\evil.bat"`, "sub/data.csv", "evil.bat"},
		{`attachment; filename=".."`, "sub/data.csv", "data.csv"},
		{`attachment; filename="sub/"`, "sub/data.csv", "data.csv"},
		{``, "sub/data.csv", "data.csv"},
		{``, "sub/..", ""},
	} {
		disposition = tc.disposition
		f, err := c.DownloadFile(t.Context(), "s1", tc.path)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if f.Name != tc.want {
			t.Errorf("Content-Disposition %q, path %q: Name %q; want %q", tc.disposition, tc.path, f.Name, tc.want)
		}
	}
}

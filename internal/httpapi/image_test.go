package httpapi_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/httpapi"
	"github.com/cellbox/cellbox/internal/sandbox/sandboxtest"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
)

// post sends body to path and returns the status and the raw answer.
func post(t *testing.T, url, path, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The image of a session or one-shot goes in as "image" and comes back in the session; an
// image the backend has not got is not_found with its message (the command that builds
// it) kept, a bad name invalid_argument.
func TestImageField(t *testing.T) {
	fake := sandboxtest.Images(sessiontest.Local(t), "default", "py")
	m := sessiontest.NewOn(t, fake, func(c *config.Config) { c.RootFS = "image" })
	srv := httptest.NewServer(httpapi.New(m, httpapi.Options{MaxBodyBytes: 1 << 20, MaxUploadBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()

	for _, tt := range []struct{ body, want string }{{`{}`, "default"}, {`{"image":"py"}`, "py"}} {
		st, body := post(t, srv.URL, "/v1/sessions", tt.body)
		var s api.Session
		if st != http.StatusCreated || json.Unmarshal([]byte(body), &s) != nil {
			t.Fatalf("create %s: %d %s", tt.body, st, body)
		}
		if s.Image != tt.want || fake.ImageOf(s.ID) != tt.want {
			t.Errorf("create %s: the session says image %q, runs on %q; want %q", tt.body, s.Image, fake.ImageOf(s.ID), tt.want)
		}
		resp, err := http.Get(srv.URL + "/v1/sessions/" + s.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got api.Session
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if got.Image != tt.want {
			t.Errorf("GET the session of %s: image %q, want %q", tt.body, got.Image, tt.want)
		}
	}
	if st, body := post(t, srv.URL, "/v1/execute", `{"code":"print(1)","image":"py"}`); st != http.StatusOK || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("one-shot on py: %d %s", st, body)
	}

	for _, tt := range []struct {
		path, body string
		status     int
		code, msg  string
	}{
		{"/v1/sessions", `{"image":"ml"}`, 404, api.CodeNotFound, "cellbox image build ml"},
		{"/v1/execute", `{"code":"1","image":"ml"}`, 404, api.CodeNotFound, "cellbox image build ml"},
		{"/v1/sessions", `{"image":"../ml"}`, 400, api.CodeInvalidArgument, `image name "../ml"`},
		{"/v1/sessions", `{"image":7}`, 400, api.CodeInvalidArgument, "not valid JSON"},
	} {
		st, body := post(t, srv.URL, tt.path, tt.body)
		var e api.ErrorBody
		json.Unmarshal([]byte(body), &e)
		if st != tt.status || e.Error.Code != tt.code || !strings.Contains(e.Error.Message, tt.msg) {
			t.Errorf("%s %s: %d %s; want %d %s saying %q", tt.path, tt.body, st, body, tt.status, tt.code, tt.msg)
		}
	}
}

// On a server whose sandboxes run on the host's root, a session says no image, and a
// request naming one is refused with what would serve it.
func TestImageFieldOnHostRoot(t *testing.T) {
	srv := httptest.NewServer(httpapi.New(sessiontest.New(t, nil), httpapi.Options{MaxBodyBytes: 1 << 20, MaxUploadBytes: 1 << 20,
		Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	if st, body := post(t, srv.URL, "/v1/sessions", `{}`); st != http.StatusCreated || strings.Contains(body, `"image"`) {
		t.Errorf("a session on the host's root: %d %s; want no image", st, body)
	}
	for path, req := range map[string]string{"/v1/sessions": `{"image":"default"}`, "/v1/execute": `{"code":"1","image":"default"}`} {
		st, body := post(t, srv.URL, path, req)
		if st != 400 || !strings.Contains(body, `image \"default\": this server runs sandboxes on the host's root filesystem; images need --rootfs image (runc) or --backend docker`) {
			t.Errorf("%s naming an image on the host's root: %d %s", path, st, body)
		}
	}
}

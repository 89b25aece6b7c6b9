package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/sandboxtest"
	"github.com/cellbox/cellbox/internal/testbin"
)

// reattaching is a backend on images whose sandboxes outlive the server, but are never
// found again: a restored session gets a new sandbox.
type reattaching struct{ *sandboxtest.ImageFake }

func (b reattaching) Capabilities() sandbox.Capabilities {
	c := b.ImageFake.Capabilities()
	c.Reattach = true
	return c
}

func (b reattaching) Attach(ctx context.Context, id string) (sandbox.Sandbox, error) {
	return nil, fmt.Errorf("no sandbox %s: %w", id, errdefs.ErrNotFound)
}

// onImages is a test config whose sandboxes run on images, "default" the default one.
func onImages(t *testing.T) config.Config {
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.Preimport = ""
	cfg.PoolSize = 0
	cfg.RootFS = "image"
	return cfg
}

// A request's image is resolved before anything starts: "" is the default, a name is
// checked, and a server on the host's root refuses every name with what to do instead.
func TestResolveImage(t *testing.T) {
	tests := []struct {
		def, name, want, bad string
	}{
		{def: "default", name: "", want: "default"},
		{def: "default", name: "py-3.12", want: "py-3.12"},
		{def: "default", name: "Py", bad: `image name "Py": use 1 to 63 of a-z 0-9 . _ -`},
		{def: "default", name: "../etc", bad: `image name "../etc"`},
		{def: "default", name: strings.Repeat("a", 64), bad: "image name"},
		{def: "", name: "", want: ""},
		{def: "", name: "default", bad: `image "default": this server runs sandboxes on the host's root filesystem; images need --rootfs image (runc) or --backend docker`},
		{def: "", name: "../etc", bad: "host's root filesystem"},
	}
	for _, tt := range tests {
		m := &Manager{defaultImage: tt.def}
		got, err := m.resolveImage(tt.name)
		if tt.bad != "" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.bad) {
				t.Errorf("default %q, image %q: %q, %v; want invalid argument saying %q", tt.def, tt.name, got, err, tt.bad)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("default %q, image %q: %q, %v; want %q", tt.def, tt.name, got, err, tt.want)
		}
	}
}

// Sessions and one-shots run on the image they name, or on the default; the session says
// which. An image the backend has not got is its not-found error, passed on.
func TestImages(t *testing.T) {
	b := sandboxtest.Images(localBackend(t), "default", "py")
	m := startManager(t, onImages(t), b, t.TempDir(), nil)
	ctx := context.Background()
	for _, tt := range []struct{ ask, want string }{{"", "default"}, {"py", "py"}, {"default", "default"}} {
		s, err := m.Create(ctx, api.CreateSessionRequest{Image: tt.ask})
		if err != nil {
			t.Fatalf("image %q: %v", tt.ask, err)
		}
		if s.Image != tt.want || b.ImageOf(s.ID) != tt.want {
			t.Errorf("image %q: the session says %q, its sandbox runs on %q; want %q", tt.ask, s.Image, b.ImageOf(s.ID), tt.want)
		}
		if got, _ := m.Get(ctx, s.ID); got.Image != tt.want {
			t.Errorf("image %q: Get says %q", tt.ask, got.Image)
		}
	}
	if n := len(b.Sandboxes("py")); n != 1 {
		t.Fatalf("%d sandboxes on py, want 1", n)
	}
	res, err := m.OneShot(ctx, api.OneShotRequest{Code: "print(6*7)", Image: "py"}, nil)
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("one-shot on py: %+v, %v", res, err)
	}
	if n := len(b.Sandboxes("py")); n != 2 {
		t.Errorf("the one-shot did not run on py: %d sandboxes on it", n)
	}

	_, err = m.Create(ctx, api.CreateSessionRequest{Image: "ml"})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "cellbox image build ml") {
		t.Errorf("an image not built: %v; want not found naming the build command", err)
	}
	if _, err := m.OneShot(ctx, api.OneShotRequest{Code: "1", Image: "ml"}, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a one-shot on an image not built: %v; want not found", err)
	}
	if _, err := m.OneShot(ctx, api.OneShotRequest{Code: "1", Image: "Bad!"}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a one-shot on a bad name: %v; want invalid argument", err)
	}
	if _, err := m.Create(ctx, api.CreateSessionRequest{Image: "Bad!"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a session on a bad name: %v; want invalid argument", err)
	}
	if n, _ := m.Stats(); n != 3 {
		t.Errorf("%d sessions; the refused requests left some behind", n)
	}
}

// On the host's root a session runs on no image and says none; naming one is refused
// before any sandbox starts.
func TestImagesOnHostRoot(t *testing.T) {
	b := sandboxtest.Images(localBackend(t), "")
	cfg := onImages(t)
	cfg.RootFS = "host"
	m := startManager(t, cfg, b, t.TempDir(), nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil || s.Image != "" || b.ImageOf(s.ID) != "" {
		t.Fatalf("session %+v, %v; want one on no image", s, err)
	}
	for _, img := range []string{"default", "py"} {
		_, err := m.Create(ctx, api.CreateSessionRequest{Image: img})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "--rootfs image (runc) or --backend docker") {
			t.Errorf("image %q on the host's root: %v", img, err)
		}
		if _, err := m.OneShot(ctx, api.OneShotRequest{Code: "1", Image: img}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("one-shot on image %q on the host's root: %v", img, err)
		}
	}
	if n := len(b.Sandboxes("")); n != 1 {
		t.Errorf("%d sandboxes started; want the one session's", n)
	}
}

// Each image with a pool size keeps its own warm sandboxes, and a request takes from its
// image's pool; an image without one, or a request with env, starts cold.
func TestImagePools(t *testing.T) {
	b := sandboxtest.Images(localBackend(t), "default", "py", "ml")
	cfg := onImages(t)
	cfg.PoolSize, cfg.PoolMax = 1, 0
	cfg.ImagePools = "py=2,ml=0"
	reg := prometheus.NewPedanticRegistry()
	m := startManager(t, cfg, b, t.TempDir(), reg)
	if len(m.pools) != 2 {
		t.Fatalf("pools of %v; want default and py", m.pools)
	}
	testbin.WaitFor(t, time.Minute, "the pools to fill", func() error {
		if m.pools[poolKey{image: "default"}].len() < 1 || m.pools[poolKey{image: "py"}].len() < 2 {
			return fmt.Errorf("default %d, py %d", m.pools[poolKey{image: "default"}].len(), m.pools[poolKey{image: "py"}].len())
		}
		return nil
	})
	if _, n := m.Stats(); n != 3 {
		t.Errorf("Stats: %d warm, want 3", n)
	}
	gauges := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			switch f.GetName() {
			case "cellbox_pool_size":
				gauges["all"] = mt.GetGauge().GetValue()
			case "cellbox_image_pool_size":
				gauges[mt.GetLabel()[0].GetValue()] = mt.GetGauge().GetValue()
			}
		}
	}
	if want := map[string]float64{"all": 3, "default": 1, "py": 2}; !maps.Equal(gauges, want) {
		t.Errorf("pool gauges %v, want %v", gauges, want)
	}

	warmPy, warmDefault := b.Sandboxes("py"), b.Sandboxes("default")
	ctx := context.Background()
	create := func(req api.CreateSessionRequest) string {
		t.Helper()
		s, err := m.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	if id := create(api.CreateSessionRequest{Image: "py"}); !slices.Contains(warmPy, id) {
		t.Errorf("a session on py did not take a warm py sandbox (%s on %s)", id, b.ImageOf(id))
	}
	if id := create(api.CreateSessionRequest{}); !slices.Contains(warmDefault, id) {
		t.Errorf("a session on the default image did not take its warm sandbox (%s on %s)", id, b.ImageOf(id))
	}
	if id := create(api.CreateSessionRequest{Image: "ml"}); b.ImageOf(id) != "ml" {
		t.Errorf("a session on ml runs on %s", b.ImageOf(id))
	}
	// With an env, a warm sandbox still (it takes the env: adapt_test.go).
	if id := create(api.CreateSessionRequest{Image: "py", Env: map[string]string{"A": "b"}}); !slices.Contains(warmPy, id) || b.ImageOf(id) != "py" {
		t.Errorf("a session with env on py did not take a warm py sandbox (%s on %s)", id, b.ImageOf(id))
	}
	// Another disk quota: a new sandbox, on py.
	if id := create(api.CreateSessionRequest{Image: "py", Limits: &api.Limits{DiskMB: 100}}); slices.Contains(warmPy, id) || b.ImageOf(id) != "py" {
		t.Errorf("a session with another disk quota took a warm sandbox, or not on py (%s)", b.ImageOf(id))
	}
}

// A session's image is in its record: after a restart that finds its sandbox gone, the
// new sandbox runs on the same image, and the session still says which.
func TestImageRestored(t *testing.T) {
	cfg := onImages(t)
	ws := t.TempDir()
	b := sandboxtest.Images(localBackend(t), "default", "py")
	m := startManager(t, cfg, reattaching{b}, ws, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{Image: "py"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	b2 := sandboxtest.Images(localBackend(t), "default", "py")
	m2 := startManager(t, cfg, reattaching{b2}, ws, nil)
	got, err := m2.Get(ctx, s.ID)
	if err != nil {
		t.Fatalf("session not restored: %v", err)
	}
	if got.Image != "py" || b2.ImageOf(s.ID) != "py" {
		t.Errorf("restored session says image %q, its new sandbox runs on %q; want py", got.Image, b2.ImageOf(s.ID))
	}
}

// A session of a server on the host's root whose sandbox is gone is replaced, on a server
// on images, on its default image: a new sandbox never runs on the host's root there.
func TestHostSessionReplacedOnImage(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	host := onImages(t)
	host.RootFS = "host"
	m := startManager(t, host, reattaching{sandboxtest.Images(localBackend(t), "")}, ws, nil)
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := onImages(t)
	cfg.StateDir = host.StateDir
	b := sandboxtest.Images(localBackend(t), "default")
	m2 := startManager(t, cfg, reattaching{b}, ws, nil)
	if _, err := m2.Get(ctx, s.ID); err != nil {
		t.Fatalf("session not restored: %v", err)
	}
	if got := b.ImageOf(s.ID); got != "default" {
		t.Errorf("the replaced sandbox runs on %q, want the default image", got)
	}
}

package docker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/sandboxtest"
	"github.com/cellbox/cellbox/internal/testbin"
)

// newBackend is a backend on the test machine's engine and built images, with its own
// state folder (so its own server identity).
func newBackend(t *testing.T, runtime string) *Backend {
	t.Helper()
	testbin.NeedDocker(t)
	images := testbin.Images(t)
	level := slog.LevelInfo
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	b, err := New(Config{StateDir: t.TempDir(), GuestBinary: testbin.Cellbox(t), Runtime: runtime,
		Images: image.NewStore(images, ""), Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Cleanup(context.Background(), nil)
		b.Close()
	})
	// As a server does at start: the first import of the image takes a minute or more,
	// longer than a sandbox's start is given.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := b.PrepareImage(ctx, image.DefaultName); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.WithImage(newBackend(t, ""), image.DefaultName))
}

// TestRuntime: a named runtime reaches the engine. Under runsc the sandbox's kernel is
// gVisor's sentry, whose /proc/version is not the host's. (The whole conformance suite on
// gVisor runs in package runc; here it would take four minutes more of CI.)
func TestRuntime(t *testing.T) {
	testbin.NeedProgram(t, "runsc", "runsc")
	b := newBackend(t, "runsc")
	if !b.gvisor || b.Capabilities().HostProcesses {
		t.Errorf("runsc: gvisor %v, capabilities %+v", b.gvisor, b.Capabilities())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := b.Create(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: sandboxtest.Workspace(t), Image: image.DefaultName,
		Limits: sandbox.Limits{MemoryMB: 512, Pids: 64}})
	if err != nil {
		t.Fatalf("create on runsc (the engine needs runsc as a runtime; scripts/with-dockerd.sh configures it): %v", err)
	}
	defer sb.Stop(context.Background())
	c, err := guestproto.Dial(ctx, sb.Conn())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Command(ctx, api.CommandRequest{Cmd: []string{"cat", "/proc/version"}, TimeoutS: 30})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.ReadFile("/proc/version")
	if r.ExitCode != 0 || r.Stdout == "" || r.Stdout == string(host) {
		t.Errorf("/proc/version in the sandbox: exit %d %q; the host's: %q", r.ExitCode, r.Stdout, host)
	}
	info, err := b.cli.ContainerInspect(ctx, b.containerName(sb.ID()), client.ContainerInspectOptions{})
	if err != nil || info.Container.HostConfig.Runtime != "runsc" {
		t.Errorf("the container's runtime: %v", err)
	}
}

func TestEngineUnreachable(t *testing.T) {
	_, err := New(Config{StateDir: t.TempDir(), Host: "unix:///nonexistent/docker.sock"})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("err = %v, want unavailable", err)
	}
	for _, want := range []string{"unix:///nonexistent/docker.sock", "start it", "DOCKER_HOST"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestMissingImage(t *testing.T) {
	b := newBackend(t, "")
	_, err := b.Create(context.Background(), sandbox.Spec{ID: sandboxtest.ID(), Workspace: sandboxtest.Workspace(t), Image: "no-such-image"})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("err = %v, want not found", err)
	}
	for _, want := range []string{"cellbox image build no-such-image", "cellbox image dockerfile no-such-image"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	for _, tc := range []struct{ image, why string }{{"", "no image"}, {"../etc", "a bad name"}} {
		_, err := b.Create(context.Background(), sandbox.Spec{ID: sandboxtest.ID(), Workspace: sandboxtest.Workspace(t), Image: tc.image})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want invalid argument", tc.why, err)
		}
	}
}

// TestOtherServers: two servers on one engine see only their own containers.
func TestOtherServers(t *testing.T) {
	a, b := newBackend(t, ""), newBackend(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := sandboxtest.ID()
	sb, err := a.Create(ctx, sandbox.Spec{ID: id, Workspace: sandboxtest.Workspace(t), Image: image.DefaultName})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Stop(context.Background())
	if err := b.Cleanup(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Attach(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("another server's attach: err = %v, want not found", err)
	}
	info, err := a.cli.ContainerInspect(ctx, a.containerName(id), client.ContainerInspectOptions{})
	if err != nil || !info.Container.State.Running {
		t.Fatalf("the sandbox after another server's cleanup and attach: %v, running %v", err, err == nil && info.Container.State.Running)
	}
	list, err := a.cli.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", labelSession+"="+id)})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("containers labelled with the session: %v, %d", err, len(list.Items))
	}
	if got := list.Items[0].Labels[labelServer]; got != a.server {
		t.Errorf("label %s = %q, want %q", labelServer, got, a.server)
	}
	// A container with b's name for the id but a's label: b neither attaches nor removes it.
	img, err := b.image(ctx, image.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	spoof, err := b.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: b.containerName(id),
		Config: &container.Config{Image: img.id, Cmd: []string{"true"}, Labels: map[string]string{labelServer: a.server, labelSession: id}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.cli.ContainerRemove(context.Background(), spoof.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := b.Attach(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("attach to a container named as b's but labelled a's: err = %v, want not found", err)
	}
	if _, err := b.Create(ctx, sandbox.Spec{ID: id, Workspace: sandboxtest.Workspace(t), Image: image.DefaultName}); err == nil {
		t.Error("b created a sandbox under the name of a container that is there")
	}
	if _, err := b.cli.ContainerInspect(ctx, spoof.ID, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("the container b does not own is gone after b's attach and create: %v", err)
	}
	// Its own server's cleanup, keeping nothing, removes it.
	sb.Detach()
	if err := a.Cleanup(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cli.ContainerInspect(ctx, a.containerName(id), client.ContainerInspectOptions{}); err == nil {
		t.Error("the sandbox is still there after its server's cleanup")
	}
}

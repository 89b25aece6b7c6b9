package guest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
)

const testToken = "0123456789abcdef0123456789abcdef"

// attach connects to a listening guest, passes the handshake with token and dials it.
func attach(t *testing.T, sock, token string) (*guestproto.Client, error) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := guestproto.ClientAttach(conn, token); err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := guestproto.Dial(ctx, conn)
	if err != nil {
		t.Fatalf("dial after attach: %v", err)
	}
	c.Slack = 20 * time.Second
	return c, nil
}

// The token file is read once and removed; the socket is the guest's alone (0600).
func TestListenSetup(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token, err := readToken(tokenFile, "")
	if err != nil || token != testToken {
		t.Fatalf("readToken = %q, %v", token, err)
	}
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the token file is still there after it was read: %v", err)
	}
	os.WriteFile(tokenFile, []byte("short\n"), 0o600)
	if _, err := readToken(tokenFile, ""); err == nil {
		t.Error("readToken took a short token")
	}
	// From the environment: read, then gone from what the guest's children inherit.
	t.Setenv("CELLBOX_TEST_TOKEN", testToken)
	if token, err := readToken("", "CELLBOX_TEST_TOKEN"); err != nil || token != testToken {
		t.Errorf("readToken from the environment = %q, %v", token, err)
	}
	if _, ok := os.LookupEnv("CELLBOX_TEST_TOKEN"); ok {
		t.Error("the token is still in the environment after it was read")
	}
	sock := filepath.Join(dir, "guest.sock")
	os.WriteFile(sock, nil, 0o600) // a stale file where the socket goes
	ln, err := listenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("socket mode %v, %v; want a socket, 0600", fi.Mode(), err)
	}
}

// listen runs Listen on a fresh socket until the test ends, and waits for it to return;
// done is closed when it has.
func listen(t *testing.T, opts Options) (sock string, done <-chan struct{}) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "guest.sock")
	first, err := listenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Workspace == "" {
		opts.Workspace = t.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan struct{})
	var lerr error
	go func() {
		defer close(ch)
		lerr = Listen(ctx, func() (net.Listener, error) {
			if ln := first; ln != nil { // made before: the test may dial at once
				first = nil
				return ln, nil
			}
			return listenUnix(sock)
		}, testToken, opts)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ch:
			if lerr != nil {
				t.Errorf("Listen: %v", lerr)
			}
		case <-time.After(20 * time.Second):
			t.Error("Listen did not return after its context ended")
		}
	})
	return sock, ch
}

// attachConfigured attaches to a fresh guest and starts its kernel.
func attachConfigured(t *testing.T, sock string) *guestproto.Client {
	t.Helper()
	c, err := attach(t, sock, testToken)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Configure(ctx, testConfig()); err != nil {
		t.Fatalf("configure: %v", err)
	}
	return c
}

// The kernel outlives the connection: a second server attaches and finds its variables.
// Wrong tokens are refused, and a new connection replaces the one before it.
func TestListen(t *testing.T) {
	needIPython(t)
	sock, _ := listen(t, Options{})
	token := testToken

	if _, err := attach(t, sock, "not-the-token-0123456789abcdef012"); !errors.Is(err, guestproto.ErrBadAttach) {
		t.Fatalf("attach with a wrong token: %v, want refused", err)
	}
	first := attachConfigured(t, sock)
	g1 := &guestT{Client: first}
	if r := g1.exec(t, "x = 41", 0); r.Status != "ok" {
		t.Fatalf("x = 41: %+v", r)
	}
	first.Close() // the server process goes away

	second, err := attach(t, sock, token)
	if err != nil {
		t.Fatal(err)
	}
	g2 := &guestT{Client: second}
	if r := g2.exec(t, "print(x + 1)", 0); r.Status != "ok" || strings.TrimSpace(text(r, "stdout")) != "42" {
		t.Fatalf("after re-attach, print(x + 1): %+v", r)
	}

	// A third connection replaces the second, which the guest closes.
	third, err := attach(t, sock, token)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	select {
	case <-second.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the replaced connection is still open")
	}
	g3 := &guestT{Client: third}
	if r := g3.exec(t, "print(x)", 0); strings.TrimSpace(text(r, "stdout")) != "41" {
		t.Fatalf("on the newest connection, print(x): %+v", r)
	}
}

// A cell running when its connection drops is interrupted; the kernel stays.
func TestListenConnectionDropInterrupts(t *testing.T) {
	needIPython(t)
	sock, _ := listen(t, Options{})
	c := attachConfigured(t, sock)
	started := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		var once sync.Once
		c.Execute(context.Background(), api.ExecuteRequest{Code: "import time\nprint('started', flush=True)\nwhile True: time.sleep(0.05)", TimeoutS: 60}, func(o api.Output) {
			if strings.Contains(o.Text, "started") {
				once.Do(func() { close(started) })
			}
		})
	}()
	select {
	case <-started:
	case <-ended:
		t.Fatal("the cell ended before it printed")
	}
	c.Close()
	c2, err := attach(t, sock, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	g := &guestT{Client: c2}
	// The next cell runs: the kernel is free again and kept its state.
	if r := g.exec(t, "print('free', time.time() > 0)", 0); strings.TrimSpace(text(r, "stdout")) != "free True" {
		t.Fatalf("after the dropped connection: %+v", r)
	}
}

// A guest that no server attaches to for OrphanExit exits; one attached does not.
func TestListenOrphanExit(t *testing.T) {
	needIPython(t)
	_, done := listen(t, Options{OrphanExit: 300 * time.Millisecond})
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a guest nobody attached to is still there")
	}

	sock, done := listen(t, Options{OrphanExit: 300 * time.Millisecond})
	c := attachConfigured(t, sock)
	g := &guestT{Client: c}
	// Attached across three orphan periods.
	if r := g.exec(t, "import time; time.sleep(1); print('here')", 0); strings.TrimSpace(text(r, "stdout")) != "here" {
		t.Fatalf("attached guest: %+v", r)
	}
	select {
	case <-done:
		t.Fatal("an attached guest exited")
	default:
	}
	c.Close()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the guest is still there after its server left")
	}
}

// A checkpoint closes the listener and the connection; SIGUSR1 makes the guest listen
// again, with its kernel as it was. A signal from before the checkpoint does not count.
func TestListenCheckpoint(t *testing.T) {
	needIPython(t)
	sock, _ := listen(t, Options{})
	c := attachConfigured(t, sock)
	g := &guestT{Client: c}
	if r := g.exec(t, "x = 41", 0); r.Status != "ok" {
		t.Fatalf("x = 41: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	unix.Kill(os.Getpid(), unix.SIGUSR1) // stale by the time of the checkpoint
	time.Sleep(50 * time.Millisecond)
	if err := c.Checkpoint(ctx); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("the connection is open after Checkpoint returned")
	}
	// Nothing listens (the socket file went with the listener), nor starts to with the
	// signal sent before.
	time.Sleep(200 * time.Millisecond)
	if conn, err := net.Dial("unix", sock); err == nil {
		conn.Close()
		t.Fatal("the guest still listens after a checkpoint")
	}
	unix.Kill(os.Getpid(), unix.SIGUSR1)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guest does not listen again after SIGUSR1")
		}
	}
	c2, err := attach(t, sock, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	g2 := &guestT{Client: c2}
	if r := g2.exec(t, "print(x + 1)", 0); strings.TrimSpace(text(r, "stdout")) != "42" {
		t.Fatalf("after the checkpoint, print(x + 1): %+v", r)
	}
}

// A guest on stdio cannot be checkpointed, and says so.
func TestCheckpointOnStdio(t *testing.T) {
	needIPython(t)
	g := startGuest(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Checkpoint(ctx); errdefs.Code(err) != api.CodeFailedPrecondition {
		t.Fatalf("Checkpoint on stdio: %v, want failed_precondition", err)
	}
}

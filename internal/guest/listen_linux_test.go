package guest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
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

// The kernel outlives the connection: a second server attaches and finds its variables.
// Wrong tokens are refused, and a new connection replaces the one before it.
func TestListen(t *testing.T) {
	needIPython(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "guest.sock")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token, err := readToken(tokenFile)
	if err != nil || token != testToken {
		t.Fatalf("readToken = %q, %v", token, err)
	}
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the token file is still there after it was read: %v", err)
	}
	ln, err := listenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, %v; want 0600", fi.Mode(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Listen(ctx, ln, token, Options{Workspace: t.TempDir()}) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Listen: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Listen did not return after its context ended")
		}
	}()

	if _, err := attach(t, sock, "not-the-token-0123456789abcdef012"); !errors.Is(err, guestproto.ErrBadAttach) {
		t.Fatalf("attach with a wrong token: %v, want refused", err)
	}
	first, err := attach(t, sock, token)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ccancel()
	if err := first.Configure(cctx, testConfig()); err != nil {
		t.Fatalf("configure: %v", err)
	}
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
	dir := t.TempDir()
	sock := filepath.Join(dir, "guest.sock")
	ln, err := listenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Listen(ctx, ln, testToken, Options{Workspace: t.TempDir()})
	c, err := attach(t, sock, testToken)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ccancel()
	if err := c.Configure(cctx, testConfig()); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go c.Execute(cctx, api.ExecuteRequest{Code: "import time\nprint('started', flush=True)\nwhile True: time.sleep(0.05)", TimeoutS: 60}, func(o api.Output) {
		if strings.Contains(o.Text, "started") {
			close(started)
		}
	})
	<-started
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

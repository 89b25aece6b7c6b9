package guestproto

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/cellbox/cellbox/internal/testbin"
)

// A guest that opens more egress streams than the handler's max gets the ones past it
// closed at once; a stream that does not name itself is closed; and none reaches a client
// without a handler.
func TestAttackEgressStreams(t *testing.T) {
	a, b := net.Pipe()
	guest, err := yamux.Server(b, YamuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	go func() { // the guest answers the hello, nothing else
		for {
			s, err := guest.AcceptStream()
			if err != nil {
				return
			}
			var req Request
			line, _ := ReadLine(bufio.NewReader(s), MaxMessageSize)
			if json.Unmarshal(line, &req) == nil && req.Op == OpHello {
				WriteJSON(s, Message{Hello: &Hello{Version: Version}})
			}
			s.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); guest.Close() })

	open := func(hello string) *yamux.Stream {
		s, err := guest.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(s, hello)
		return s
	}
	closed := func(s *yamux.Stream) bool {
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := s.Read(make([]byte, 1))
		return err == io.EOF
	}

	if s := open(`{"op":"egress"}` + "\n"); !closed(s) {
		t.Error("a stream reached a client that serves no egress")
	}

	const max = 8
	var served atomic.Int64
	release := make(chan struct{})
	c.ServeEgress(func(conn net.Conn) {
		served.Add(1)
		<-release
	}, max)
	if s := open(`{"op":"execute"}` + "\n"); !closed(s) {
		t.Error("a stream that is not an egress connection was served")
	}
	// Streams opened one at a time, below the max, are served.
	const first = max / 2
	for i := range first {
		open(`{"op":"egress"}` + "\n")
		testbin.WaitFor(t, 10*time.Second, "the handler to hold its streams", func() error {
			if served.Load() <= int64(i) {
				return io.ErrNoProgress
			}
			return nil
		})
	}
	// A burst past the max: at most max-first more are served, the rest are closed at
	// once, while those served stay open (their reads time out): read them all at the
	// same time.
	var burst []*yamux.Stream
	for range 2 * max {
		burst = append(burst, open(`{"op":"egress"}`+"\n"))
	}
	var refused atomic.Int64
	done := make(chan struct{})
	for _, s := range burst {
		go func() {
			s.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := s.Read(make([]byte, 1)); err == io.EOF {
				refused.Add(1)
			}
			done <- struct{}{}
		}()
	}
	for range burst {
		<-done
	}
	if got := served.Load(); got > max || refused.Load() < int64(len(burst)-(max-first)) {
		t.Errorf("%d streams served at once (max %d), %d of a burst of %d refused", got, max, refused.Load(), len(burst))
	}
	close(release)
}

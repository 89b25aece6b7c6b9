package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testhost"
)

// roundTrip sends a GET for host over an open tunnel c and returns the echo's reply.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, host, path string) testhost.EchoReply {
	t.Helper()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s%s through the tunnel: %v, %v", host, path, resp, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return echoOf(t, string(b))
}

// TestGatewayLimits: a session's cap on connections, its byte quota and its bandwidth cap;
// an upstream that drips or never answers.
func TestGatewayLimits(t *testing.T) {
	e := newEnv(t, nil)
	allow := api.Network{Egress: "allowlist", Allow: []string{"echo.example", "blob.example", "slow.example", "silent.example"}}

	t.Run("MaxConns", func(t *testing.T) {
		const max = 2
		sb := e.session(t, allow, Limits{MaxConns: max})
		var open []net.Conn
		for range max {
			code, _, c, br := sb.connect("echo.example:80")
			if code != 200 {
				t.Fatalf("CONNECT: %d", code)
			}
			roundTrip(t, c, br, "echo.example", "/")
			open = append(open, c)
		}
		const sentence = "this session has too many egress connections open; close some and try again"
		code, body, _, _ := sb.connect("echo.example:80")
		wantRefusal(t, code, body, http.StatusTooManyRequests, sentence)
		r := sb.last()
		wantRecord(t, r, "refused", "", sentence)
		if r.Host != "echo.example" || r.Port != 80 {
			t.Errorf("record %+v; want echo.example:80", r)
		}
		if log, _ := e.g.Log(sb.id); log.Open != max {
			t.Errorf("%d open; want %d", log.Open, max)
		}
		// One closed, one more may open.
		open[0].Close()
		testbin.WaitFor(t, 10*time.Second, "a connection to be let in after one closed", func() error {
			if code, body, _, _ := sb.connect("echo.example:80"); code != 200 {
				return fmt.Errorf("%d %q", code, body)
			}
			return nil
		})
	})

	t.Run("QuotaBytes", func(t *testing.T) {
		const quota = 64 << 10
		sb := e.session(t, allow, Limits{QuotaBytes: quota})
		c := sb.client(nil)
		resp, err := c.Get("http://blob.example/big")
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil || n >= blobSize {
			t.Fatalf("read %d bytes of %d past a quota of %d: %v; want the download cut", n, blobSize, quota, err)
		}
		const sentence = "this session has used its egress quota of 64 KiB"
		r := sb.done()
		wantRecord(t, r, "allowed", "blob.example", sentence)
		if r.BytesIn < quota-1024 || r.BytesIn > quota+64<<10 {
			t.Errorf("record %+v; want about %d bytes in", r, quota)
		}
		code, body := get(t, c, "http://echo.example/")
		wantRefusal(t, code, body, http.StatusTooManyRequests, sentence)
		wantRecord(t, sb.last(), "refused", "", sentence)
		if log, _ := e.g.Log(sb.id); log.BytesUsed < quota || log.QuotaBytes != quota {
			t.Errorf("log: used %d of %d; want the quota used", log.BytesUsed, log.QuotaBytes)
		}
	})

	// The bandwidth cap: a token bucket at the session's rate, which every byte both ways
	// waits for, in takes no larger than its burst. Counted, not timed: the bucket is the
	// real one, wrapped.
	t.Run("RateBytesPerSec", func(t *testing.T) {
		const bps = 4 << 20
		var made []int64
		counted := &countingBucket{}
		re := e.withGateway(func(*Config) {})
		real := re.g.newBucket
		re.g.newBucket = func(r int64) bucket {
			made = append(made, r)
			counted.bucket = real(r)
			return counted
		}
		sb := re.session(t, allow, Limits{RateBytesPerSec: bps})
		if len(made) != 1 || made[0] != bps {
			t.Fatalf("buckets made: %v; want one of %d bytes/s", made, bps)
		}
		resp, err := sb.client(nil).Get("http://blob.example/all")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(b) != blobSize {
			t.Fatalf("read %d bytes: %v; want %d", len(b), err, blobSize)
		}
		for i, c := range b {
			if c != testhost.BlobByte(int64(i)) {
				t.Fatalf("byte %d is %d; want %d", i, c, testhost.BlobByte(int64(i)))
			}
		}
		r := sb.done()
		if r.BytesIn < blobSize || r.BytesOut == 0 {
			t.Errorf("record %+v; want at least %d bytes in", r, blobSize)
		}
		if log, _ := re.g.Log(sb.id); log.BytesUsed != r.BytesIn+r.BytesOut {
			t.Errorf("log: used %d; want %d", log.BytesUsed, r.BytesIn+r.BytesOut)
		}
		total, most, takes := counted.counts()
		if total != r.BytesIn+r.BytesOut || most > burst(bps) {
			t.Errorf("the bucket gave %d bytes in %d takes of at most %d; want %d (every byte of the record) in takes of at most %d",
				total, takes, most, r.BytesIn+r.BytesOut, burst(bps))
		}
	})

	t.Run("slowloris upstream", func(t *testing.T) {
		sb := e.session(t, allow, Limits{})
		before := runtime.NumGoroutine()
		c := sb.client(nil)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://slow.example:81/", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, 1)
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Fatal(err)
		}
		cancel() // the client gives up while the upstream drips
		if _, err := io.ReadAll(resp.Body); err == nil {
			t.Error("the body ended without an error after the client gave up")
		}
		resp.Body.Close()
		r := sb.done()
		wantRecord(t, r, "allowed", "slow.example", "the client left before the answer ended")
		c.CloseIdleConnections()
		if !testbin.Eventually(10*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines; %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	})

	t.Run("upstream that never answers", func(t *testing.T) {
		se := e.withGateway(func(c *Config) { c.HeaderTimeout = 300 * time.Millisecond })
		sb := se.session(t, allow, Limits{})
		code, body := get(t, sb.client(nil), "http://silent.example:83/")
		const sentence = "silent.example did not answer within 300ms"
		wantRefusal(t, code, body, http.StatusGatewayTimeout, sentence)
		r := sb.done()
		wantRecord(t, r, "allowed", "silent.example", sentence)
		if r.BytesOut == 0 || r.BytesIn != 0 {
			t.Errorf("record %+v; want the request out and nothing in", r)
		}
	})
}

// countingBucket passes waits on to bucket, counting the bytes, the takes and the largest.
type countingBucket struct {
	bucket
	mu    sync.Mutex
	total int64
	most  int
	takes int
}

func (c *countingBucket) WaitN(ctx context.Context, n int) error {
	c.mu.Lock()
	c.total += int64(n)
	c.most = max(c.most, n)
	c.takes++
	c.mu.Unlock()
	return c.bucket.WaitN(ctx, n)
}

func (c *countingBucket) counts() (int64, int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total, c.most, c.takes
}

// TestGatewayPolicyChange: a narrower policy closes the open tunnels it refuses and keeps
// the others; the session's end closes everything.
func TestGatewayPolicyChange(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.session(t, api.Network{Egress: "allowlist", Allow: []string{"echo.example", "other.example"}}, Limits{})
	code, _, c1, br1 := sb.connect("echo.example:80")
	if code != 200 {
		t.Fatalf("CONNECT echo.example: %d", code)
	}
	roundTrip(t, c1, br1, "echo.example", "/before")
	code, _, c2, br2 := sb.connect("other.example:80")
	if code != 200 {
		t.Fatalf("CONNECT other.example: %d", code)
	}
	roundTrip(t, c2, br2, "other.example", "/before")

	narrow, err := Compile(api.Network{Egress: "allowlist", Allow: []string{"other.example"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.g.Set(sb.id, "tenant", narrow, Limits{}, nil)
	cut(t, c1, br1)
	// The client sees the cut before the gateway's relay has ended and closed the record.
	var log api.EgressLog
	testbin.WaitFor(t, 10*time.Second, "the cut tunnel's record to close", func() error {
		log, _ = e.g.Log(sb.id)
		if log.Open != 1 || len(log.Connections) != 2 {
			return fmt.Errorf("log %+v; want 2 records, 1 open", log)
		}
		return nil
	})
	r := log.Connections[1]
	wantRecord(t, r, "allowed", "echo.example", "the session's network policy changed and no longer allows it")
	if r.Open {
		t.Errorf("record %+v: still open", r)
	}
	if log.Network.Allow[0] != "other.example" || len(log.Network.Allow) != 1 {
		t.Errorf("log's policy %+v; want the narrower one", log.Network)
	}
	// The tunnel the new policy allows still carries requests.
	roundTrip(t, c2, br2, "other.example", "/after")

	e.g.End(sb.id)
	cut(t, c2, br2)
	if _, ok := e.g.Log(sb.id); ok {
		t.Error("an ended session still has a log")
	}
	// A connection to an ended session's proxy gets nothing out.
	code, body, _, _ := sb.connect("other.example:80")
	wantRefusal(t, code, body, http.StatusForbidden, "this session has no internet access")
}

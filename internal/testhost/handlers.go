package testhost

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"
)

// EchoReply is what Echo answers: the request as it arrived.
type EchoReply struct {
	Method     string
	Host       string
	Path       string // with the query, as the request line had it
	Proto      string // "HTTP/1.1", "HTTP/2.0"
	TLS        bool
	RemoteAddr string
	Header     map[string][]string
	Body       string // its first MiB
}

// Echo answers every request with its EchoReply as JSON, so a test sees what arrived upstream.
func Echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(EchoReply{
			Method: r.Method, Host: r.Host, Path: r.RequestURI, Proto: r.Proto, TLS: r.TLS != nil,
			RemoteAddr: r.RemoteAddr, Header: r.Header, Body: string(body),
		})
	})
}

// Blob serves size bytes at every path, byte i being BlobByte(i), with Content-Length, HEAD
// and ranges.
func Blob(size int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, &blob{size: size})
	})
}

// BlobByte is byte i of what Blob serves: i mod 251 (a prime, so the pattern does not line
// up with buffer sizes and a lost or repeated buffer shows).
func BlobByte(i int64) byte { return byte(i % 251) }

// blobPattern is 64 periods of the pattern, for Read to copy from.
var blobPattern = func() []byte {
	b := make([]byte, 251*64)
	for i := range b {
		b[i] = BlobByte(int64(i))
	}
	return b
}()

// blob is an io.ReadSeeker over size bytes of the pattern.
type blob struct{ size, off int64 }

func (b *blob) Read(p []byte) (int, error) {
	if b.off >= b.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), b.size-b.off)]
	n := 0
	for n < len(p) {
		n += copy(p[n:], blobPattern[(b.off+int64(n))%251:])
	}
	b.off += int64(n)
	return n, nil
}

func (b *blob) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += b.off
	case io.SeekEnd:
		offset += b.size
	}
	if offset < 0 {
		return 0, errors.New("seek before the start")
	}
	b.off = offset
	return offset, nil
}

// SlowInterval is how long Slow waits between bytes.
const SlowInterval = 2 * time.Second

// Slow answers 200 with its headers and a first byte at once, then one byte every
// SlowInterval, for ever: until the client goes (a slowloris upstream).
func Slow() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		tick := time.NewTicker(SlowInterval)
		defer tick.Stop()
		rc := http.NewResponseController(w)
		for {
			if _, err := w.Write([]byte{'.'}); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	})
}

// Redirect answers every request with 302 Found to the URL to.
func Redirect(to string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to, http.StatusFound)
	})
}

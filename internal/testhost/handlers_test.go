package testhost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestEcho(t *testing.T) {
	srv := httptest.NewServer(Echo())
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/a/b?c=d", strings.NewReader("body"))
	req.Host = "api.example.com"
	req.Header.Set("X-Test", "yes")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got EchoReply
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Method != "POST" || got.Host != "api.example.com" || got.Path != "/a/b?c=d" || got.Body != "body" ||
		got.TLS || http.Header(got.Header).Get("X-Test") != "yes" {
		t.Errorf("echo %+v", got)
	}
}

func TestBlob(t *testing.T) {
	const size = 1<<20 + 17
	srv := httptest.NewServer(Blob(size))
	defer srv.Close()
	want := make([]byte, size)
	for i := range want {
		want[i] = BlobByte(int64(i))
	}
	tests := []struct {
		method, rangeHdr string
		status           int
		body             []byte
	}{
		{"GET", "", 200, want},
		{"HEAD", "", 200, nil},
		{"GET", "bytes=1000-1999", 206, want[1000:2000]},
		{"GET", fmt.Sprintf("bytes=%d-", size-5), 206, want[size-5:]},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.rangeHdr, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+"/any/path", nil)
			if tt.rangeHdr != "" {
				req.Header.Set("Range", tt.rangeHdr)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			wantLen := len(tt.body)
			if tt.method == "HEAD" {
				wantLen = size
			}
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Length") != strconv.Itoa(wantLen) || !bytes.Equal(body, tt.body) {
				t.Errorf("status %d, Content-Length %s, %d bytes (equal %v); want %d, %d, %d bytes",
					resp.StatusCode, resp.Header.Get("Content-Length"), len(body), bytes.Equal(body, tt.body), tt.status, wantLen, len(tt.body))
			}
		})
	}
}

// TestSlow reads the first byte and leaves: the handler ends with the client.
func TestSlow(t *testing.T) {
	ended := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		Slow().ServeHTTP(w, r)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, b); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, first byte: %v", resp.StatusCode, err)
	}
	resp.Body.Close() // the connection closes: the body was not read to its end
	<-ended
}

func TestRedirect(t *testing.T) {
	srv := httptest.NewServer(Redirect("http://10.0.0.1/x"))
	defer srv.Close()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(srv.URL + "/from")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "http://10.0.0.1/x" {
		t.Errorf("%d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

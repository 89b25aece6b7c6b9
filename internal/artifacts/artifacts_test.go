package artifacts

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/artifacts/artifactstest"
)

const (
	bucket      = "artifacts"
	azContainer = "artifacts"
	azKey       = artifactstest.AzureKey
)

func startS3(t *testing.T)      { artifactstest.StartS3(t, bucket) }
func startAzurite(t *testing.T) { artifactstest.StartAzurite(t, azContainer) }

// zeros is n bytes of a pattern, made as read.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n == 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n)
	for i := range p[:k] {
		p[i] = byte(i)
	}
	z.n -= k
	return int(k), nil
}

// TestStores: against real servers (versitygw for S3, Azurite for Azure): an object put is
// downloaded by its presigned URL, without credentials, with its type; a large one
// streams (the heap stays flat); a public base URL gives plain URLs; wrong credentials and
// a missing bucket are errors that say so.
func TestStores(t *testing.T) {
	for _, kind := range []string{"s3", "azblob"} {
		t.Run(kind, func(t *testing.T) {
			spec := "s3://" + bucket + "/runs"
			if kind == "s3" {
				startS3(t)
			} else {
				startAzurite(t)
				spec = "azblob://" + azContainer + "/runs"
			}
			ctx := context.Background()
			s, err := Open(ctx, spec, Options{})
			if err != nil {
				t.Fatal(err)
			}
			key := Key("runs", "alice", "0123abcd", "plots/chart one.png")
			body := []byte("\x89PNG not really")
			if err := s.Put(ctx, key, bytes.NewReader(body), int64(len(body)), "image/png"); err != nil {
				t.Fatal(err)
			}
			u, exp, err := s.URL(ctx, key, time.Hour)
			if err != nil || time.Until(exp) < 59*time.Minute || time.Until(exp) > time.Hour+time.Second {
				t.Fatalf("URL %s, expires %v: %v", u, exp, err)
			}
			res, err := http.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || !bytes.Equal(got, body) || res.Header.Get("Content-Type") != "image/png" {
				t.Errorf("GET the presigned URL: %d %q %v", res.StatusCode, got, res.Header)
			}
			// Folders read as folders (the Azure SDK's own URL escapes the slashes).
			if !strings.Contains(u, "/runs/t-") {
				t.Errorf("URL %s: the key's slashes escaped", u)
			}
			// The URL is for that object alone.
			other := strings.Replace(u, "chart%20one.png", "chart%20two.png", 1)
			if res, err := http.Get(other); err != nil || res.StatusCode < 400 {
				t.Errorf("another object by the URL's signature: %v %v", err, res.StatusCode)
			}

			if kind == "s3" {
				t.Run("spool", func(t *testing.T) {
					// What a crash left in the spool goes when the store opens; a put leaves nothing.
					dir := filepath.Join(t.TempDir(), "spool")
					os.MkdirAll(dir, 0o700)
					os.WriteFile(filepath.Join(dir, "cellbox-artifact-left"), []byte("old"), 0o600)
					s, err := Open(ctx, spec, Options{SpoolDir: dir})
					if err != nil {
						t.Fatal(err)
					}
					if err := s.Put(ctx, key, bytes.NewReader(body), int64(len(body)), "image/png"); err != nil {
						t.Fatal(err)
					}
					if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
						t.Errorf("the spool after a put: %v, %v", left, err)
					}
				})
			}

			t.Run("large file streams", func(t *testing.T) {
				const size = 96 << 20
				var peak atomic.Uint64
				done := make(chan struct{})
				go func() {
					var m runtime.MemStats
					for {
						select {
						case <-done:
							return
						case <-time.After(20 * time.Millisecond):
						}
						runtime.ReadMemStats(&m)
						if m.HeapInuse > peak.Load() {
							peak.Store(m.HeapInuse)
						}
					}
				}()
				var before runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				err := s.Put(ctx, key+".big", &zeros{size}, size, "application/octet-stream")
				close(done)
				if err != nil {
					t.Fatal(err)
				}
				if grew := int64(peak.Load()) - int64(before.HeapInuse); grew > 48<<20 {
					t.Errorf("a %d MiB upload grew the heap by %d MiB", size>>20, grew>>20)
				}
				u, _, _ := s.URL(ctx, key+".big", time.Minute)
				res, err := http.Get(u)
				if err != nil {
					t.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if n != size {
					t.Errorf("downloaded %d bytes of %d", n, size)
				}
			})
			t.Run("a file that changed while read", func(t *testing.T) {
				err := s.Put(ctx, key+".short", bytes.NewReader(body), int64(len(body))+5, "text/plain")
				if err == nil || !strings.Contains(err.Error(), "changed while it was read") {
					t.Errorf("%v", err)
				}
			})
			t.Run("public", func(t *testing.T) {
				p, err := Open(ctx, spec, Options{PublicURL: "https://artifacts.example.com/base/"})
				if err != nil {
					t.Fatal(err)
				}
				u, exp, err := p.URL(ctx, key, time.Hour)
				if err != nil || !exp.IsZero() || u != "https://artifacts.example.com/base/runs/"+strings.TrimPrefix(strings.ReplaceAll(key, " ", "%20"), "runs/") {
					t.Errorf("public URL %q, %v, %v", u, exp, err)
				}
			})
			t.Run("refusals", func(t *testing.T) {
				missing := strings.Replace(spec, "//artifacts/", "//no-such-bucket/", 1)
				gone, err := Open(ctx, missing, Options{})
				if err != nil {
					t.Fatal(err)
				}
				err = gone.Put(ctx, key, bytes.NewReader(body), int64(len(body)), "text/plain")
				if err == nil || !strings.Contains(err.Error(), map[string]string{"s3": "NoSuchBucket", "azblob": "ContainerNotFound"}[kind]) {
					t.Errorf("a missing bucket: %v", err)
				}
				if kind == "s3" {
					t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
				} else {
					t.Setenv("AZURE_STORAGE_CONNECTION_STRING", strings.Replace(os.Getenv("AZURE_STORAGE_CONNECTION_STRING"), azKey, strings.Repeat("A", 86)+"==", 1))
				}
				bad, err := Open(ctx, spec, Options{})
				if err != nil {
					t.Fatal(err)
				}
				err = bad.Put(ctx, key, bytes.NewReader(body), int64(len(body)), "text/plain")
				if err == nil || !strings.Contains(err.Error(), map[string]string{"s3": "SignatureDoesNotMatch", "azblob": "AuthorizationFailure"}[kind]) {
					t.Errorf("wrong credentials: %v", err)
				}
			})
		})
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, spec := range []string{"", "s3://", "ftp://b/p", "s3://user@b/p", "s3://b/p?x=1", "b/p"} {
		if _, err := Open(context.Background(), spec, Options{}); err == nil {
			t.Errorf("%q was taken", spec)
		}
	}
	if _, err := Open(context.Background(), "s3://b", Options{PublicURL: "javascript:alert(1)"}); err == nil {
		t.Error("a public URL that is no URL was taken")
	}
}

func TestKey(t *testing.T) {
	a, b := Key("p", "alice", "s1", "d/x.png"), Key("", "bob", "s1", "d/x.png")
	if !strings.HasPrefix(a, "p/t-") || !strings.HasSuffix(a, "/s1/d/x.png") || strings.Contains(a, "alice") || strings.HasPrefix(b, "/") || a[2:] == b {
		t.Errorf("keys %q %q", a, b)
	}
}

// Errors never carry a request's query: a SAS token or a signature. A SAS connection
// string, which cannot sign download URLs, is refused at once unless the store is public.
func TestSecretsStayOut(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "BlobEndpoint=http://127.0.0.1:1/acct;SharedAccessSignature=sv=2022&sig=TOPSECRETSIG")
	if _, err := Open(context.Background(), "azblob://c/p", Options{}); err == nil || !strings.Contains(err.Error(), "cannot sign") || strings.Contains(err.Error(), "TOPSECRET") {
		t.Errorf("a SAS connection string without a public URL: %v", err)
	}
	s, err := Open(context.Background(), "azblob://c/p", Options{PublicURL: "https://public.example/"})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Put(context.Background(), "k/x.txt", strings.NewReader("x"), 1, "text/plain")
	if err == nil || strings.Contains(err.Error(), "TOPSECRET") || strings.Contains(err.Error(), "sig=") {
		t.Errorf("a failed put's error: %v", err)
	}
}

package move

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/internal/statefile"
)

// A move is authorized by a signature, not by the secret itself: the secret would go to
// whatever address a Lease gives, and a Lease is no proof of a node. The signature covers
// everything the receiver acts on:
//
//   - the Authorization header signs the method, the path (the session's id), the query
//     (paused), the node it is for (a node signs for the Lease's name, and a node checks
//     with its own), a time and a nonce;
//   - the trailer Cellbox-Move-Body signs the body's SHA-256, bound to the header's
//     signature: the receiver unpacks the stream as it comes, into folders of its own that
//     nothing uses yet, and acts on none of it (no session is made, nothing runs) until the
//     body's end has matched its signature.
//
// A node takes each nonce once, within skew of its clock, and remembers the nonces it took
// on disk until they expire: a replay is refused after a restart too.
const (
	authScheme  = "Cellbox-Move"
	bodyTrailer = "Cellbox-Move-Body"
	skew        = 5 * time.Minute
	maxNonces   = 100_000
)

// MinSecret is the shortest cluster secret taken: 32 bytes of base64 are 44 characters.
const MinSecret = 32

// NewRequest is a signed move (PUT u, its path and query as sent) of body to node, at t,
// with a nonce of 32 hex digits: the header signs the request, and the trailer, set when
// body has been read to its end, signs what was read.
func NewRequest(ctx context.Context, secret, node string, u *url.URL, body io.Reader, t time.Time, nonce string) (*http.Request, error) {
	ts := strconv.FormatInt(t.Unix(), 10)
	head := headMAC(secret, node, u.EscapedPath(), u.RawQuery, ts, nonce)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", authScheme+" "+ts+"."+nonce+"."+head)
	req.Header.Set("Content-Type", "application/x-tar")
	req.Trailer = http.Header{bodyTrailer: nil}
	// The transport reads the body to its end, then writes the trailer (one goroutine).
	sr := &sumReader{r: body, h: sha256.New()}
	sr.end = func() { req.Trailer.Set(bodyTrailer, bodyMAC(secret, head, sr.h.Sum(nil))) }
	req.Body, req.ContentLength = io.NopCloser(sr), -1
	return req, nil
}

// sumReader sums what it reads, and calls end once when r ends.
type sumReader struct {
	r   io.Reader
	h   hash.Hash
	end func()
}

func (s *sumReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.h.Write(p[:n])
	if errors.Is(err, io.EOF) && s.end != nil {
		s.end()
		s.end = nil
	}
	return n, err
}

func headMAC(secret, node, path, query, ts, nonce string) string {
	h := hmac.New(sha256.New, []byte(secret))
	io.WriteString(h, "PUT\n"+path+"\n"+query+"\n"+node+"\n"+ts+"\n"+nonce)
	return hex.EncodeToString(h.Sum(nil))
}

func bodyMAC(secret, head string, sum []byte) string {
	h := hmac.New(sha256.New, []byte(secret))
	io.WriteString(h, "body\n"+head+"\n"+hex.EncodeToString(sum))
	return hex.EncodeToString(h.Sum(nil))
}

// errBody is a body that is not the one signed (changed, cut short, or no trailer).
var errBody = errors.New("the moved session's stream is not the one its sender signed")

// Verifier checks the signatures of moves sent to this node.
type Verifier struct {
	secret, node string
	file         string // the nonces taken, "<unix> <nonce>" a line; "": kept in memory only
	mu           sync.Mutex
	seen         map[string]time.Time // nonce → its signature's time
	lines        int                  // in file
}

// NewVerifier checks moves to node with the cluster's secret, remembering the nonces it
// takes in file ("": in memory only, for tests), which it reads first.
func NewVerifier(secret, node, file string) (*Verifier, error) {
	v := &Verifier{secret: secret, node: node, file: file, seen: map[string]time.Time{}}
	if file == "" {
		return v, nil
	}
	f, err := os.Open(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("the moves' nonces: %w", err)
	default:
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			ts, nonce, ok := strings.Cut(sc.Text(), " ")
			unix, err := strconv.ParseInt(ts, 10, 64)
			if ok && err == nil && validNonce(nonce) {
				v.seen[nonce] = time.Unix(unix, 0)
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("the moves' nonces: %w", err)
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.compact(time.Now()); err != nil {
		return nil, fmt.Errorf("the moves' nonces: %w", err)
	}
	return v, nil
}

// compact forgets the nonces whose signatures expired, and writes file anew with the
// others. v.mu is held.
func (v *Verifier) compact(now time.Time) error {
	var b strings.Builder
	for n, at := range v.seen {
		if at.Before(now.Add(-skew)) {
			delete(v.seen, n)
			continue
		}
		fmt.Fprintf(&b, "%d %s\n", at.Unix(), n)
	}
	if v.file == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(v.file), 0o700); err != nil {
		return err
	}
	v.lines = len(v.seen)
	return statefile.Write(v.file, []byte(b.String()), 0o600)
}

// take records nonce, of a signature of time at, as taken: on disk before it counts.
// v.mu is held.
func (v *Verifier) take(nonce string, at, now time.Time) error {
	if len(v.seen) >= maxNonces || v.lines > 2*len(v.seen)+1024 {
		if err := v.compact(now); err != nil {
			return err
		}
		if len(v.seen) >= maxNonces {
			return errors.New("too many moves signed within the clock's skew")
		}
	}
	if v.file != "" {
		f, err := os.OpenFile(v.file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "%d %s\n", at.Unix(), nonce)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		v.lines++
	}
	v.seen[nonce] = at
	return nil
}

func validNonce(n string) bool {
	if len(n) != 32 {
		return false
	}
	_, err := hex.DecodeString(n)
	return err == nil
}

// Check checks r's signature: a PUT of its path and query to this node, now, for the first
// time. It returns r's body as a reader whose end is an error (errBody) unless the body
// read is the one signed; false: refused, and the body is not to be read.
func (v *Verifier) Check(r *http.Request, now time.Time) (io.Reader, bool) {
	rest, ok := strings.CutPrefix(r.Header.Get("Authorization"), authScheme+" ")
	parts := strings.Split(rest, ".")
	if !ok || r.Method != http.MethodPut || len(parts) != 3 || !validNonce(parts[1]) || v.secret == "" {
		return nil, false
	}
	unix, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return nil, false
	}
	at := time.Unix(unix, 0)
	if at.Before(now.Add(-skew)) || at.After(now.Add(skew)) {
		return nil, false
	}
	want := headMAC(v.secret, v.node, r.URL.EscapedPath(), r.URL.RawQuery, parts[0], parts[1])
	if !hmac.Equal([]byte(want), []byte(parts[2])) {
		return nil, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, replayed := v.seen[parts[1]]; replayed {
		return nil, false
	}
	if v.take(parts[1], at, now) != nil {
		return nil, false
	}
	body := &sumReader{r: r.Body, h: sha256.New()}
	checked := &checkedBody{sumReader: body}
	body.end = func() {
		got := r.Trailer.Get(bodyTrailer)
		if !hmac.Equal([]byte(bodyMAC(v.secret, want, body.h.Sum(nil))), []byte(got)) {
			checked.err = errBody
		}
	}
	return checked, true
}

// checkedBody is a request's body whose end is err when its trailer did not match.
type checkedBody struct {
	*sumReader
	err error
}

func (c *checkedBody) Read(p []byte) (int, error) {
	n, err := c.sumReader.Read(p)
	if errors.Is(err, io.EOF) && c.err != nil {
		return n, c.err
	}
	return n, err
}

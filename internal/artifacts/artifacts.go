// Package artifacts keeps the files a session's code makes in object storage (S3 or an
// S3-compatible server, Azure Blob Storage) and hands out URLs to them that outlive the
// session: a presigned GET with an expiry, or a plain URL where the operator says the
// bucket is public. Objects are named by tenant, session and path (Key).
// Not for: deciding which files to upload or when (package session), links to a live
// session's files (package links).
package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// Store keeps objects and gives URLs to them.
type Store interface {
	// Put stores size bytes of body as key, streaming.
	Put(ctx context.Context, key string, body io.Reader, size int64, contentType string) error
	// URL is a URL that downloads key: presigned, until the time it returns, or, with a
	// public base URL, for good (the zero time).
	URL(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error)
	// Name names an object for people: "s3://bucket/key".
	Name(key string) string
	// Key names the object of a file of a tenant's session (the package's Key, under the
	// store's prefix).
	Key(tenant, session, rel string) string
}

// Options configure a store beyond its spec.
type Options struct {
	// PublicURL, when the bucket or container can be read by anyone, is the URL its keys
	// follow ("https://artifacts.example.com/"): URLs are PublicURL + key, with no expiry.
	PublicURL string
	// SpoolDir is where the S3 store writes a file before its upload (the SDK signs a
	// payload it reads twice): a folder of the store's own, emptied when it opens, so that
	// what a crash left goes. Empty: the system's temporary folder.
	SpoolDir string
}

// MaxTTL is the longest a presigned URL lives (S3's limit for SigV4).
const MaxTTL = 7 * 24 * time.Hour

// Open returns the store of spec: s3://BUCKET[/PREFIX] or azblob://CONTAINER[/PREFIX], with
// the endpoint, region and credentials from the provider's usual variables and files.
func Open(ctx context.Context, spec string, opts Options) (Store, error) {
	u, err := url.Parse(spec)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("artifacts store %q: give s3://BUCKET/PREFIX or azblob://CONTAINER/PREFIX: %w", spec, errdefs.ErrInvalidArgument)
	}
	prefix := strings.Trim(path.Clean("/"+u.Path), "/")
	if opts.PublicURL != "" {
		p, err := url.Parse(opts.PublicURL)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("artifacts public URL %q: give an http(s) URL: %w", opts.PublicURL, errdefs.ErrInvalidArgument)
		}
	}
	switch u.Scheme {
	case "s3":
		return openS3(ctx, u.Host, prefix, opts)
	case "azblob":
		return openAzblob(u.Host, prefix, opts)
	}
	return nil, fmt.Errorf("artifacts store %q: the scheme is s3 or azblob: %w", spec, errdefs.ErrInvalidArgument)
}

// MaxKey is the longest object name, in bytes, both services take (S3's 1,024 bytes;
// Azure's 1,024 characters).
const MaxKey = 1024

// Key names the object of a file: the store's prefix, a hash of the tenant (a tenant's
// name stays out of URLs), the session and the file's clean path in the workspace.
func Key(prefix, tenant, session, rel string) string {
	sum := sha256.Sum256([]byte("cellbox artifacts\x00" + tenant))
	k := "t-" + hex.EncodeToString(sum[:8]) + "/" + session + "/" + rel
	if prefix != "" {
		k = prefix + "/" + k
	}
	return k
}

// clean is err's message without the query of a URL in it: a request's URL can carry a
// signature or a SAS token.
func clean(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		u, perr := url.Parse(ue.URL)
		where := "the store"
		if perr == nil {
			u.RawQuery, u.Fragment, u.User = "", "", nil
			where = u.String()
		}
		return fmt.Sprintf("%s %s: %v", ue.Op, where, ue.Err)
	}
	return err.Error()
}

// publicURL joins a public base URL and a key, each segment escaped.
func publicURL(base, key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.TrimRight(base, "/") + "/" + strings.Join(segs, "/")
}

package client

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
)

// UploadFile writes r to path in the session's workspace, creating parent folders. path is
// relative to /mnt/data, or absolute under it. r is streamed, never held whole; when it
// has a Len (bytes.Reader, strings.Reader, ...) or can seek (a regular *os.File), its size is sent first
// so the server can refuse a file above its limit before it is sent.
func (c *Client) UploadFile(ctx context.Context, id, path string, r io.Reader) (*api.FileInfo, error) {
	req, err := c.newRequest(ctx, http.MethodPut, filePath(id, path), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Body = io.NopCloser(r)
	req.ContentLength = -1
	switch v := r.(type) {
	case interface{ Len() int }:
		req.ContentLength = int64(v.Len())
	case io.Seeker:
		if cur, err := v.Seek(0, io.SeekCurrent); err == nil {
			if end, err := v.Seek(0, io.SeekEnd); err == nil {
				if _, err := v.Seek(cur, io.SeekStart); err == nil {
					req.ContentLength = end - cur
				}
			}
		}
	}
	if req.ContentLength == 0 {
		req.Body = http.NoBody
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return decodeBody[api.FileInfo](resp, req)
}

// File is a workspace file being downloaded. Read it, then Close it.
type File struct {
	io.ReadCloser
	Name        string // base name
	Size        int64  // -1 when the server did not say
	ContentType string
	ModTime     time.Time
}

// DownloadFile opens a workspace file for reading. The body is streamed from the server as
// it is read; a transfer cut short ends in an error, never a silently short file.
func (c *Client) DownloadFile(ctx context.Context, id, path string) (*File, error) {
	req, err := c.newRequest(ctx, http.MethodGet, filePath(id, path), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Del("Accept")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	f := &File{ReadCloser: resp.Body, Size: resp.ContentLength, ContentType: resp.Header.Get("Content-Type")}
	if _, params, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); err == nil {
		f.Name = baseName(params["filename"])
	}
	if f.Name == "" {
		f.Name = baseName(path)
	}
	f.ModTime, _ = http.ParseTime(resp.Header.Get("Last-Modified"))
	return f, nil
}

// baseName is the last element of a name a server or caller gave, "" when that is none a
// program could write as a file of its own folder ("", ".", ".."): a client that saves a
// download under File.Name writes nowhere else, whatever the server said.
func baseName(name string) string {
	name = name[strings.LastIndexAny(name, "/\\")+1:]
	if name == "." || name == ".." || strings.ContainsRune(name, 0) {
		return ""
	}
	return name
}

// DownloadFileTo copies a workspace file to w as it arrives and returns its size.
func (c *Client) DownloadFileTo(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	f, err := c.DownloadFile(ctx, id, path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err != nil {
		return n, fmt.Errorf("download %s: %w", path, err)
	}
	return n, nil
}

// ListFiles lists a folder of the workspace ("" for the workspace itself).
func (c *Client) ListFiles(ctx context.Context, id, dir string) (*api.FileList, error) {
	p := sessionPath(id, "/files")
	if dir != "" {
		p += "?" + url.Values{"path": {dir}}.Encode()
	}
	return call[api.FileList](ctx, c, http.MethodGet, p, nil)
}

// DeleteFile removes a workspace file or empty folder.
func (c *Client) DeleteFile(ctx context.Context, id, path string) error {
	_, err := call[struct{}](ctx, c, http.MethodDelete, filePath(id, path), nil)
	return err
}

// filePath is the URL path of a workspace file. Each segment is escaped on its own, so the
// server sees exactly the path given: a leading "/" (as in /mnt/data/x) is sent as %2F,
// and "." or ".." as %2E so that no one on the way resolves them; the server refuses
// ".." itself. Empty and "." segments mean nothing in a workspace path and are dropped.
func filePath(id, path string) string {
	var b strings.Builder
	b.WriteString(sessionPath(id, "/files/"))
	if strings.HasPrefix(path, "/") {
		b.WriteString("%2F")
	}
	first := true
	for _, seg := range strings.Split(path, "/") {
		if seg == "" || seg == "." {
			continue
		}
		if !first {
			b.WriteByte('/')
		}
		first = false
		if seg == ".." {
			b.WriteString("%2E%2E")
			continue
		}
		b.WriteString(url.PathEscape(seg))
	}
	return b.String()
}

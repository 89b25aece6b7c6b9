package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/errdefs/errmcp"
	"github.com/cellbox/cellbox/internal/tool"
	"github.com/cellbox/cellbox/internal/workspace"
)

// Workspace files are resources cellbox://<session_id>/mnt/data/<path>.
const (
	scheme      = "cellbox"
	uriTemplate = scheme + "://{session_id}" + api.WorkspaceDir + "/{+path}"
)

// Bounds of the resource calls.
const (
	maxRead   = 10 << 20 // bytes one resources/read returns
	maxListed = 500      // files resources/list returns
	maxDirs   = 100      // folders resources/list looks into
	maxURI    = 8192

	maxReadText = "10 MiB"
)

// FileURI is the resource URI of a workspace file (rel: a clean relative path).
func FileURI(sessionID, rel string) string {
	return (&url.URL{Scheme: scheme, Host: sessionID, Path: workspace.GuestPath(rel)}).String()
}

// parseURI returns the session and the clean workspace path a resource URI names. It
// refuses anything but cellbox://<session id>/mnt/data/<path> with a path of plain names:
// no empty, "." or ".." component (escaped or not), no NUL, backslash or control character,
// no query, fragment, user or port.
func parseURI(raw string) (id, rel string, err error) {
	bad := func(why string) (string, string, error) {
		return "", "", fmt.Errorf("resource URI %q: %s; workspace files are %s://<session_id>%s/<path>",
			trim(raw, 200), why, scheme, api.WorkspaceDir)
	}
	if len(raw) > maxURI {
		return bad(fmt.Sprintf("longer than %d bytes", maxURI))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("not a valid URI")
	}
	switch {
	case u.Scheme != scheme:
		return bad("not a " + scheme + " URI")
	case u.Opaque != "" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "":
		return bad("it has parts a workspace file's URI does not have")
	case !validSessionID(u.Host):
		return bad("no valid session id")
	case !strings.HasPrefix(u.Path, api.WorkspaceDir+"/"):
		return bad("not under " + api.WorkspaceDir)
	}
	p := strings.TrimPrefix(u.Path, api.WorkspaceDir+"/")
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return bad("the path has an empty, \".\" or \"..\" component")
		}
		for _, r := range c {
			if r < 0x20 || r == 0x7f || r == '\\' || r == utf8.RuneError {
				return bad("the path has a control character, a backslash or invalid UTF-8")
			}
		}
	}
	rel, err = workspace.Clean(p)
	if err != nil || rel == "." {
		return bad("not a workspace file")
	}
	return u.Host, rel, nil
}

// validSessionID is a cheap check of a session id's shape (the manager's are hex).
func validSessionID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// listResources answers resources/list with the files of the connection's session (the
// one its latest tool call ran in), breadth first, at most maxListed of them.
func (s *Server) listResources(ctx context.Context, c *conn, req *mcp.ListResourcesRequest) (*mcp.ListResourcesResult, error) {
	res := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	if c = s.attach(ctx, c, req.Session); c == nil {
		return res, nil
	}
	id := c.session()
	if id == "" {
		return res, nil
	}
	dirs := []string{"."}
	for n := 0; len(dirs) > 0 && n < maxDirs; n++ {
		dir := dirs[0]
		dirs = dirs[1:]
		list, err := s.m.ListFiles(ctx, id, dir)
		switch {
		case err != nil && dir == ".":
			if errors.Is(err, errdefs.ErrNotFound) { // the session ended
				return res, nil
			}
			return nil, s.protocolError(err)
		case err != nil: // gone since it was listed
			continue
		}
		for _, f := range list.Files {
			rel, err := workspace.Clean(f.Path)
			if err != nil || rel == "." {
				continue
			}
			switch f.Type {
			case "dir":
				dirs = append(dirs, rel)
			case "file":
				res.Resources = append(res.Resources, &mcp.Resource{
					URI: FileURI(id, rel), Name: rel, MIMEType: mimeType(rel, nil), Size: f.Size,
				})
				if len(res.Resources) == maxListed {
					return res, nil
				}
			}
		}
	}
	return res, nil
}

// readResource answers resources/read of a workspace file: text when it is UTF-8, else a
// blob; at most maxRead bytes.
func (s *Server) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, rel, err := parseURI(uri)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	info, r, err := s.m.GetFile(ctx, id, workspace.GuestPath(rel))
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return nil, s.protocolError(err)
	}
	defer r.Close()
	tooBig := &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
		"%s is %s, over the %s a resource read returns: read or summarise it with the python tool",
		workspace.GuestPath(rel), tool.Size(info.Size), maxReadText)}
	if info.Size > maxRead {
		return nil, tooBig
	}
	data, err := io.ReadAll(io.LimitReader(r, maxRead+1))
	if err != nil {
		return nil, s.protocolError(err)
	}
	if len(data) > maxRead {
		return nil, tooBig
	}
	c := &mcp.ResourceContents{URI: uri, MIMEType: mimeType(rel, data)}
	if len(data) > 0 && utf8.Valid(data) && !bytes.ContainsRune(data, 0) {
		c.Text = string(data)
	} else {
		c.Blob = data
		if c.Blob == nil {
			c.Blob = []byte{} // an empty file is an empty blob, not nothing
		}
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
}

// protocolError writes a service failure for a resources call, hiding internal details.
func (s *Server) protocolError(err error) error {
	return errmcp.ToJSONRPC(err, errdefs.Public(s.log, err, "in", "mcp resources"))
}

// mimeTypes are the types of common data files, the same on every machine (unlike the
// system's mime.types, which mime.TypeByExtension reads).
var mimeTypes = map[string]string{
	".csv": "text/csv", ".tsv": "text/tab-separated-values", ".txt": "text/plain", ".md": "text/markdown",
	".json": "application/json", ".jsonl": "application/jsonl", ".py": "text/x-python", ".html": "text/html",
	".xml": "application/xml", ".yaml": "application/yaml", ".yml": "application/yaml", ".log": "text/plain",
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
	".svg": "image/svg+xml", ".pdf": "application/pdf", ".zip": "application/zip", ".gz": "application/gzip",
	".parquet": "application/vnd.apache.parquet", ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}

// mimeType guesses a file's type from its name, else from its content (data may be nil).
func mimeType(name string, data []byte) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := mimeTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return t
	}
	if data == nil {
		return ""
	}
	if utf8.Valid(data) && !bytes.ContainsRune(data, 0) {
		return "text/plain"
	}
	return http.DetectContentType(data)
}

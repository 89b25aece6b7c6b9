package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/e2b/envd/filesystempb"
	"github.com/cellbox/cellbox/internal/e2b/envd/filesystempb/filesystempbconnect"
	"github.com/cellbox/cellbox/internal/e2b/envd/processpb/processpbconnect"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/errdefs/errconnect"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/workspace"
)

// home is where E2B's user works. In a cellbox sandbox it is the session's workspace
// (also mounted at /mnt/data), so files written there through the SDK are the ones the
// code sees, count against the workspace's quota and show in its listings.
const home = api.HomeDir

// workspacePath turns an E2B path (absolute, relative to home, or starting with ~) into a
// clean workspace path. Paths outside home (and /mnt/data) are refused: the files API
// serves the workspace only.
func workspacePath(p string) (string, error) {
	if strings.ContainsRune(p, 0) || len(p) > workspace.MaxPathLen {
		return "", fmt.Errorf("path contains a NUL byte or is longer than %d bytes: %w", workspace.MaxPathLen, errdefs.ErrInvalidArgument)
	}
	switch {
	case p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = home + p[1:]
	case !strings.HasPrefix(p, "/"):
		p = home + "/" + p
	}
	p = path.Clean(p)
	for _, root := range []string{home, api.WorkspaceDir} {
		if p == root {
			return ".", nil
		}
		if rest, ok := strings.CutPrefix(p, root+"/"); ok {
			return workspace.Clean(rest)
		}
	}
	return "", fmt.Errorf("path %.200q is outside %s: cellbox's E2B API serves the sandbox's workspace, %s, only (commands can reach other paths): %w",
		p, home, home, errdefs.ErrInvalidArgument)
}

// homePath is the E2B path of a clean workspace path.
func homePath(rel string) string {
	if rel == "." || rel == "" {
		return home
	}
	return home + "/" + rel
}

// guestToHome turns a path the guest reports (under /mnt/data) into the E2B one.
func guestToHome(p string) string {
	rel, err := workspace.Clean(p)
	if err != nil {
		return p
	}
	return homePath(rel)
}

func (h *Handler) envdRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", h.readFile)
	mux.HandleFunc("POST /files", h.writeFiles)
	// A message is decoded whole, after its gzip (which connect takes by default) is
	// undone: capped like a JSON body, or a few hundred KiB of gzip would be gigabytes.
	opts := connect.WithHandlerOptions(connect.WithInterceptors(errorInterceptor{h}), connect.WithReadMaxBytes(int(h.opts.MaxBodyBytes)))
	mux.Handle(filesystempbconnect.NewFilesystemHandler(filesystemService{h}, opts))
	mux.Handle(processpbconnect.NewProcessHandler(processService{h}, opts))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, fmt.Errorf("%s %s is not served by cellbox's envd: %w", r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
	return mux
}

func (h *Handler) readFile(w http.ResponseWriter, r *http.Request) {
	rel, err := workspacePath(r.URL.Query().Get("path"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	info, body, err := h.m.GetFile(r.Context(), sandboxID(r.Context()), rel)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = fmt.Errorf("path '%s' does not exist: %w", homePath(rel), errdefs.ErrNotFound)
		}
		h.writeError(w, r, err)
		return
	}
	defer body.Close()
	ct := mime.TypeByExtension(path.Ext(info.Name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": info.Name}))
	// Files are written by untrusted code, and a download link opens in a browser: never
	// let one run as a page of this server's origin.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	io.Copy(w, body)
}

// maxParts caps the files of one upload request.
const maxParts = 1000

type writeInfo struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// writeFiles takes a multipart upload: each part named "file" is a file, written where
// its file name (the full path, as the SDK sends it) says, or where ?path= says.
func (h *Handler) writeFiles(w http.ResponseWriter, r *http.Request) {
	id := sandboxID(r.Context())
	fail := func(err error) { h.writeError(w, r, err) }
	mr, err := r.MultipartReader()
	if err != nil {
		fail(fmt.Errorf("send the files as multipart/form-data, one part named \"file\" each: %w", errdefs.ErrInvalidArgument))
		return
	}
	target := r.URL.Query().Get("path")
	seen := map[string]bool{}
	out := []writeInfo{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail(fmt.Errorf("reading the multipart body: %s: %w", err.Error(), errdefs.ErrInvalidArgument))
			return
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		if len(out) == maxParts {
			fail(fmt.Errorf("at most %d files per request: %w", maxParts, errdefs.ErrInvalidArgument))
			return
		}
		name := target
		if name == "" {
			// Part.FileName() keeps only the base name; the SDK puts the full path there.
			_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			name = params["filename"]
		}
		if name == "" {
			fail(fmt.Errorf("a file part has no file name and the request no ?path=: %w", errdefs.ErrInvalidArgument))
			return
		}
		rel, err := workspacePath(name)
		if err == nil && rel == "." {
			err = fmt.Errorf("%s is a folder: give a file's path: %w", home, errdefs.ErrInvalidArgument)
		}
		if err == nil && seen[rel] {
			err = fmt.Errorf("%s appears twice in one request: %w", homePath(rel), errdefs.ErrInvalidArgument)
		}
		if err != nil {
			fail(err)
			return
		}
		seen[rel] = true
		// Past the limit the read fails, so the guest keeps nothing of the file.
		info, err := h.m.PutFile(r.Context(), id, rel, http.MaxBytesReader(w, io.NopCloser(part), h.opts.MaxUploadBytes))
		if errors.As(err, new(*http.MaxBytesError)) {
			err = fmt.Errorf("%s is larger than this server's upload limit of %d bytes: %w", homePath(rel), h.opts.MaxUploadBytes, errdefs.ErrTooLarge)
		}
		if err != nil {
			fail(err)
			return
		}
		out = append(out, writeInfo{Path: guestToHome(info.Path), Name: info.Name, Type: "file"})
	}
	if len(out) == 0 {
		fail(fmt.Errorf("no file in the request: send each as a multipart part named \"file\": %w", errdefs.ErrInvalidArgument))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// rpcError turns an error of the vocabulary into a Connect error.
func (h *Handler) rpcError(ctx context.Context, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := errconnect.ToConnect(err)
	if code == connect.CodeInternal {
		if ctx.Err() != nil {
			return connect.NewError(connect.CodeCanceled, ctx.Err())
		}
		return connect.NewError(connect.CodeInternal, errors.New(errdefs.Public(h.log, err)))
	}
	return connect.NewError(code, errors.New(err.Error()))
}

// errorInterceptor maps the errors of unary calls (streams map their own).
type errorInterceptor struct{ h *Handler }

func (i errorInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if err != nil {
			return nil, i.h.rpcError(ctx, err)
		}
		return res, nil
	}
}

func (errorInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i errorInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := next(ctx, conn); err != nil {
			return i.h.rpcError(ctx, err)
		}
		return nil
	}
}

// filesystemService is envd's filesystem.Filesystem over the session's workspace.
type filesystemService struct{ h *Handler }

var _ filesystempbconnect.FilesystemHandler = filesystemService{}

func entryOf(f api.FileInfo) *filesystempb.EntryInfo {
	t := filesystempb.FileType_FILE_TYPE_UNSPECIFIED
	switch f.Type {
	case "file":
		t = filesystempb.FileType_FILE_TYPE_FILE
	case "dir":
		t = filesystempb.FileType_FILE_TYPE_DIRECTORY
	case "symlink":
		t = filesystempb.FileType_FILE_TYPE_SYMLINK
	}
	return &filesystempb.EntryInfo{Name: f.Name, Type: t, Path: guestToHome(f.Path), Size: f.Size,
		Owner: "user", Group: "user", ModifiedTime: timestamppb.New(f.ModTime)}
}

// entryInfo is the E2B entry of a guest's stat.
func entryInfo(e *guestproto.Entry) *filesystempb.EntryInfo {
	info := entryOf(e.FileInfo)
	mode := fs.FileMode(e.Mode & 0o777)
	if e.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if e.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if e.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	switch e.Type {
	case "dir":
		mode |= fs.ModeDir
	case "symlink":
		mode |= fs.ModeSymlink
		target := e.Target
		if !strings.HasPrefix(target, "/") {
			target = path.Join(path.Dir(info.Path), target)
		}
		info.SymlinkTarget = &target
	case "other":
		mode |= fs.ModeIrregular
	}
	info.Mode, info.Permissions = uint32(mode.Perm()), mode.String()
	return info
}

// stat describes one workspace path, a symbolic link not followed.
func (h *Handler) stat(ctx context.Context, rel string) (*filesystempb.EntryInfo, error) {
	e, err := h.m.Stat(ctx, sandboxID(ctx), rel)
	if err == nil {
		info := entryInfo(e)
		if rel == "." {
			info.Name, info.Path = "user", home
		}
		return info, nil
	}
	if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("path '%s' does not exist", homePath(rel)))
	}
	return nil, err
}

func (s filesystemService) Stat(ctx context.Context, req *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	rel, err := workspacePath(req.Msg.Path)
	if err != nil {
		return nil, err
	}
	e, err := s.h.stat(ctx, rel)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.StatResponse{Entry: e}), nil
}

// maxListDepth and maxListEntries bound a recursive listing.
const (
	maxListDepth   = 32
	maxListEntries = 10000
)

func (s filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	rel, err := workspacePath(req.Msg.Path)
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.Depth)
	if depth == 0 {
		depth = 1
	}
	if depth > maxListDepth {
		return nil, fmt.Errorf("depth %d is above the maximum of %d: %w", depth, maxListDepth, errdefs.ErrInvalidArgument)
	}
	id := sandboxID(ctx)
	out := []*filesystempb.EntryInfo{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		list, err := s.h.m.ListFiles(ctx, id, dir)
		if err != nil {
			return err
		}
		for _, f := range list.Files {
			if len(out) == maxListEntries {
				return fmt.Errorf("the listing has more than %d entries: list a smaller depth or a subfolder: %w", maxListEntries, errdefs.ErrResourceExhausted)
			}
			out = append(out, entryOf(f))
			if f.Type == "dir" && level < depth {
				sub := f.Name
				if dir != "." {
					sub = dir + "/" + f.Name
				}
				if err := walk(sub, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(rel, 1); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("path '%s' does not exist", homePath(rel)))
		}
		return nil, err
	}
	return connect.NewResponse(&filesystempb.ListDirResponse{Entries: out}), nil
}

func (s filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	rel, err := workspacePath(req.Msg.Path)
	if err != nil {
		return nil, err
	}
	e, err := s.h.m.MakeDir(ctx, sandboxID(ctx), rel)
	if err == nil && !e.Created || errors.Is(err, errdefs.ErrFailedPrecondition) {
		if _, serr := s.h.stat(ctx, rel); serr == nil {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("path '%s' already exists", homePath(rel)))
		}
	}
	if err != nil {
		return nil, err
	}
	info := entryInfo(e)
	return connect.NewResponse(&filesystempb.MakeDirResponse{Entry: info}), nil
}

func (s filesystemService) Move(ctx context.Context, req *connect.Request[filesystempb.MoveRequest]) (*connect.Response[filesystempb.MoveResponse], error) {
	src, err := workspacePath(req.Msg.Source)
	if err != nil {
		return nil, err
	}
	dst, err := workspacePath(req.Msg.Destination)
	if err != nil {
		return nil, err
	}
	if src == "." || dst == "." {
		return nil, fmt.Errorf("%s itself cannot be moved or replaced: %w", home, errdefs.ErrInvalidArgument)
	}
	e, err := s.h.m.Move(ctx, sandboxID(ctx), src, dst)
	if errors.Is(err, errdefs.ErrNotFound) {
		if _, serr := s.h.stat(ctx, src); serr != nil {
			return nil, serr
		}
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.MoveResponse{Entry: entryInfo(e)}), nil
}

func (s filesystemService) Remove(ctx context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	rel, err := workspacePath(req.Msg.Path)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, fmt.Errorf("%s itself cannot be removed: %w", home, errdefs.ErrInvalidArgument)
	}
	// Like rm -rf (and E2B's envd): a path that is not there is removed already.
	if err := s.h.m.Remove(ctx, sandboxID(ctx), rel); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}

package openai

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/statefile"
)

// A container's files are its session's workspace files. A file's id is "cfile_" and its
// path in the workspace, base64url-encoded: nothing is stored to map ids to files, so an
// id stays valid across a server restart (sessions survive one) and for files that code
// wrote, which no upload named. The id changes when the file is moved, as OpenAI's would.
const cfilePrefix = "cfile_"

// cfileID is the id of the workspace file at rel (relative to /mnt/data).
func cfileID(rel string) string {
	return cfilePrefix + base64.RawURLEncoding.EncodeToString([]byte(rel))
}

// cfilePath is the workspace path of a container file id.
func cfilePath(id string) (string, error) {
	enc, ok := strings.CutPrefix(id, cfilePrefix)
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if !ok || err != nil || len(b) == 0 {
		return "", fmt.Errorf("no container file %q: %w", trunc(id), errdefs.ErrNotFound)
	}
	return string(b), nil
}

// containerFile is OpenAI's container file object.
type containerFile struct {
	ID          string `json:"id"`
	Object      string `json:"object"` // "container.file"
	CreatedAt   int64  `json:"created_at"`
	Bytes       int64  `json:"bytes"`
	ContainerID string `json:"container_id"`
	Path        string `json:"path"`
	Source      string `json:"source"` // "user" (uploaded) or "assistant" (written by code)
}

func (f containerFile) key() (int64, string) { return f.CreatedAt, f.ID }

// containerFileOf describes a workspace file; uploaded is the session's record of uploaded
// files (sources.uploaded).
func containerFileOf(sessionID string, fi api.FileInfo, uploaded map[string]bool) containerFile {
	rel := strings.TrimPrefix(fi.Path, api.WorkspaceDir+"/")
	src := "assistant"
	if uploaded[rel] {
		src = "user"
	}
	return containerFile{ID: cfileID(rel), Object: "container.file", CreatedAt: fi.ModTime.Unix(), Bytes: fi.Size,
		ContainerID: containerPrefix + sessionID, Path: fi.Path, Source: src}
}

// copyIn writes the /v1/files file f into the session's workspace as /mnt/data/<filename>.
func (h *Handler) copyIn(r *http.Request, sessionID string, f storedFile) error {
	c, err := h.openFile(r, f)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := h.m.PutFile(r.Context(), sessionID, f.Filename, c); err != nil {
		return fmt.Errorf("copy file %s into the container: %w", f.ID, err)
	}
	return h.srcs.add(sessionID, f.Filename)
}

func (h *Handler) createContainerFile(w http.ResponseWriter, r *http.Request) {
	s, err := h.session(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var info *api.FileInfo
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		info, err = h.uploadTo(w, r, s.ID)
	} else {
		var req struct {
			FileID string `json:"file_id"`
		}
		err = h.decode(w, r, &req)
		if err == nil && req.FileID == "" {
			err = invalid("file_id", "give a file as multipart/form-data (a part named file) or a JSON body {\"file_id\": \"file-...\"}")
		}
		var f storedFile
		if err == nil {
			if f, err = h.fileOf(r, req.FileID); err != nil {
				err = &paramError{"file_id", err}
			}
		}
		if err == nil {
			err = h.copyIn(r, s.ID, f)
		}
		var rc io.ReadCloser
		if err == nil {
			info, rc, err = h.stat(r, s.ID, f.Filename)
		}
		if err == nil {
			rc.Close()
		}
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, containerFileOf(s.ID, *info, h.srcs.uploaded(s.ID)))
}

// uploadTo streams the multipart request's file into the session's workspace.
func (h *Handler) uploadTo(w http.ResponseWriter, r *http.Request, sessionID string) (*api.FileInfo, error) {
	if r.ContentLength > h.opts.MaxUploadBytes+1<<20 {
		return nil, tooLarge(h.opts.MaxUploadBytes)
	}
	r.Body = http.MaxBytesReader(w, r.Body, h.opts.MaxUploadBytes+1<<20)
	_, u, err := multipartFile(r)
	if err != nil {
		return nil, err
	}
	name, err := baseName(u.filename)
	if err != nil {
		return nil, err
	}
	lr := &io.LimitedReader{R: u.file, N: h.opts.MaxUploadBytes + 1}
	info, err := h.m.PutFile(r.Context(), sessionID, name, lr)
	if err == nil && lr.N == 0 {
		h.m.DeleteFile(r.Context(), sessionID, name)
		err = tooLarge(h.opts.MaxUploadBytes)
	}
	if err != nil {
		return nil, err
	}
	return info, h.srcs.add(sessionID, name)
}

// stat describes the workspace file rel; the caller closes the reader.
func (h *Handler) stat(r *http.Request, sessionID, rel string) (*api.FileInfo, io.ReadCloser, error) {
	info, rc, err := h.m.GetFile(r.Context(), sessionID, rel)
	if err != nil {
		return nil, nil, err
	}
	return info, rc, nil
}

// maxListed and maxFolders bound a container's file list: a workspace may hold any number
// of files and folders, and each folder is one listing in the sandbox.
const (
	maxListed  = 10000
	maxFolders = 1000
)

// walk lists the workspace's files (not folders), depth first, up to maxListed files from
// maxFolders folders.
func (h *Handler) walk(r *http.Request, sessionID string) ([]api.FileInfo, error) {
	var out []api.FileInfo
	dirs := []string{""}
	for folders := 0; len(dirs) > 0 && len(out) < maxListed && folders < maxFolders; folders++ {
		dir := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		l, err := h.m.ListFiles(r.Context(), sessionID, dir)
		if err != nil {
			if dir != "" && errdefs.Code(err) == api.CodeNotFound {
				continue // removed meanwhile
			}
			return nil, err
		}
		// In name order, so that a list cut at the bounds is the same list each time and
		// its pages follow on.
		slices.SortFunc(l.Files, func(a, b api.FileInfo) int { return strings.Compare(b.Name, a.Name) })
		for _, f := range l.Files {
			switch f.Type {
			case "file":
				out = append(out, f)
			case "dir":
				dirs = append(dirs, path.Join(dir, f.Name)) // popped last name first: pushed in reverse
			}
		}
	}
	if len(out) > maxListed {
		out = out[:maxListed]
	}
	return out, nil
}

func (h *Handler) listContainerFiles(w http.ResponseWriter, r *http.Request) {
	l, err := parseListing(r, 20, 100)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	s, err := h.session(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	files, err := h.walk(r, s.ID)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	all := make([]containerFile, 0, len(files))
	uploaded := h.srcs.uploaded(s.ID)
	for _, f := range files {
		all = append(all, containerFileOf(s.ID, f, uploaded))
	}
	p, err := cut(l, all)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// containerFile finds the request's container and file: its session, its workspace path,
// and its description and content (which the caller closes).
func (h *Handler) containerFile(r *http.Request) (string, *api.FileInfo, io.ReadCloser, error) {
	s, err := h.session(r)
	if err != nil {
		return "", nil, nil, err
	}
	id := r.PathValue("file")
	rel, err := cfilePath(id)
	if err != nil {
		return "", nil, nil, err
	}
	info, rc, err := h.stat(r, s.ID, rel)
	if err != nil {
		if errdefs.Code(err) == api.CodeNotFound || errdefs.Code(err) == api.CodeInvalidArgument {
			err = fmt.Errorf("no file %q in container %s: it never existed or was deleted: %w", trunc(id), containerPrefix+s.ID, errdefs.ErrNotFound)
		}
		return "", nil, nil, err
	}
	return s.ID, info, rc, nil
}

func (h *Handler) getContainerFile(w http.ResponseWriter, r *http.Request) {
	sid, info, rc, err := h.containerFile(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rc.Close()
	writeJSON(w, http.StatusOK, containerFileOf(sid, *info, h.srcs.uploaded(sid)))
}

func (h *Handler) containerFileContent(w http.ResponseWriter, r *http.Request) {
	_, info, rc, err := h.containerFile(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	defer rc.Close()
	serveContent(w, info.Name, info.Size, rc)
}

func (h *Handler) deleteContainerFile(w http.ResponseWriter, r *http.Request) {
	sid, _, rc, err := h.containerFile(r)
	// The file the id names, not the path the guest reported for it.
	rel, _ := cfilePath(r.PathValue("file"))
	if err == nil {
		rc.Close()
		err = h.m.DeleteFile(r.Context(), sid, rel)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.srcs.remove(sid, rel)
	writeJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("file"), "object": "container.file.deleted", "deleted": true})
}

// sources remembers which files of a container were uploaded (source "user"), in
// <state-dir>/openai/containers/<session id>.json, so that a restarted server still tells
// them from the files code wrote. A record goes when its session ends.
type sources struct {
	dir string
	log *slog.Logger
	mu  sync.Mutex
}

// maxUploaded bounds one container's record; past it, further uploads read as "assistant".
const maxUploaded = 10000

func newSources(stateDir string, m Sessions, log *slog.Logger) (*sources, error) {
	s := &sources{dir: filepath.Join(stateDir, "openai", "containers"), log: log}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("openai containers: %w", err)
	}
	// Sessions that ended while no server ran: their records go now.
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			if _, live := m.Owner(id); !live {
				os.Remove(filepath.Join(s.dir, e.Name()))
			}
		}
	}
	return s, nil
}

func (s *sources) file(sessionID string) string {
	return filepath.Join(s.dir, filepath.Base(sessionID)+".json")
}

func (s *sources) read(sessionID string) map[string]bool {
	b, err := os.ReadFile(s.file(sessionID))
	set := map[string]bool{}
	if err == nil {
		var paths []string
		json.Unmarshal(b, &paths)
		for _, p := range paths {
			set[p] = true
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("read container file sources", "session_id", sessionID, "err", err)
	}
	return set
}

func (s *sources) write(sessionID string, set map[string]bool) error {
	paths := make([]string, 0, len(set))
	for p := range set {
		paths = append(paths, p)
	}
	b, _ := json.Marshal(paths)
	if err := statefile.Write(s.file(sessionID), b, 0o600); err != nil {
		return fmt.Errorf("record the container's uploaded file: %w", err)
	}
	return nil
}

// uploaded returns the set of a session's uploaded files, by workspace path.
func (s *sources) uploaded(sessionID string) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.read(sessionID)
}

func (s *sources) add(sessionID, rel string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.read(sessionID)
	if set[rel] || len(set) >= maxUploaded {
		return nil
	}
	set[rel] = true
	return s.write(sessionID, set)
}

func (s *sources) remove(sessionID, rel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.read(sessionID)
	if !set[rel] {
		return
	}
	delete(set, rel)
	if err := s.write(sessionID, set); err != nil {
		s.log.Warn("container file sources", "session_id", sessionID, "err", err)
	}
}

func (s *sources) forget(sessionID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	os.Remove(s.file(sessionID))
}

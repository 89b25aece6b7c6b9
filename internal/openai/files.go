package openai

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/statefile"
)

// The files of /v1/files live in <state-dir>/openai/files/<tenant>/, where <tenant> is a
// hash of the tenant's name: for a file id, <id> holds the bytes and <id>.json its
// metadata (both 0600). The bytes are renamed into place whole, then the metadata written
// whole (statefile): a file exists once its metadata does, so a crash leaves the old
// state or the new, and at worst a stray content file that the next upload's sweep ignores.

// storedFile is OpenAI's File object, as kept in <id>.json.
type storedFile struct {
	ID        string `json:"id"`
	Object    string `json:"object"` // "file"
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"` // "processed"
}

func (f storedFile) key() (int64, string) { return f.CreatedAt, f.ID }

// filePrefix starts a file id.
const filePrefix = "file-"

// purposes are OpenAI's file purposes that a file may be uploaded with.
var purposes = []string{"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}

type fileStore struct {
	dir      string
	maxFiles int
	maxBytes int64
	mu       sync.Mutex            // guards use, the check of a tenant's caps and the commit of a new file
	use      map[string]*tenantUse // by tenant folder, loaded from disk at a tenant's first upload
}

// tenantUse is what a tenant's files take: those kept, and the uploads under way, whose
// bytes count as they arrive, so that concurrent uploads cannot together pass the caps on
// disk before any of them is kept.
type tenantUse struct {
	files, uploads int
	bytes, pending int64
}

func newFileStore(stateDir string, maxFiles int, maxBytes int64) (*fileStore, error) {
	dir := filepath.Join(stateDir, "openai", "files")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("openai files: %w", err)
	}
	return &fileStore{dir: dir, maxFiles: maxFiles, maxBytes: maxBytes, use: map[string]*tenantUse{}}, nil
}

// tenantDir is the folder of ctx's tenant: a hash, since a tenant's name is any text.
func (s *fileStore) tenantDir(ctx context.Context) string {
	sum := sha256.Sum256([]byte("cellbox openai files\x00" + session.Tenant(ctx)))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16]))
}

// validID reports whether id can be a file id (and so a file name in the tenant's folder):
// 32 hex digits (Handler.nodeID), or 24 as before cluster nodes tagged them.
func validID(id string) bool {
	rest, ok := strings.CutPrefix(id, filePrefix)
	if !ok || len(rest) != 32 && len(rest) != 24 {
		return false
	}
	for _, c := range rest {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func noFile(id string) error {
	return fmt.Errorf("no file %q: it never existed or was deleted: %w", trunc(id), errdefs.ErrNotFound)
}

// get returns the metadata of ctx's tenant's file id.
func (s *fileStore) get(ctx context.Context, id string) (storedFile, error) {
	var f storedFile
	if !validID(id) {
		return f, noFile(id)
	}
	b, err := os.ReadFile(filepath.Join(s.tenantDir(ctx), id+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return f, noFile(id)
	}
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err != nil {
		return f, fmt.Errorf("read file %s: %w", id, err)
	}
	return f, nil
}

// open returns the content of ctx's tenant's file id.
func (s *fileStore) open(ctx context.Context, id string) (storedFile, *os.File, error) {
	f, err := s.get(ctx, id)
	if err != nil {
		return f, nil, err
	}
	c, err := os.Open(filepath.Join(s.tenantDir(ctx), id))
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil, noFile(id) // deleted meanwhile
	}
	return f, c, err
}

// list returns every file of ctx's tenant.
func (s *fileStore) list(ctx context.Context) ([]storedFile, error) {
	dir := s.tenantDir(ctx)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	var out []storedFile
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id) {
			continue
		}
		f, err := s.get(ctx, id)
		if errdefs.Code(err) == api.CodeNotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// usage returns the use of the tenant whose folder is dir, reading it from disk the first
// time. The caller holds mu.
func (s *fileStore) usage(ctx context.Context, dir string) (*tenantUse, error) {
	if u := s.use[dir]; u != nil {
		return u, nil
	}
	all, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	u := &tenantUse{files: len(all)}
	for _, f := range all {
		u.bytes += f.Bytes
	}
	s.use[dir] = u
	return u, nil
}

func (s *fileStore) tooMany(have int) error {
	return fmt.Errorf("this server keeps at most %d files per API key and you have %d (uploads under way included): delete some (DELETE /v1/files/{id}) first: %w",
		s.maxFiles, have, errdefs.ErrResourceExhausted)
}

func (s *fileStore) tooBig(have, more int64) error {
	return fmt.Errorf("this server keeps at most %d bytes of files per API key; you have %d (uploads under way included) and this file is %d or more: delete some (DELETE /v1/files/{id}) first: %w",
		s.maxBytes, have, more, errdefs.ErrResourceExhausted)
}

// upload is one upload under way: it holds a place among the tenant's files, and reserves
// bytes as they arrive (its Write) until done.
type upload struct {
	s        *fileStore
	u        *tenantUse
	w        io.Writer
	reserved int64
	maxFile  int64 // the bytes of one file
}

// begin starts an upload that writes to w for ctx's tenant, or says why the tenant may add
// no file. A file past maxFile bytes is refused before the tenant's caps are checked.
func (s *fileStore) begin(ctx context.Context, w io.Writer, maxFile int64) (*upload, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.usage(ctx, s.tenantDir(ctx))
	if err != nil {
		return nil, err
	}
	if have := u.files + u.uploads; have >= s.maxFiles {
		return nil, s.tooMany(have)
	}
	u.uploads++
	return &upload{s: s, u: u, w: w, maxFile: maxFile}, nil
}

// Write reserves len(p) bytes of the tenant's cap, then writes them.
func (up *upload) Write(p []byte) (int, error) {
	if up.reserved+int64(len(p)) > up.maxFile {
		return 0, tooLarge(up.maxFile)
	}
	up.s.mu.Lock()
	have := up.u.bytes + up.u.pending
	ok := have+int64(len(p)) <= up.s.maxBytes
	if ok {
		up.u.pending += int64(len(p))
		up.reserved += int64(len(p))
	}
	up.s.mu.Unlock()
	if !ok {
		return 0, up.s.tooBig(have-up.reserved, up.reserved+int64(len(p)))
	}
	return up.w.Write(p)
}

// done ends the upload: its reservation goes, and the file it kept (if kept) counts.
// The caller holds mu.
func (up *upload) done(kept *storedFile) {
	up.u.uploads--
	up.u.pending -= up.reserved
	up.reserved = 0
	if kept != nil {
		up.u.files++
		up.u.bytes += kept.Bytes
	}
}

// cancel ends an upload that kept nothing.
func (up *upload) cancel() {
	up.s.mu.Lock()
	defer up.s.mu.Unlock()
	up.done(nil)
}

// add keeps the content of tmp (a file in the tenant's folder, which add takes over),
// written by up, as a new file of ctx's tenant, and ends up.
func (s *fileStore) add(ctx context.Context, up *upload, tmp, id string, f storedFile) (storedFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.ID, f.Object, f.Status = id, "file", "processed"
	f.CreatedAt = time.Now().Unix()
	dir := s.tenantDir(ctx)
	data, _ := json.Marshal(f)
	err := os.Rename(tmp, filepath.Join(dir, f.ID))
	if err == nil {
		if err = statefile.Write(filepath.Join(dir, f.ID+".json"), data, 0o600); err != nil {
			os.Remove(filepath.Join(dir, f.ID))
		}
	}
	if err != nil {
		os.Remove(tmp)
		up.done(nil)
		return f, fmt.Errorf("keep file: %w", err)
	}
	up.done(&f)
	return f, nil
}

// remove deletes ctx's tenant's file id: its metadata first, so it is gone at once.
func (s *fileStore) remove(ctx context.Context, id string) error {
	f, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	dir := s.tenantDir(ctx)
	if err := os.Remove(filepath.Join(dir, id+".json")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return noFile(id)
		}
		return fmt.Errorf("delete file %s: %w", id, err)
	}
	os.Remove(filepath.Join(dir, id))
	s.mu.Lock()
	if u := s.use[dir]; u != nil {
		u.files--
		u.bytes -= f.Bytes
	}
	s.mu.Unlock()
	return nil
}

// uploadPart is the file part of a multipart request and the request's other fields. The
// file's bytes are read last, by the caller, from file.
type uploadPart struct {
	filename string
	file     io.Reader
	fields   map[string]string
	parts    int // read so far, the file's not counted
}

// multipartFile reads a multipart/form-data request up to its part named "file" (OpenAI's
// SDKs send every field, the file's included, as a part). Fields after the file are read
// by rest once the file is consumed.
func multipartFile(r *http.Request) (*multipart.Reader, *uploadPart, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, invalid("file", "send the file as multipart/form-data with a part named file")
	}
	u := &uploadPart{fields: map[string]string{}}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil, nil, invalid("file", "the request has no part named file")
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read multipart body: %s: %w", err.Error(), errdefs.ErrInvalidArgument)
		}
		if p.FormName() == "file" {
			u.filename, u.file = p.FileName(), p
			return mr, u, nil
		}
		if err := u.field(p); err != nil {
			return nil, nil, err
		}
	}
}

// maxParts bounds the parts of an upload: OpenAI's SDKs send two or three.
const maxParts = 16

// field keeps a part the upload knows (purpose, at most 4 KiB) and reads any other to its
// end unkept; past maxParts parts the upload is refused.
func (u *uploadPart) field(p *multipart.Part) error {
	u.parts++
	if u.parts > maxParts {
		return invalid("file", "an upload has at most %d parts", maxParts)
	}
	var v []byte
	var err error
	if p.FormName() == "purpose" {
		v, err = io.ReadAll(io.LimitReader(p, 4096))
	} else {
		_, err = io.Copy(io.Discard, p)
	}
	if err != nil {
		return fmt.Errorf("read multipart body: %s: %w", err.Error(), errdefs.ErrInvalidArgument)
	}
	if v != nil {
		u.fields[p.FormName()] = string(v)
	}
	return nil
}

// rest reads the fields after the file part.
func (u *uploadPart) rest(mr *multipart.Reader) error {
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read multipart body: %s: %w", err.Error(), errdefs.ErrInvalidArgument)
		}
		if err := u.field(p); err != nil {
			return err
		}
	}
}

// baseName is the name an uploaded file is kept under: the last element of what the client
// called it, which must be a plain name.
func baseName(filename string) (string, error) {
	name := path.Base(strings.ReplaceAll(filename, "\\", "/"))
	if filename == "" || name == "." || name == "/" || name == ".." || strings.ContainsRune(name, 0) || len(name) > 255 {
		return "", invalid("file", "the file part needs a file name (at most 255 bytes, no NUL): %q is none", trunc(filename))
	}
	return name, nil
}

// tooLarge is the refusal of a file past limit bytes (MaxUploadBytes).
func tooLarge(limit int64) error {
	return fmt.Errorf("the file is larger than this server's limit of %d bytes per file: %w", limit, errdefs.ErrTooLarge)
}

func (h *Handler) createFile(w http.ResponseWriter, r *http.Request) {
	f, err := h.upload(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, f)
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request) (storedFile, error) {
	var f storedFile
	dir := h.files.tenantDir(r.Context())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, fmt.Errorf("openai files: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".upload-")
	if err != nil {
		return f, fmt.Errorf("openai files: %w", err)
	}
	up, err := h.files.begin(r.Context(), tmp, h.opts.MaxUploadBytes)
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return f, err
	}
	// From here the file is kept (add ends up) or up is cancelled.
	n, err := h.receive(w, r, &f, up)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		up.cancel()
		return f, err
	}
	f.Bytes = n
	return h.files.add(r.Context(), up, tmp.Name(), h.nodeID(filePrefix), f)
}

// receive reads an upload's multipart body: its file into up, its fields into f.
func (h *Handler) receive(w http.ResponseWriter, r *http.Request, f *storedFile, up *upload) (int64, error) {
	// The file itself is bounded below; the rest of a multipart body is small.
	r.Body = http.MaxBytesReader(w, r.Body, h.opts.MaxUploadBytes+1<<20)
	mr, u, err := multipartFile(r)
	if err != nil {
		return 0, err
	}
	if f.Filename, err = baseName(u.filename); err != nil {
		return 0, err
	}
	n, err := io.Copy(up, u.file) // up refuses a file past MaxUploadBytes
	var disk *fs.PathError        // the server's disk failed
	if err != nil && errdefs.Code(err) == api.CodeInternal && !errors.As(err, &disk) {
		// The client's body broke off or is malformed.
		err = fmt.Errorf("read the upload: %s: %w", err.Error(), errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return 0, err
	}
	if err := u.rest(mr); err != nil {
		return 0, err
	}
	f.Purpose = u.fields["purpose"]
	if !validPurpose(f.Purpose) {
		return 0, invalid("purpose", "purpose must be one of %s, not %q", strings.Join(purposes, ", "), trunc(f.Purpose))
	}
	return n, nil
}

func validPurpose(p string) bool {
	for _, q := range purposes {
		if p == q {
			return true
		}
	}
	return false
}

func (h *Handler) listFiles(w http.ResponseWriter, r *http.Request) {
	l, err := parseListing(r, 10000, 10000)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	all, err := h.files.list(r.Context())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if h.opts.ElsewhereFiles != nil {
		for _, raw := range h.opts.ElsewhereFiles(r.Context()) {
			var f storedFile
			if json.Unmarshal(raw, &f) == nil && validID(f.ID) {
				all = append(all, f)
			}
		}
	}
	if p := r.URL.Query().Get("purpose"); p != "" {
		kept := all[:0]
		for _, f := range all {
			if f.Purpose == p {
				kept = append(kept, f)
			}
		}
		all = kept
	}
	p, err := cut(l, all)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (h *Handler) getFile(w http.ResponseWriter, r *http.Request) {
	f, err := h.files.get(r.Context(), r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, f)
}

func (h *Handler) deleteFile(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.files.remove(r.Context(), id); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "file", "deleted": true})
}

func (h *Handler) fileContent(w http.ResponseWriter, r *http.Request) {
	f, c, err := h.files.open(r.Context(), r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	defer c.Close()
	serveContent(w, f.Filename, f.Bytes, c)
}

// serveContent answers with a file's bytes. They may have been written by untrusted code:
// no browser may run them on the API's origin.
func serveContent(w http.ResponseWriter, name string, size int64, r io.Reader) {
	h := w.Header()
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	w.WriteHeader(http.StatusOK)
	io.Copy(w, r)
}

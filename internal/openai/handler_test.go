package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/testbin"
)

// fake is Sessions in memory: sessions by id with their tenant, workspaces as maps.
type fake struct {
	mu    sync.Mutex
	n     int
	sess  map[string]*api.Session
	owner map[string]string
	files map[string]map[string][]byte // by session, by workspace path
	asked []api.CreateSessionRequest
}

func newFake() *fake {
	return &fake{sess: map[string]*api.Session{}, owner: map[string]string{}, files: map[string]map[string][]byte{}}
}

func (f *fake) find(ctx context.Context, id string) (*api.Session, error) {
	s, ok := f.sess[id]
	if !ok || f.owner[id] != session.Tenant(ctx) {
		return nil, fmt.Errorf("no session %q: %w", id, errdefs.ErrNotFound)
	}
	return s, nil
}

func (f *fake) Create(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, req)
	f.n++
	id := fmt.Sprintf("s%d", f.n)
	s := &api.Session{ID: id, CreatedAt: time.Unix(int64(1000+f.n), 0), LastActiveAt: time.Now(), IdleTimeoutS: 1200,
		Limits: api.Limits{MemoryMB: 1024}, Metadata: req.Metadata}
	if req.Limits != nil {
		s.Limits.MemoryMB = req.Limits.MemoryMB
	}
	f.sess[id], f.owner[id], f.files[id] = s, session.Tenant(ctx), map[string][]byte{}
	return s, nil
}

func (f *fake) Get(ctx context.Context, id string) (*api.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.find(ctx, id)
}

func (f *fake) List(ctx context.Context) []api.Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Session
	for id, s := range f.sess {
		if f.owner[id] == session.Tenant(ctx) {
			out = append(out, *s)
		}
	}
	return out
}

func (f *fake) Delete(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.find(ctx, id); err != nil {
		return err
	}
	delete(f.sess, id)
	return nil
}

func (f *fake) PutFile(ctx context.Context, id, p string, r io.Reader) (*api.FileInfo, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.find(ctx, id); err != nil {
		return nil, err
	}
	p = strings.TrimPrefix(p, "/mnt/data/")
	f.files[id][p] = b
	return info(p, b), nil
}

func info(p string, b []byte) *api.FileInfo {
	return &api.FileInfo{Path: "/mnt/data/" + p, Name: path.Base(p), Type: "file", Size: int64(len(b)), ModTime: time.Unix(5000, 0)}
}

func (f *fake) GetFile(ctx context.Context, id, p string) (*api.FileInfo, io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.find(ctx, id); err != nil {
		return nil, nil, err
	}
	p = strings.TrimPrefix(p, "/mnt/data/")
	b, ok := f.files[id][p]
	if !ok {
		return nil, nil, fmt.Errorf("no file: %w", errdefs.ErrNotFound)
	}
	return info(p, b), io.NopCloser(bytes.NewReader(b)), nil
}

func (f *fake) ListFiles(ctx context.Context, id, dir string) (*api.FileList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.find(ctx, id); err != nil {
		return nil, err
	}
	l := &api.FileList{Path: "/mnt/data/" + dir}
	dirs := map[string]bool{}
	for p, b := range f.files[id] {
		rest, ok := strings.CutPrefix(p, dir+"/")
		if dir == "" {
			rest, ok = p, true
		}
		if !ok {
			continue
		}
		if d, _, sub := strings.Cut(rest, "/"); sub {
			if !dirs[d] {
				dirs[d] = true
				l.Files = append(l.Files, api.FileInfo{Path: "/mnt/data/" + path.Join(dir, d), Name: d, Type: "dir"})
			}
			continue
		}
		l.Files = append(l.Files, *info(p, b))
	}
	return l, nil
}

func (f *fake) DeleteFile(ctx context.Context, id, p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.find(ctx, id); err != nil {
		return err
	}
	delete(f.files[id], strings.TrimPrefix(p, "/mnt/data/"))
	return nil
}

func (f *fake) Owner(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.owner[id]
	return t, ok && f.sess[id] != nil
}

func (f *fake) Subscribe(func(session.Event)) func() { return func() {} }

// served is the handler over a fake, with each request's tenant taken from X-Tenant (as
// httpapi's key check would set it).
func served(t *testing.T, opts Options) (*fake, *Handler, *httptest.Server) {
	t.Helper()
	f := newFake()
	opts.StateDir = t.TempDir()
	h, err := New(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(session.WithTenant(r.Context(), r.Header.Get("X-Tenant"))))
	}))
	t.Cleanup(srv.Close)
	return f, h, srv
}

// call makes a request as tenant and decodes the JSON answer into out (if not nil).
func call(t *testing.T, srv *httptest.Server, tenant, method, p, ctype string, body io.Reader, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+p, body)
	req.Header.Set("X-Tenant", tenant)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, p, err, b)
		}
	}
	return resp.StatusCode
}

// form is a multipart body with a file part and fields.
func form(name string, content []byte, fields ...string) (string, io.Reader) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i := 0; i+1 < len(fields); i += 2 {
		mw.WriteField(fields[i], fields[i+1])
	}
	w, _ := mw.CreateFormFile("file", name)
	w.Write(content)
	mw.Close()
	return mw.FormDataContentType(), &buf
}

func TestFilesAndContainers(t *testing.T) {
	f, h, srv := served(t, Options{MaxBodyBytes: 1 << 16, MaxUploadBytes: 1 << 10, MaxFiles: 2, MaxFileBytes: 1000, MaxMemoryMB: 8192, MaxIdleTimeout: time.Hour})
	var up storedFile
	ct, body := form("dir/data.csv", []byte("a,b\n1,2\n"), "purpose", "user_data")
	if st := call(t, srv, "alice", "POST", "/v1/files", ct, body, &up); st != 200 || !validID(up.ID) || up.Filename != "data.csv" || up.Bytes != 8 || up.Object != "file" {
		t.Fatalf("upload: %d %+v", st, up)
	}
	var eb errorBody
	// Errors: another tenant's file, a cap, a file too large, a wrong purpose.
	if st := call(t, srv, "bob", "GET", "/v1/files/"+up.ID, "", nil, &eb); st != 404 || eb.Error.Type != "invalid_request_error" || !strings.Contains(eb.Error.Message, "no file") {
		t.Errorf("bob's view of alice's file: %d %+v", st, eb)
	}
	ct, body = form("big.bin", bytes.Repeat([]byte("x"), 1025), "purpose", "user_data")
	if st := call(t, srv, "alice", "POST", "/v1/files", ct, body, &eb); st != 413 || !strings.Contains(eb.Error.Message, "1024 bytes per file") {
		t.Errorf("too large: %d %+v", st, eb)
	}
	ct, body = form("x.txt", []byte("x"), "purpose", "nonsense")
	if st := call(t, srv, "alice", "POST", "/v1/files", ct, body, &eb); st != 400 || *eb.Error.Param != "purpose" {
		t.Errorf("purpose: %d %+v", st, eb)
	}
	ct, body = form("b.txt", bytes.Repeat([]byte("y"), 1000), "purpose", "assistants")
	if st := call(t, srv, "alice", "POST", "/v1/files", ct, body, &eb); st != 429 || !strings.Contains(eb.Error.Message, "at most 1000 bytes") {
		t.Errorf("bytes cap: %d %+v", st, eb)
	}
	ct, body = form("b.txt", []byte("second"), "purpose", "assistants")
	if st := call(t, srv, "alice", "POST", "/v1/files", ct, body, nil); st != 200 {
		t.Errorf("second file: %d", st)
	}
	ct, body = form("c.txt", []byte("third"), "purpose", "assistants")
	if st := call(t, srv, "alice", "POST", "/v1/files", ct, body, &eb); st != 429 || !strings.Contains(eb.Error.Message, "at most 2 files") {
		t.Errorf("count cap: %d %+v", st, eb)
	}
	var files page[storedFile]
	if st := call(t, srv, "alice", "GET", "/v1/files?purpose=user_data", "", nil, &files); st != 200 || len(files.Data) != 1 || files.Data[0].ID != up.ID {
		t.Errorf("list: %d %+v", st, files)
	}
	// Kept 0600, with nothing left of the refused uploads.
	ents, _ := os.ReadDir(h.files.tenantDir(session.WithTenant(context.Background(), "alice")))
	if len(ents) != 4 {
		t.Errorf("the tenant's folder holds %d entries; want 2 files and their metadata", len(ents))
	}
	for _, e := range ents {
		if fi, _ := e.Info(); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v; want 0600", e.Name(), fi.Mode())
		}
	}

	// A container with the file, its name, memory and expiry.
	var c container
	st := call(t, srv, "alice", "POST", "/v1/containers", "application/json",
		strings.NewReader(`{"name":"box","memory_limit":"4g","expires_after":{"anchor":"last_active_at","minutes":30},"file_ids":["`+up.ID+`"],"network_policy":{"type":"disabled"}}`), &c)
	if st != 200 || c.Name != "box" || c.MemoryLimit != "4g" || !strings.HasPrefix(c.ID, "cntr_") {
		t.Fatalf("create: %d %+v", st, c)
	}
	asked := f.asked[0]
	if asked.IdleTimeoutS != 1800 || asked.Limits.MemoryMB != 4096 || asked.Network.Egress != "none" || asked.Metadata[nameKey] != "box" {
		t.Errorf("the session asked for: %+v", asked)
	}
	var cfiles page[containerFile]
	if st := call(t, srv, "alice", "GET", "/v1/containers/"+c.ID+"/files", "", nil, &cfiles); st != 200 || len(cfiles.Data) != 1 ||
		cfiles.Data[0].Path != "/mnt/data/data.csv" || cfiles.Data[0].Source != "user" {
		t.Errorf("container files: %d %+v", st, cfiles)
	}
	// A file code wrote, in a folder: listed, as the assistant's.
	f.files[strings.TrimPrefix(c.ID, "cntr_")]["out/plot.png"] = []byte("png")
	call(t, srv, "alice", "GET", "/v1/containers/"+c.ID+"/files?order=asc&limit=100", "", nil, &cfiles)
	if len(cfiles.Data) != 2 {
		t.Fatalf("container files: %+v", cfiles)
	}
	var plot containerFile
	for _, cf := range cfiles.Data {
		if cf.Path == "/mnt/data/out/plot.png" {
			plot = cf
		}
	}
	if plot.Source != "assistant" || plot.ID != cfileID("out/plot.png") {
		t.Errorf("the code's file: %+v", plot)
	}
	for _, c := range []struct {
		name, tenant, method, path, ctype, body string
		status                                  int
		param, contains                         string
	}{
		{"unknown container", "alice", "GET", "/v1/containers/cntr_nope", "", "", 404, "", "no container"},
		{"another tenant's container", "bob", "GET", "/v1/containers/" + c.ID, "", "", 404, "", "no container"},
		{"another tenant's container's files", "bob", "GET", "/v1/containers/" + c.ID + "/files", "", "", 404, "", "no container"},
		{"unknown file", "alice", "GET", "/v1/containers/" + c.ID + "/files/" + cfileID("nope"), "", "", 404, "", "no file"},
		{"memory beyond the max", "alice", "POST", "/v1/containers", "application/json", `{"name":"x","memory_limit":"16g"}`, 400, "memory_limit", "maximum of 8192 MiB"},
		{"expiry beyond the max", "alice", "POST", "/v1/containers", "application/json", `{"name":"x","expires_after":{"anchor":"last_active_at","minutes":61}}`, 400, "expires_after.minutes", "maximum of 60"},
		{"no name", "alice", "POST", "/v1/containers", "application/json", `{}`, 400, "name", "needs a name"},
		{"bob's view of alice's file id", "bob", "POST", "/v1/containers", "application/json", `{"name":"x","file_ids":["` + up.ID + `"]}`, 404, "file_ids[0]", "no file"},
		{"not JSON", "alice", "POST", "/v1/containers", "application/json", `{"name":`, 400, "", "not valid JSON"},
		{"no such route", "alice", "PUT", "/v1/files", "", "", 404, "", "docs/openai.md"},
	} {
		eb = errorBody{}
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		st := call(t, srv, c.tenant, c.method, c.path, c.ctype, body, &eb)
		param := ""
		if eb.Error.Param != nil {
			param = *eb.Error.Param
		}
		if st != c.status || param != c.param || !strings.Contains(eb.Error.Message, c.contains) || eb.Error.Code == nil {
			t.Errorf("%s: %d %+v (param %q); want %d, param %q, containing %q", c.name, st, eb.Error, param, c.status, c.param, c.contains)
		}
	}

	// Upload by file_id and by multipart; read, delete.
	var cf containerFile
	if st := call(t, srv, "alice", "POST", "/v1/containers/"+c.ID+"/files", "application/json", strings.NewReader(`{"file_id":"`+up.ID+`"}`), &cf); st != 200 || cf.Path != "/mnt/data/data.csv" || cf.Source != "user" {
		t.Errorf("file_id: %d %+v", st, cf)
	}
	ct, body = form("notes.txt", []byte("hello"))
	if st := call(t, srv, "alice", "POST", "/v1/containers/"+c.ID+"/files", ct, body, &cf); st != 200 || cf.Path != "/mnt/data/notes.txt" || cf.Bytes != 5 || cf.ContainerID != c.ID {
		t.Errorf("multipart: %d %+v", st, cf)
	}
	if st := call(t, srv, "", "GET", "/v1/containers/"+c.ID+"/files/"+cf.ID+"/content", "", nil, &eb); st != 404 {
		t.Errorf("content as another tenant: %d", st)
	}
	resp, err := http.Get(srv.URL + "/v1/containers/" + c.ID + "/files/" + cf.ID + "/content")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/v1/containers/"+c.ID+"/files/"+cf.ID+"/content", nil)
	req.Header.Set("X-Tenant", "alice")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "hello" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || resp.Header.Get("Content-Security-Policy") != "sandbox" {
		t.Errorf("content: %d %q %v", resp.StatusCode, b, resp.Header)
	}
	var del map[string]any
	if st := call(t, srv, "alice", "DELETE", "/v1/containers/"+c.ID+"/files/"+cf.ID, "", nil, &del); st != 200 || del["deleted"] != true {
		t.Errorf("delete file: %d %v", st, del)
	}
	if st := call(t, srv, "alice", "GET", "/v1/containers/"+c.ID+"/files/"+cf.ID, "", nil, &eb); st != 404 {
		t.Errorf("deleted file: %d", st)
	}
	if st := call(t, srv, "alice", "DELETE", "/v1/files/"+up.ID, "", nil, &del); st != 200 || del["deleted"] != true || del["object"] != "file" {
		t.Errorf("delete /v1/files: %d %v", st, del)
	}
	if st := call(t, srv, "alice", "DELETE", "/v1/containers/"+c.ID, "", nil, &del); st != 200 || del["object"] != "container.deleted" || del["id"] != c.ID {
		t.Errorf("delete container: %d %v", st, del)
	}
}

// An upload with more parts than OpenAI's SDKs send is refused, unkept.
func TestAttackUploadParts(t *testing.T) {
	_, _, srv := served(t, Options{MaxBodyBytes: 1 << 16, MaxUploadBytes: 1 << 20, MaxMemoryMB: 8192, MaxIdleTimeout: time.Hour})
	var fields []string
	for i := range 40 {
		fields = append(fields, fmt.Sprintf("f%d", i), strings.Repeat("x", 4096))
	}
	ct, body := form("a.txt", []byte("a"), fields...)
	var eb errorBody
	if st := call(t, srv, "alice", "POST", "/v1/files", ct, body, &eb); st != 400 || !strings.Contains(eb.Error.Message, "at most 16 parts") {
		t.Errorf("%d %+v", st, eb)
	}
}

// TestFilesUploadsUnderWay: uploads that have not ended count against a tenant's caps as
// their bytes arrive, so concurrent uploads cannot together pass the caps on disk; an upload
// refused or broken off gives its share back.
func TestFilesUploadsUnderWay(t *testing.T) {
	_, h, srv := served(t, Options{MaxBodyBytes: 1 << 16, MaxUploadBytes: 1 << 10, MaxFiles: 3, MaxFileBytes: 1000, MaxMemoryMB: 8192, MaxIdleTimeout: time.Hour})
	alice := session.WithTenant(context.Background(), "alice")
	use := func() tenantUse {
		h.files.mu.Lock()
		defer h.files.mu.Unlock()
		if u := h.files.use[h.files.tenantDir(alice)]; u != nil {
			return *u
		}
		return tenantUse{}
	}
	// Upload A sends 600 bytes of its file and waits.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	type answer struct {
		st int
		eb errorBody
	}
	doneA := make(chan answer, 1)
	go func() {
		var a answer
		a.st = call(t, srv, "alice", "POST", "/v1/files", mw.FormDataContentType(), pr, &a.eb)
		doneA <- a
	}()
	mw.WriteField("purpose", "user_data")
	part, _ := mw.CreateFormFile("file", "a.bin")
	part.Write(bytes.Repeat([]byte("a"), 600))
	testbin.WaitFor(t, 10*time.Second, "upload A's bytes to count", func() error {
		if u := use(); u.uploads != 1 || u.pending != 600 {
			return fmt.Errorf("use %+v", u)
		}
		return nil
	})
	// B, 600 bytes more, passes the byte cap with A's: refused, though no file is kept yet.
	var eb errorBody
	ct, body := form("b.bin", bytes.Repeat([]byte("b"), 600), "purpose", "user_data")
	if st := call(t, srv, "alice", "POST", "/v1/files", ct, body, &eb); st != 429 || !strings.Contains(eb.Error.Message, "uploads under way included") {
		t.Errorf("B beside A: %d %+v", st, eb)
	}
	// Bob is another tenant: A takes nothing of his.
	ct, body = form("bob.bin", bytes.Repeat([]byte("b"), 600), "purpose", "user_data")
	if st := call(t, srv, "bob", "POST", "/v1/files", ct, body, nil); st != 200 {
		t.Errorf("bob's upload beside alice's: %d", st)
	}
	// A ends and is kept; C fits in what is left.
	part.Write(bytes.Repeat([]byte("a"), 100))
	mw.Close()
	pw.Close()
	if a := <-doneA; a.st != 200 {
		t.Fatalf("A: %d %+v", a.st, a.eb)
	}
	ct, body = form("c.bin", bytes.Repeat([]byte("c"), 300), "purpose", "user_data")
	var c storedFile
	if st := call(t, srv, "alice", "POST", "/v1/files", ct, body, &c); st != 200 {
		t.Fatalf("C: %d", st)
	}
	if u := use(); u != (tenantUse{files: 2, bytes: 1000}) {
		t.Errorf("after A and C: %+v; want 2 files of 1000 bytes, nothing under way", u)
	}
	// Deleting gives room back, counted without reading the disk again.
	if st := call(t, srv, "alice", "DELETE", "/v1/files/"+c.ID, "", nil, nil); st != 200 {
		t.Fatalf("delete C: %d", st)
	}
	if u := use(); u != (tenantUse{files: 1, bytes: 700}) {
		t.Errorf("after deleting C: %+v; want 1 file of 700 bytes", u)
	}
	// A body that ends mid-file gives its share back, and leaves no file.
	pr2, pw2 := io.Pipe()
	mw2 := multipart.NewWriter(pw2)
	go func() {
		mw2.WriteField("purpose", "user_data")
		p, _ := mw2.CreateFormFile("file", "cut.bin")
		p.Write([]byte("partial"))
		pw2.Close() // no closing boundary: the body ends mid-file
	}()
	if st := call(t, srv, "alice", "POST", "/v1/files", mw2.FormDataContentType(), pr2, &eb); st != 400 {
		t.Errorf("a body cut short: %d %+v", st, eb)
	}
	ents, _ := os.ReadDir(h.files.tenantDir(alice))
	if len(ents) != 2 {
		t.Errorf("alice's folder holds %d entries; want A and its metadata", len(ents))
	}
}

// TestContainerFilesWalkBounded: a workspace of many folders is listed from maxFolders of
// them, not walked whole.
func TestContainerFilesWalkBounded(t *testing.T) {
	f, _, srv := served(t, Options{MaxBodyBytes: 1 << 16, MaxUploadBytes: 1 << 10, MaxFiles: 2, MaxFileBytes: 1000, MaxMemoryMB: 8192, MaxIdleTimeout: time.Hour})
	var c container
	if st := call(t, srv, "alice", "POST", "/v1/containers", "application/json", strings.NewReader(`{"name":"deep"}`), &c); st != 200 {
		t.Fatalf("create: %d", st)
	}
	files := f.files[strings.TrimPrefix(c.ID, "cntr_")]
	files["top.txt"] = []byte("top")
	for i := range maxFolders + 50 {
		files[fmt.Sprintf("d%04d/f.txt", i)] = []byte("x")
	}
	var all int
	for q := "limit=100"; ; {
		var p page[containerFile]
		if st := call(t, srv, "alice", "GET", "/v1/containers/"+c.ID+"/files?"+q, "", nil, &p); st != 200 {
			t.Fatalf("list: %d", st)
		}
		all += len(p.Data)
		if !p.HasMore {
			break
		}
		q = "limit=100&after=" + p.Data[len(p.Data)-1].ID
	}
	// The root is one folder: its file and those of maxFolders-1 subfolders.
	if all != maxFolders {
		t.Errorf("listed %d files; want %d (the root's and %d folders')", all, maxFolders, maxFolders-1)
	}
}

package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/artifacts"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/workspace"
)

// Artifacts: with a store (UseArtifacts), every file a run creates or changes (a cell, a
// command, a tool call, a one-shot) is uploaded to it, named by tenant, session and path,
// and the run's result carries each one's URL and object name at once. The uploads run
// beside what the session does next; a run whose request asked for links waits for its own,
// so its URLs work when its caller sees them, and its result says which failed. A failure
// otherwise is told in the session's next execution and the log; it never fails a run.

// Bounds of the uploads.
const (
	maxUploadsPerRun = 100     // files of one run; more are listed, not uploaded
	maxArtifactBytes = 1 << 30 // one file, when the run ended and when it is read
	uploadsAtOnce    = 4       // on the server, all sessions together
	maxQueued        = 200     // uploads waiting or running for one session
	maxNotice        = 16 << 10
)

// Waits, variables for the tests.
var (
	uploadTimeout = 10 * time.Minute // one file, from when its run ended
	maxUploadWait = time.Minute      // a run that asked for links waits no longer
)

type uploader struct {
	store artifacts.Store
	ttl   time.Duration
	sem   chan struct{}

	mu     sync.Mutex
	queued map[string]int           // uploads waiting or running, by session
	idle   map[string]chan struct{} // closed when that session's last upload ends
}

// UseArtifacts makes the manager upload what runs change to store, with URLs that live ttl
// (a public store's live for good).
func (m *Manager) UseArtifacts(store artifacts.Store, ttl time.Duration) {
	m.uploads = &uploader{store: store, ttl: ttl, sem: make(chan struct{}, uploadsAtOnce), queued: map[string]int{}, idle: map[string]chan struct{}{}}
}

// HasArtifacts says whether runs' files are uploaded to an artifacts store.
func (m *Manager) HasArtifacts() bool { return m.uploads != nil }

// take counts n more uploads of session id, as many as its queue has room for.
func (u *uploader) take(id string, n int) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n = min(n, maxQueued-u.queued[id])
	if n <= 0 {
		return 0
	}
	if u.queued[id] == 0 {
		u.idle[id] = make(chan struct{})
	}
	u.queued[id] += n
	return n
}

func (u *uploader) done(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.queued[id]--; u.queued[id] <= 0 {
		delete(u.queued, id)
		close(u.idle[id])
		delete(u.idle, id)
	}
}

// drainUploads waits until the uploads of session id have ended, or maxUploadWait has passed, or
// ctx ends: a session that ends (or a server that exits) keeps its sandbox until then, so
// that the objects whose URLs its results gave are there.
func (m *Manager) drainUploads(ctx context.Context, id string) {
	u := m.uploads
	if u == nil {
		return
	}
	u.mu.Lock()
	idle, n := u.idle[id], u.queued[id]
	u.mu.Unlock()
	if idle == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, maxUploadWait)
	defer cancel()
	select {
	case <-idle:
	case <-ctx.Done():
		m.log.Warn("artifacts uploads still going when their session's sandbox went; those files are not kept", "session_id", id, "uploads", n)
	}
}

// artifacts gives the created and modified files of a run in session id of tenant their
// object and URL, and uploads them from guest, under a folder of the run's own (a later
// run's file of the same name is another object). With wait, it returns when they are
// uploaded, or maxUploadWait has passed, which cancels the rest: a file not uploaded then
// loses its URL, and what it returns says which ("" when all went); else the uploads run
// beside what comes next, each within uploadTimeout, a failure told by notify (may be nil)
// and the log.
func (m *Manager) artifacts(tenant, id string, guest func() *guestproto.Client, files []api.FileChange, wait bool, notify func(string)) string {
	u := m.uploads
	if u == nil {
		return ""
	}
	type job struct {
		i    int
		done chan error
	}
	var (
		jobs   []job
		failed []string
		want   []int
	)
	for i, f := range files {
		if f.Change == api.ChangeDeleted {
			continue
		}
		if f.Size > maxArtifactBytes {
			failed = append(failed, fmt.Sprintf("%s (larger than the %d MiB a file may be)", f.Path, maxArtifactBytes>>20))
			continue
		}
		want = append(want, i)
	}
	n := u.take(id, min(len(want), maxUploadsPerRun))
	if n < len(want) {
		failed = append(failed, fmt.Sprintf("%d files (at most %d are uploaded a run, %d wait at once a session)", len(want)-n, maxUploadsPerRun, maxQueued))
	}
	ctx, cancel := context.WithTimeout(context.Background(), uploadTimeout)
	if wait {
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), maxUploadWait)
	}
	run := make([]byte, 4)
	rand.Read(run)
	folder := "r-" + hex.EncodeToString(run)
	for k, i := range want {
		f := &files[i]
		if k >= n {
			break
		}
		rel, err := workspace.Clean(f.Path)
		if err != nil || rel == "." {
			u.done(id)
			continue
		}
		key := u.store.Key(tenant, id, folder+"/"+rel)
		if len(key) > artifacts.MaxKey {
			u.done(id)
			failed = append(failed, fmt.Sprintf("%s (its path is too long for an object's name: %d bytes, at most %d with the store's prefix)", f.Path, len(key), artifacts.MaxKey))
			continue
		}
		url, _, err := u.store.URL(ctx, key, u.ttl)
		if err != nil {
			u.done(id)
			failed = append(failed, fmt.Sprintf("%s (%s)", f.Path, errdefs.Public(m.log, err, "session_id", id)))
			continue
		}
		f.URL, f.Object = url, u.store.Name(key)
		done := make(chan error, 1)
		jobs = append(jobs, job{i, done})
		go func() {
			defer u.done(id)
			done <- m.upload(ctx, u, guest, rel, key)
		}()
	}
	collect := func() []string {
		for _, j := range jobs {
			err := <-j.done
			if err == nil {
				continue
			}
			f := &files[j.i]
			why := errdefs.Public(m.log, err, "session_id", id)
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				why = fmt.Sprintf("not uploaded within %s", maxUploadWait)
				if !wait {
					why = fmt.Sprintf("not uploaded within %s", uploadTimeout)
				}
			}
			failed = append(failed, fmt.Sprintf("%s (%s)", f.Path, why))
			if wait {
				f.URL, f.Object = "", "" // no object behind them
			}
		}
		cancel()
		if len(failed) == 0 {
			return nil
		}
		m.log.Warn("artifacts upload failed", "session_id", id, "files", strings.Join(failed, "; "))
		return failed
	}
	if wait {
		if failed := collect(); failed != nil {
			return "not kept in the artifacts store: " + strings.Join(failed, "; ")
		}
		return ""
	}
	go func() {
		if failed := collect(); failed != nil && notify != nil {
			notify("files not kept in the artifacts store: " + strings.Join(failed, "; "))
		}
	}()
	return ""
}

// upload sends the workspace file rel to the store as key, one of uploadsAtOnce, before ctx
// ends (waiting for a turn too).
func (m *Manager) upload(ctx context.Context, u *uploader, guest func() *guestproto.Client, rel, key string) error {
	select {
	case u.sem <- struct{}{}:
		defer func() { <-u.sem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	g := guest()
	if g == nil {
		return fmt.Errorf("the session was paused before its files were kept: %w", errdefs.ErrUnavailable)
	}
	info, rc, err := g.GetFile(ctx, rel)
	if err != nil {
		return err
	}
	defer rc.Close()
	if info.Size > maxArtifactBytes { // it grew since its run ended
		return fmt.Errorf("it is now larger than the %d MiB a file may be: %w", maxArtifactBytes>>20, errdefs.ErrTooLarge)
	}
	ctype := mime.TypeByExtension(path.Ext(rel))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	if err := u.store.Put(ctx, key, rc, info.Size, ctype); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s: %w", err.Error(), errdefs.ErrUnavailable)
	}
	return nil
}

// Bounds of a session's patterns.
const (
	maxArtifactPatterns = 32
	maxArtifactPattern  = 256
)

// checkArtifacts checks a session's patterns of the files kept in the artifacts store.
func checkArtifacts(patterns []string) error {
	if len(patterns) > maxArtifactPatterns {
		return fmt.Errorf("artifacts has %d patterns; at most %d: %w", len(patterns), maxArtifactPatterns, errdefs.ErrInvalidArgument)
	}
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil || p == "" || len(p) > maxArtifactPattern {
			return fmt.Errorf("artifacts pattern %.80q is not a pattern of path.Match of at most %d bytes (\"*.png\", \"out/*\"): %w", p, maxArtifactPattern, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// kept says whether the file rel is one of patterns (none: every file is).
func kept(patterns []string, rel string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, rel); ok {
			return true
		}
		if ok, _ := path.Match(p, path.Base(rel)); ok {
			return true
		}
	}
	return false
}

// sessionArtifacts is artifacts for a run of session s, of the files its patterns keep.
func (m *Manager) sessionArtifacts(s *Session, files []api.FileChange, wait bool) string {
	if m.uploads == nil {
		return ""
	}
	var keep []api.FileChange
	var at []int
	for i, f := range files {
		if rel, err := workspace.Clean(f.Path); err == nil && kept(s.keep, rel) {
			keep = append(keep, f)
			at = append(at, i)
		}
	}
	defer func() {
		for j, i := range at {
			files[i] = keep[j]
		}
	}()
	// The session's box as it is, not m.current: an upload is not the session's activity.
	guest := func() *guestproto.Client {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.box.guest
	}
	return m.artifacts(s.tenant, s.id, guest, keep, wait, func(msg string) {
		s.mu.Lock()
		if len(s.notice) < maxNotice {
			if room := maxNotice - len(s.notice); len(msg) > room {
				msg = strings.ToValidUTF8(msg[:room], "") + "... (the log has the rest)"
			}
			s.notice += "[cellbox: " + msg + "]\n"
		}
		s.mu.Unlock()
		m.saveSoon(s)
	})
}

// withNote adds note to a run's message.
func withNote(msg, note string) string {
	if note == "" {
		return msg
	}
	if msg != "" && !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return strings.TrimSpace(msg + " Files " + note)
}

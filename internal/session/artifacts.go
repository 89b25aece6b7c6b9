package session

import (
	"context"
	"fmt"
	"mime"
	"path"
	"strings"
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
	maxUploadsPerRun = 100              // files of one run; more are listed, not uploaded
	maxArtifactBytes = 1 << 30          // one file; a larger one is not uploaded
	uploadsAtOnce    = 4                // on the server, all sessions together
	uploadTimeout    = 10 * time.Minute // one file
	maxUploadWait    = time.Minute      // a run that asked for links waits no longer
)

type uploader struct {
	store artifacts.Store
	ttl   time.Duration
	sem   chan struct{}
}

// UseArtifacts makes the manager upload what runs change to store, with URLs that live ttl
// (a public store's live for good).
func (m *Manager) UseArtifacts(store artifacts.Store, ttl time.Duration) {
	m.uploads = &uploader{store: store, ttl: ttl, sem: make(chan struct{}, uploadsAtOnce)}
}

// HasArtifacts says whether runs' files are uploaded to an artifacts store.
func (m *Manager) HasArtifacts() bool { return m.uploads != nil }

// artifacts gives the created and modified files of a run in session id of tenant their
// object and URL, and uploads them from guest; with wait, before it returns, when what it
// returns says what failed ("" when nothing did); else beside what runs next, a failure
// told by notify (may be nil) and the log.
func (m *Manager) artifacts(tenant, id string, guest func() *guestproto.Client, files []api.FileChange, wait bool, notify func(string)) string {
	u := m.uploads
	if u == nil {
		return ""
	}
	type pending struct {
		path string
		done chan error
	}
	var jobs []pending
	var failed []string
	skipped := 0
	for i := range files {
		f := &files[i]
		if f.Change == api.ChangeDeleted {
			continue
		}
		if len(jobs) == maxUploadsPerRun {
			skipped++
			continue
		}
		if f.Size > maxArtifactBytes {
			failed = append(failed, fmt.Sprintf("%s (larger than the %d MiB a file may be)", f.Path, maxArtifactBytes>>20))
			continue
		}
		rel, err := workspace.Clean(f.Path)
		if err != nil || rel == "." {
			continue
		}
		key := u.store.Key(tenant, id, rel)
		url, _, err := u.store.URL(context.Background(), key, u.ttl)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", f.Path, err))
			continue
		}
		f.URL, f.Object = url, u.store.Name(key)
		done := make(chan error, 1)
		jobs = append(jobs, pending{f.Path, done})
		go func() { done <- m.upload(u, guest, rel, key) }()
	}
	if skipped > 0 {
		failed = append(failed, fmt.Sprintf("%d more files (at most %d are uploaded a run)", skipped, maxUploadsPerRun))
	}
	report := func(failed []string) string {
		if len(failed) == 0 {
			return ""
		}
		msg := "not kept in the artifacts store: " + strings.Join(failed, "; ")
		m.log.Warn("artifacts upload failed", "session_id", id, "failed", msg)
		return msg
	}
	if wait {
		deadline := time.After(maxUploadWait)
		for _, j := range jobs {
			select {
			case err := <-j.done:
				if err != nil {
					failed = append(failed, fmt.Sprintf("%s (%s)", j.path, errdefs.Public(m.log, err, "session_id", id)))
				}
			case <-deadline:
				failed = append(failed, fmt.Sprintf("%s (still uploading after %s)", j.path, maxUploadWait))
			}
		}
		return report(failed)
	}
	go func() {
		for _, j := range jobs {
			if err := <-j.done; err != nil {
				failed = append(failed, fmt.Sprintf("%s (%s)", j.path, errdefs.Public(m.log, err, "session_id", id)))
			}
		}
		if msg := report(failed); msg != "" && notify != nil {
			notify(msg)
		}
	}()
	return ""
}

// upload sends the workspace file rel to the store as key, one of uploadsAtOnce.
func (m *Manager) upload(u *uploader, guest func() *guestproto.Client, rel, key string) error {
	u.sem <- struct{}{}
	defer func() { <-u.sem }()
	ctx, cancel := context.WithTimeout(context.Background(), uploadTimeout)
	defer cancel()
	info, rc, err := guest().GetFile(ctx, rel)
	if err != nil {
		return err
	}
	defer rc.Close()
	ctype := mime.TypeByExtension(path.Ext(rel))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	if err := u.store.Put(ctx, key, rc, info.Size, ctype); err != nil {
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
	return m.artifacts(s.tenant, s.id, func() *guestproto.Client { return m.current(s).guest }, keep, wait, func(msg string) {
		s.mu.Lock()
		s.notice += "[cellbox: " + msg + "]\n"
		s.mu.Unlock()
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

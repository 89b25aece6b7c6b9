package session

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
)

// stuckStore is an artifacts store whose puts never end before their context does.
type stuckStore struct{ puts atomic.Int32 }

func (s *stuckStore) Put(ctx context.Context, key string, body io.Reader, size int64, contentType string) error {
	s.puts.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (s *stuckStore) URL(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error) {
	return "https://store.example/" + key, time.Now().Add(ttl), nil
}

func (s *stuckStore) Name(key string) string { return "stuck://" + key }

func (s *stuckStore) Key(tenant, session, rel string) string { return session + "/" + rel }

// TestArtifactsWaitBounded: a run that waits for its uploads waits maxUploadWait in all,
// not that long per file; the files not uploaded then lose their URLs and are named; and a
// session's queue of uploads is bounded.
func TestArtifactsWaitBounded(t *testing.T) {
	defer func(w time.Duration) { maxUploadWait = w }(maxUploadWait)
	maxUploadWait = 500 * time.Millisecond
	m := newManager(t, nil)
	store := &stuckStore{}
	m.UseArtifacts(store, time.Hour)
	ctx := context.Background()
	sess, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.lookup(ctx, sess.ID)
	var files []api.FileChange
	for i := range 10 {
		name := fmt.Sprintf("f%d.txt", i)
		if _, err := m.PutFile(ctx, sess.ID, name, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		files = append(files, api.FileChange{Path: api.WorkspaceDir + "/" + name, Size: 1, Change: api.ChangeCreated})
	}
	start := time.Now()
	msg := m.sessionArtifacts(s, files, true)
	if took := time.Since(start); took > 10*maxUploadWait {
		t.Errorf("a run waited %v for 10 stuck uploads (the wait is %v in all)", took, maxUploadWait)
	}
	if n := strings.Count(msg, "not uploaded within"); n != 10 {
		t.Errorf("%d files named as not uploaded: %s", n, msg)
	}
	for _, f := range files {
		if f.URL != "" || f.Object != "" {
			t.Errorf("%s keeps a URL to an object that is not there: %+v", f.Path, f)
		}
	}
	if store.puts.Load() > uploadsAtOnce {
		t.Errorf("%d uploads ran at once; at most %d", store.puts.Load(), uploadsAtOnce)
	}

	// Without a wait, a session's queue is bounded: past maxQueued, files are refused at
	// once and said so, not queued.
	defer func(w time.Duration) { uploadTimeout = w }(uploadTimeout)
	uploadTimeout = time.Hour
	many := make([]api.FileChange, 0, maxQueued+50)
	for i := range cap(many) {
		many = append(many, api.FileChange{Path: fmt.Sprintf("%s/g%d.txt", api.WorkspaceDir, i), Size: 1, Change: api.ChangeCreated})
	}
	for range 3 {
		m.sessionArtifacts(s, many[:maxUploadsPerRun], false)
	}
	m.uploads.mu.Lock()
	queued := m.uploads.queued[sess.ID]
	m.uploads.mu.Unlock()
	if queued > maxQueued {
		t.Errorf("%d uploads queued for one session; at most %d", queued, maxQueued)
	}
}

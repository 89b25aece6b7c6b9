package session

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/workspace"
)

// maxInputFiles caps the files of one request.
const maxInputFiles = 100

// inputFile is a decoded api.InputFile: a clean workspace path and the bytes.
type inputFile struct {
	rel  string
	body []byte
}

// decodeFiles checks and decodes a request's files.
func decodeFiles(in []api.InputFile) ([]inputFile, error) {
	if len(in) > maxInputFiles {
		return nil, fmt.Errorf("%d files; at most %d: %w", len(in), maxInputFiles, errdefs.ErrInvalidArgument)
	}
	files := make([]inputFile, 0, len(in))
	for i, f := range in {
		rel, err := workspace.Clean(f.Path)
		if err != nil || rel == "." {
			return nil, fmt.Errorf("files[%d].path %q: give a file name inside /mnt/data: %w", i, f.Path, errdefs.ErrInvalidArgument)
		}
		body := []byte(f.Content)
		if f.ContentBase64 != "" {
			if f.Content != "" {
				return nil, fmt.Errorf("files[%d]: give content or content_base64, not both: %w", i, errdefs.ErrInvalidArgument)
			}
			if body, err = base64.StdEncoding.DecodeString(f.ContentBase64); err != nil {
				return nil, fmt.Errorf("files[%d].content_base64 is not valid base64: %w", i, errdefs.ErrInvalidArgument)
			}
		}
		files = append(files, inputFile{rel, body})
	}
	return files, nil
}

// PutFiles checks all of a request's files, then writes them into a session's workspace.
func (m *Manager) PutFiles(ctx context.Context, id string, in []api.InputFile) error {
	files, err := decodeFiles(in)
	if err != nil {
		return err
	}
	for _, f := range files {
		if _, err := m.PutFile(ctx, id, f.rel, bytes.NewReader(f.body)); err != nil {
			return fmt.Errorf("upload %s: %w", f.rel, err)
		}
	}
	return nil
}

// OneShot runs code once in a fresh sandbox that nobody used before, then discards the
// sandbox and its workspace. Outputs go to onOutput as they happen (may be nil). It counts
// as a session and as an execution of ctx's tenant.
func (m *Manager) OneShot(ctx context.Context, req api.OneShotRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	lang, spec, err := m.checkSandbox(req.Language, req.Image, req.Limits, req.Env)
	if err != nil {
		return nil, err
	}
	spec.language = kernelLanguage(lang)
	if req.TimeoutS, err = m.timeout(req.TimeoutS); err != nil {
		return nil, err
	}
	cell := api.ExecuteRequest{Code: req.Code, Language: lang, TimeoutS: req.TimeoutS}
	if res, err := fromTypeScript(ctx, &cell, 0, onOutput); res != nil || err != nil {
		return res, err
	}
	files, err := decodeFiles(req.Files)
	if err != nil {
		return nil, err
	}
	policy, err := m.net.policy(Tenant(ctx), req.Network)
	if err != nil {
		return nil, err
	}
	ctx, release, err := m.adm.admit(ctx, Tenant(ctx), kindOneShot, nil)
	if err != nil {
		return nil, err
	}
	defer release()
	b, err := m.obtain(ctx, spec)
	if err != nil {
		return nil, err
	}
	// The sandbox is discarded after the answer is sent; Shutdown waits for it. (Tracked
	// while the run still counts, so that Shutdown cannot have stopped waiting.)
	defer func() {
		done, ok := m.adm.track()
		if !ok {
			m.discard(context.WithoutCancel(ctx), b, false)
			return
		}
		go func() {
			defer done()
			m.discard(context.WithoutCancel(ctx), b, false)
		}()
	}()
	// The one-shot's sandbox is a session to the gateway for as long as it runs.
	defer m.net.gw.End(b.id)
	if err := m.applyNetwork(ctx, &Session{id: b.id, tenant: Tenant(ctx), box: b}, policy); err != nil {
		return nil, err
	}
	for _, f := range files {
		if _, err := b.guest.PutFile(ctx, f.rel, bytes.NewReader(f.body)); err != nil {
			return nil, fmt.Errorf("upload %s: %w", f.rel, err)
		}
	}
	start := time.Now()
	res, err := b.guest.Execute(ctx, cell, onOutput)
	if err != nil {
		if b.alive() {
			return nil, err
		}
		res = &api.ExecuteResult{Status: api.StatusCrashed, Outputs: []api.Output{}, Files: []api.FileChange{},
			DurationMS: time.Since(start).Milliseconds(), Message: "the sandbox stopped unexpectedly"}
	}
	// The sandbox goes when this returns: its files are uploaded first, whatever was asked.
	res.Message = withNote(res.Message, m.artifacts(Tenant(ctx), b.id, func() *guestproto.Client { return b.guest }, res.Files, true, nil))
	m.metrics.observe("execute", res.Status, time.Duration(res.DurationMS)*time.Millisecond)
	return res, nil
}

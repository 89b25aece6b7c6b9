package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

// A session of another language: its cells run in that language by default, TypeScript's
// types stripped on the way, and it takes a sandbox whose kernel of that language runs
// already from its language's pool.
func TestLanguageSessions(t *testing.T) {
	m := newManager(t, func(c *config.Config) { c.PoolSize, c.LanguagePools = 1, "ts=1" })
	ctx := context.Background()
	key := poolKey{language: api.LanguageJavaScript}
	if !testbin.Eventually(time.Minute, func() bool { return m.pools[key] != nil && m.pools[key].len() >= 1 }) {
		t.Fatal("the JavaScript pool did not fill")
	}
	m.pools[key].mu.Lock()
	warm := m.pools[key].boxes[0].id
	m.pools[key].mu.Unlock()
	s, err := m.Create(ctx, api.CreateSessionRequest{Language: "ts"})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != warm || s.Language != api.LanguageTypeScript {
		t.Errorf("a TypeScript session: id %s (the warm one %s), language %q", s.ID, warm, s.Language)
	}
	shown := func(r *api.ExecuteResult) string {
		for _, o := range r.Outputs {
			if o.Type == api.OutputExecuteResult {
				v, _ := o.Data["text/plain"].(string)
				return v
			}
		}
		return ""
	}
	run := func(req api.ExecuteRequest) *api.ExecuteResult {
		t.Helper()
		r, err := m.Execute(ctx, s.ID, req, nil)
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		return r
	}
	// The warm cell that started the kernel was not counted.
	if r := run(api.ExecuteRequest{Code: "const n: number = await Promise.resolve(20); n + 1"}); shown(r) != "21" || r.ExecutionCount != 1 {
		t.Errorf("TypeScript by default: %+v", r)
	}
	if r := run(api.ExecuteRequest{Code: "n * 2", Language: "js"}); shown(r) != "40" {
		t.Errorf("JavaScript sees TypeScript's n: %+v", r)
	}
	if r := run(api.ExecuteRequest{Code: "'n' in globals()", Language: "python"}); shown(r) != "False" {
		t.Errorf("Python has its own variables: %+v", r)
	}
	var seen []api.Output
	r, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "let x: = 1"}, func(o api.Output) { seen = append(seen, o) })
	if err != nil || r.Status != api.StatusError || len(r.Outputs) != 1 || r.Outputs[0].EName != "SyntaxError" || len(seen) != 1 {
		t.Errorf("a TypeScript syntax error: %+v %v (streamed %d)", r, err, len(seen))
	}
	if _, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "1", Language: "cobol"}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "cobol") {
		t.Errorf("language cobol: %v", err)
	}
	if _, err := m.Create(ctx, api.CreateSessionRequest{Language: "fortran"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a fortran session: %v", err)
	}
	// A one-shot in R.
	r, err = m.OneShot(ctx, api.OneShotRequest{Language: "r", Code: "x <- c(1, 5, 9)\nmean(x)"}, nil)
	if err != nil || shown(r) != "[1] 5" {
		t.Errorf("one-shot R: %+v %v", r, err)
	}
}

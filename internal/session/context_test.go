package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// TestContexts: executions in a named context have their own variables and env; deleting
// the context drops them; bad names and env are refused before waiting for the turn.
func TestContexts(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(name, code string, env map[string]string) string {
		t.Helper()
		r, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: code, Context: name, Env: env}, nil)
		if err != nil || r.Status != api.StatusOK {
			t.Fatalf("in %q, %q: %+v, %v", name, code, r, err)
		}
		if len(r.Outputs) == 0 {
			return ""
		}
		return r.Outputs[0].Text
	}
	run("", "x = 'default'", nil)
	run("a", "x = 'a'", nil)
	if got := run("a", "import os\nprint(x, os.environ.get('CELL_VAR'))", map[string]string{"CELL_VAR": "set"}); got != "a set\n" {
		t.Errorf("in a: %q", got)
	}
	if got := run("", "import os\nprint(x, os.environ.get('CELL_VAR'))", nil); got != "default None\n" {
		t.Errorf("in the default context: %q", got)
	}
	if err := m.DeleteContext(ctx, s.ID, "a"); err != nil {
		t.Fatal(err)
	}
	if got := run("a", "print('x' in globals())", nil); got != "False\n" {
		t.Errorf("a deleted context: %q", got)
	}
	err = m.DeleteContext(ctx, s.ID, "b")
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("delete an unknown context: %v, want not found naming it", err)
	}
	if err := m.DeleteContext(ctx, "nope", "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("delete in an unknown session: %v", err)
	}

	// Refused at once, while a cell holds the turn.
	cell := startCell(t, m, ctx, s.ID, "import time\nprint('go', flush=True)\ntime.sleep(60)")
	for _, name := range []string{"", "a/b", "../x", "a\x00b", strings.Repeat("n", 10<<10)} {
		if err := m.DeleteContext(ctx, s.ID, name); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("delete context %.20q: %v, want invalid argument", name, err)
		}
		if name == "" {
			continue
		}
		if _, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "1", Context: name}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("execute in context %.20q: %v, want invalid argument", name, err)
		}
	}
	for _, env := range []map[string]string{{"A": "x\x00"}, {"A=B": "x"}, {"1A": "x"}} {
		if _, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "1", Env: env}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("execute with env %q: %v, want invalid argument", env, err)
		}
	}
	m.Interrupt(ctx, s.ID)
	<-cell
}

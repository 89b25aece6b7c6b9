package e2b

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/e2b/envd/processpb"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/workspace"
)

func TestWorkspacePath(t *testing.T) {
	for in, want := range map[string]string{
		"":                       ".",
		"~":                      ".",
		"~/a/b":                  "a/b",
		"a.txt":                  "a.txt",
		"./a/../b":               "b",
		"/home/user":             ".",
		"/home/user/":            ".",
		"/home/user/x/y.csv":     "x/y.csv",
		"/home/user/x/../y":      "y",
		"/mnt/data/z":            "z",
		"/home/user//a///b/":     "a/b",
		"/home/user/.hidden/../": ".",
	} {
		got, err := workspacePath(in)
		if err != nil || got != want {
			t.Errorf("workspacePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/etc/passwd", "/home/user/../x", "../x", "~/../../etc", "/home/username/x", "/home", "/", "/mnt/data/../etc",
		"a\x00b", "/home/user/a\\b", strings.Repeat("a/", 3000), "/tmp/x"} {
		if got, err := workspacePath(in); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("workspacePath(%.50q) = %q, %v; want invalid argument", in, got, err)
		}
	}
}

// FuzzWorkspacePath: whatever the path, the answer is a refusal or a clean workspace path.
func FuzzWorkspacePath(f *testing.F) {
	for _, s := range []string{"a", "/home/user/../..", "~/x", "/mnt/data/./y", "..", "/home/user/a/../../b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := workspacePath(p)
		if err != nil {
			return
		}
		if again, err := workspace.Clean(rel); err != nil || again != rel {
			t.Fatalf("workspacePath(%q) = %q, not a clean workspace path (%q, %v)", p, rel, again, err)
		}
		for _, c := range strings.Split(rel, "/") {
			if c == ".." {
				t.Fatalf("workspacePath(%q) = %q", p, rel)
			}
		}
	})
}

func TestMetadataFilter(t *testing.T) {
	// As npm e2b 2.51 sends {user: 'a b', 'k&=': 'v=1'} (captured on the wire).
	q, err := url.ParseQuery("metadata=user%3Da%252520b%26k%252526%25253D%3Dv%25253D1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := metadataFilter(q.Get("metadata"))
	if err != nil || len(got) != 2 || got["user"] != "a b" || got["k&="] != "v=1" {
		t.Errorf("metadataFilter = %v, %v", got, err)
	}
	for _, bad := range []string{"novalue", "a=b=c", "a=%zz", "%zz"} {
		if _, err := metadataFilter(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("metadataFilter(%q): %v; want invalid argument", bad, err)
		}
	}
}

func TestStateFilter(t *testing.T) {
	for _, c := range []struct {
		v               string
		v2              bool
		running, paused bool
	}{
		{"", true, true, true},
		{"", false, true, false}, // GET /sandboxes lists running sandboxes, as on E2B
		{"paused", true, false, true},
		{"running", false, true, false},
		{"running,paused", false, true, true},
	} {
		got, err := stateFilter(c.v, c.v2)
		if err != nil || got["running"] != c.running || got["paused"] != c.paused {
			t.Errorf("stateFilter(%q, v2 %v) = %v, %v", c.v, c.v2, got, err)
		}
	}
	for _, bad := range []string{"sleeping", "running,", "Running"} {
		if _, err := stateFilter(bad, true); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("stateFilter(%q): %v; want invalid argument", bad, err)
		}
	}
}

// A refused pause is a 400, which E2B's SDK throws; any 409 it would read as "already
// paused".
func TestRefused(t *testing.T) {
	plain := &api.Session{IdleAction: api.IdleActionEnd}
	err := refused(plain, fmt.Errorf("not pausable: %w", errdefs.ErrFailedPrecondition))
	if status(err) != 400 || !strings.Contains(err.Error(), "not pausable") || !strings.Contains(err.Error(), "onTimeout: 'pause'") {
		t.Errorf("refused: %d %v", status(err), err)
	}
	err = refused(&api.Session{IdleAction: api.IdleActionPause}, fmt.Errorf("busy: %w", errdefs.ErrFailedPrecondition))
	if status(err) != 400 || strings.Contains(err.Error(), "onTimeout") {
		t.Errorf("refused, a sandbox that pauses: %d %v", status(err), err)
	}
	for _, other := range []error{errdefs.ErrNotFound, errdefs.ErrResourceExhausted} {
		if err := refused(plain, other); err != other {
			t.Errorf("refused(%v) = %v; want it as it was", other, err)
		}
	}
}

func TestCursor(t *testing.T) {
	s := api.Session{ID: "abc", CreatedAt: time.Unix(0, 1234567890123)}
	got, err := parseCursor(cursorOf(s).String())
	if err != nil || got.id != s.ID || !got.created.Equal(s.CreatedAt) {
		t.Errorf("cursor round trip: %+v, %v", got, err)
	}
	for _, bad := range []string{"!!", "YWJj", "eDph"} {
		if c, err := parseCursor(bad); err == nil {
			t.Errorf("parseCursor(%q) = %+v", bad, c)
		}
	}
}

func TestOutputLine(t *testing.T) {
	line := outputLine(api.Output{Type: api.OutputExecuteResult, Data: map[string]any{
		"text/plain": "'quoted'", "image/png": "iVBOR", "application/x-custom": "c", "extra": "dropped",
	}})
	if line["type"] != "result" || line["is_main_result"] != true || line["text"] != "quoted" || line["png"] != "iVBOR" ||
		line["application/x-custom"] != "c" || line["extra"] != nil {
		t.Errorf("result line: %v", line)
	}
	line = outputLine(api.Output{Type: api.OutputError, EName: "E", EValue: "v", Traceback: []string{"a", "b"}})
	if line["name"] != "E" || line["value"] != "v" || line["traceback"] != "a\nb" {
		t.Errorf("error line: %v", line)
	}
	if line := outputLine(api.Output{Type: api.OutputStream, Name: "stderr", Text: "x"}); line["type"] != "stderr" || line["text"] != "x" {
		t.Errorf("stream line: %v", line)
	}
}

func TestEndEvent(t *testing.T) {
	end := func(res *api.CommandResult, err error) *processpb.ProcessEvent_EndEvent {
		return endEvent(res, err).GetEnd()
	}
	if e := end(&api.CommandResult{Status: api.StatusOK}, nil); e.ExitCode != 0 || !e.Exited || e.Error != nil {
		t.Errorf("ok: %v", e)
	}
	if e := end(&api.CommandResult{Status: api.StatusError, ExitCode: 3}, nil); e.ExitCode != 3 || !e.Exited || e.GetError() != "exit status 3" {
		t.Errorf("exit 3: %v", e)
	}
	if e := end(&api.CommandResult{Status: api.StatusTimeout, ExitCode: -1, Message: "ran past"}, nil); e.Exited || e.ExitCode != -1 || e.GetError() != "ran past" {
		t.Errorf("timeout: %v", e)
	}
	if e := end(nil, errors.New("gone")); e.ExitCode != -1 || e.GetError() != "gone" {
		t.Errorf("error: %v", e)
	}
}

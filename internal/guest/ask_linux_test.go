package guest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
)

func ptr[T any](v T) *T { return &v }

// TestAsk: the kernel's completer, inspector and input checker answer as IPython's do,
// in the context asked, with offsets in code points; a completer stuck in user code is
// interrupted and the kernel keeps its variables.
func TestAsk(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	ctx := context.Background()
	g.exec(t, "import os\nalpha_value = 1\nalpha_other = 2\ndef greet(name):\n    'Say hello to name.'\n    return name", 30)

	c, err := g.Complete(ctx, api.CompleteRequest{Code: "alpha_"})
	if err != nil || !slices.Contains(c.Matches, "alpha_value") || !slices.Contains(c.Matches, "alpha_other") ||
		c.CursorStart != 0 || c.CursorEnd != 6 || len(c.Types) != len(c.Matches) {
		t.Fatalf("complete alpha_: %+v, %v", c, err)
	}
	// Code points, not bytes: "é" is two bytes, one code point.
	c, err = g.Complete(ctx, api.CompleteRequest{Code: "s = 'é'; os.pa", CursorPos: ptr(14)})
	if err != nil || !slices.Contains(c.Matches, "path") || c.CursorStart != 12 || c.CursorEnd != 14 {
		t.Fatalf("complete os.pa after é: %+v, %v", c, err)
	}
	// The cursor in the middle: what is before it completes.
	c, err = g.Complete(ctx, api.CompleteRequest{Code: "gre + 1", CursorPos: ptr(3)})
	if err != nil || !slices.Contains(c.Matches, "greet") || c.CursorStart != 0 || c.CursorEnd != 3 {
		t.Fatalf("complete gre|: %+v, %v", c, err)
	}
	c, err = g.Complete(ctx, api.CompleteRequest{Code: "zzz_nothing_like_this"})
	if err != nil || len(c.Matches) != 0 {
		t.Fatalf("complete of nothing: %+v, %v", c, err)
	}

	in, err := g.Inspect(ctx, api.InspectRequest{Code: "greet(", CursorPos: ptr(3)})
	if err != nil || !in.Found || !strings.Contains(in.Data["text/plain"].(string), "Say hello to name.") {
		t.Fatalf("inspect greet: %+v, %v", in, err)
	}
	in, err = g.Inspect(ctx, api.InspectRequest{Code: "greet", DetailLevel: 1})
	if err != nil || !in.Found || !strings.Contains(in.Data["text/plain"].(string), "return name") {
		t.Fatalf("inspect greet with source: %+v, %v", in, err)
	}
	in, err = g.Inspect(ctx, api.InspectRequest{Code: "no_such_name"})
	if err != nil || in.Found {
		t.Fatalf("inspect of nothing: %+v, %v", in, err)
	}

	for code, want := range map[string]string{"x = 1": "complete", "for i in range(3):": "incomplete", "x = (1,": "incomplete", "1 +* 2)": "invalid"} {
		ic, err := g.IsComplete(ctx, code)
		if err != nil || ic.Status != want {
			t.Errorf("is_complete %q: %+v, %v; want %s", code, ic, err, want)
		}
		if want == "incomplete" && code[len(code)-1] == ':' && ic.Indent != "    " {
			t.Errorf("is_complete %q: indent %q", code, ic.Indent)
		}
	}

	// A named context's own names; an unknown context is not made by asking.
	r, err := g.Execute(ctx, api.ExecuteRequest{Code: "beta_only = 1", Context: "b", TimeoutS: 30}, nil)
	if err != nil || r.Status != api.StatusOK {
		t.Fatal(r, err)
	}
	if c, err := g.Complete(ctx, api.CompleteRequest{Code: "beta_o", Context: "b"}); err != nil || !slices.Contains(c.Matches, "beta_only") {
		t.Errorf("complete in context b: %+v, %v", c, err)
	}
	if c, err := g.Complete(ctx, api.CompleteRequest{Code: "beta_o"}); err != nil || slices.Contains(c.Matches, "beta_only") {
		t.Errorf("complete in the default context sees b's names: %+v, %v", c, err)
	}
	if _, err := g.Complete(ctx, api.CompleteRequest{Code: "x", Context: "nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("complete in an unknown context: %v", err)
	}
	if _, err := g.Complete(ctx, api.CompleteRequest{Code: "x", CursorPos: ptr(5)}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a cursor past the code: %v", err)
	}

	// A completer stuck in user code (an attribute that never returns) is interrupted.
	g.exec(t, "class Stuck:\n    def __dir__(self):\n        import time\n        while True: time.sleep(0.1)\nstuck = Stuck()", 30)
	if c, err := g.Complete(ctx, api.CompleteRequest{Code: "stuck."}); err != nil || len(c.Matches) != 0 {
		t.Errorf("complete of a stuck object: %+v, %v", c, err)
	}
	if out := text(g.exec(t, "print(alpha_value)", 30), "stdout"); out != "1\n" {
		t.Errorf("after an interrupted completion: %q", out)
	}
}

// TestExecuteJupyterOptions: user expressions after the code (also after an error), a run
// without history, and display ids, their updates and clear_output when asked for.
func TestExecuteJupyterOptions(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	ctx := context.Background()

	r, err := g.Execute(ctx, api.ExecuteRequest{Code: "a = 40\nb = a + 2", TimeoutS: 30,
		UserExpressions: map[string]string{"sum": "a + b", "bad": "1/0", "html": "__import__('IPython').display.HTML('<b>x</b>')"}}, nil)
	if err != nil || r.Status != api.StatusOK {
		t.Fatal(r, err)
	}
	ux := r.UserExpressions
	if ux["sum"].Type != api.OutputDisplayData || ux["sum"].Data["text/plain"] != "82" ||
		ux["bad"].Type != api.OutputError || ux["bad"].EName != "ZeroDivisionError" || ux["html"].Data["text/html"] != "<b>x</b>" {
		t.Errorf("user expressions: %+v", ux)
	}
	r, err = g.Execute(ctx, api.ExecuteRequest{Code: "raise ValueError('no')", TimeoutS: 30, UserExpressions: map[string]string{"b": "b"}}, nil)
	if err != nil || r.Status != api.StatusError || r.UserExpressions["b"].Data["text/plain"] != "42" {
		t.Errorf("user expressions after an error: %+v, %v", r, err)
	}

	n := g.exec(t, "1", 30).ExecutionCount
	r, err = g.Execute(ctx, api.ExecuteRequest{Code: "hidden = 5\nhidden", NoHistory: true, TimeoutS: 30}, nil)
	if err != nil || r.ExecutionCount != n {
		t.Errorf("a run without history: count %d, want %d (%v)", r.ExecutionCount, n, err)
	}
	if out := text(g.exec(t, "print(hidden, any('hidden = ' + '5' in s for s in In))", 30), "stdout"); out != "5 False\n" {
		t.Errorf("after a run without history: %q", out)
	}

	code := "from IPython.display import display, clear_output\nh = display('one', display_id='d1')\nh.update('two')\nprint('x')\nclear_output(wait=True)\ndisplay('three')"
	r, err = g.Execute(ctx, api.ExecuteRequest{Code: code, TimeoutS: 30, DisplayUpdates: true}, nil)
	if err != nil || r.Status != api.StatusOK {
		t.Fatal(r, err)
	}
	var got []string
	for _, o := range r.Outputs {
		s := o.Type
		if o.DisplayID != "" {
			s += ":" + o.DisplayID
		}
		if v, ok := o.Data["text/plain"]; ok {
			s += ":" + v.(string)
		}
		if o.Type == api.OutputClear && o.Wait {
			s += ":wait"
		}
		got = append(got, s)
	}
	want := []string{"display_data:d1:'one'", "update_display_data:d1:'two'", "stream", "clear_output:wait", "display_data:'three'"}
	if !slices.Equal(got, want) {
		t.Errorf("with display updates: %q, want %q", got, want)
	}
	// Without them, as before: no ids, no updates, no clearing.
	r, err = g.Execute(ctx, api.ExecuteRequest{Code: code, TimeoutS: 30}, nil)
	if err != nil || len(r.Outputs) != 3 || r.Outputs[0].DisplayID != "" || r.Outputs[1].Type != api.OutputStream {
		t.Errorf("without display updates: %+v, %v", r.Outputs, err)
	}
}

// TestInputRefused: input() and getpass() fail at once with an error that says what to do.
func TestInputRefused(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	for _, code := range []string{"x = input('name? ')", "import getpass\ngetpass.getpass()"} {
		r := g.exec(t, code, 30)
		var e *api.Output
		for i := range r.Outputs {
			if r.Outputs[i].Type == api.OutputError {
				e = &r.Outputs[i]
			}
		}
		if r.Status != api.StatusError || e == nil || e.EName != "StdinNotImplementedError" || !strings.Contains(e.EValue, "Set the value in the code") {
			t.Errorf("%q: %+v", code, r)
		}
	}
}

// TestInputAsked: with a caller that answers (Request.Stdin), input() and getpass() ask it
// and get its value; its error is the cell's EOFError; a cell interrupted while it waits
// stops, its variables kept.
func TestInputAsked(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	ctx := context.Background()
	var asked []string
	answer := func(ctx context.Context, prompt string, password bool) (string, error) {
		asked = append(asked, fmt.Sprintf("%s|%v", prompt, password))
		if strings.Contains(prompt, "fail") {
			return "", errors.New("nobody there")
		}
		return "value for " + prompt, nil
	}
	r, err := g.ExecuteWith(ctx, api.ExecuteRequest{Code: "print('before')\nname = input('who? ')\nimport getpass\npw = getpass.getpass('pw: ')\nprint(name, pw, sep=';')", TimeoutS: 30},
		guestproto.ExecuteOptions{OnInput: answer})
	if err != nil || r.Status != api.StatusOK || text(r, "stdout") != "before\nvalue for who? ;value for pw: \n" {
		t.Fatalf("input: %+v, %v", r, err)
	}
	if !slices.Equal(asked, []string{"who? |false", "pw: |true"}) {
		t.Errorf("asked %q", asked)
	}
	r, err = g.ExecuteWith(ctx, api.ExecuteRequest{Code: "input('fail')", TimeoutS: 30}, guestproto.ExecuteOptions{OnInput: answer})
	if err != nil || r.Status != api.StatusError || !strings.Contains(fmt.Sprint(r.Outputs), "EOFError") || !strings.Contains(fmt.Sprint(r.Outputs), "nobody there") {
		t.Errorf("an answer that failed: %+v, %v", r, err)
	}
	// A value that is short but long once written as JSON (a control character is six
	// bytes there): the cell's EOFError says so; the sandbox is not lost for it.
	r, err = g.ExecuteWith(ctx, api.ExecuteRequest{Code: "input('long')", TimeoutS: 30}, guestproto.ExecuteOptions{
		OnInput: func(context.Context, string, bool) (string, error) {
			return strings.Repeat("\x01", guestproto.MaxInput/2), nil
		}})
	if err != nil || r.Status != api.StatusError || !strings.Contains(fmt.Sprint(r.Outputs), "EOFError") {
		t.Errorf("a value of %d control characters: %+v, %v", guestproto.MaxInput/2, r, err)
	}
	// Interrupted while it waits: the caller's context ends, the cell stops.
	g.exec(t, "kept = 1", 30)
	ictx, cancel := context.WithCancel(ctx)
	waiting := make(chan struct{})
	go func() { <-waiting; cancel() }()
	r, err = g.ExecuteWith(ictx, api.ExecuteRequest{Code: "input('wait')", TimeoutS: 30}, guestproto.ExecuteOptions{OnInput: func(ctx context.Context, prompt string, _ bool) (string, error) {
		close(waiting)
		<-ctx.Done()
		return "", ctx.Err()
	}})
	if err != nil || r.Status != api.StatusInterrupted {
		t.Errorf("interrupted while waiting: %+v, %v", r, err)
	}
	if out := text(g.exec(t, "print(kept)", 30), "stdout"); out != "1\n" {
		t.Errorf("after: %q", out)
	}
}

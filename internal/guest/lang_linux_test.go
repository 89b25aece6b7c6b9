package guest

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

// needNode skips the test when node or Debian's acorn is missing.
func needNode(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("node", "-e", `require("/usr/share/nodejs/acorn")`).CombinedOutput(); err != nil {
		testbin.Missing(t, "node with Debian's acorn (install nodejs and node-acorn): %v: %s", err, out)
	}
}

func (g *guestT) runLang(t testing.TB, lang, code string, timeoutS float64) *api.ExecuteResult {
	t.Helper()
	return g.runIn(t, lang, "", code, timeoutS)
}

func (g *guestT) runIn(t testing.TB, lang, context_, code string, timeoutS float64) *api.ExecuteResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if timeoutS == 0 {
		timeoutS = 30
	}
	r, err := g.Execute(ctx, api.ExecuteRequest{Code: code, Language: lang, Context: context_, TimeoutS: timeoutS}, nil)
	if err != nil {
		t.Fatalf("execute %s %q: %v", lang, code, err)
	}
	return r
}

// plain is the text/plain of the result's execute_result ("" if none).
func plain(r *api.ExecuteResult) string {
	for _, o := range r.Outputs {
		if o.Type == api.OutputExecuteResult {
			s, _ := o.Data["text/plain"].(string)
			return s
		}
	}
	return ""
}

func errorOf(r *api.ExecuteResult) *api.Output {
	for i, o := range r.Outputs {
		if o.Type == api.OutputError {
			return &r.Outputs[i]
		}
	}
	return nil
}

func TestJavaScriptKernel(t *testing.T) {
	needNode(t)
	g := startKernelGuest(t, testConfig())
	steps := []struct {
		lang, code, want string
	}{
		{"javascript", "const x = 41; x + 1", "42"},
		{"javascript", "const x = 2; x", "2"}, // a cell may run again
		{"javascript", "let {a, b: [c]} = {a: 1, b: [2]}; a + c", "3"},
		{"javascript", "await new Promise(r => setTimeout(r, 10)); const y = await Promise.resolve(7); y * x", "14"},
		{"javascript", "y + 1", "8"},
		{"javascript", "await 1; function g() { return 5 }; class B {}; [g(), new B()]", "[ 5, B {} ]"},
		{"javascript", "import os from 'os'; import {join} from 'path'; join('a', typeof os.cpus)", "'a/function'"},
		{"javascript", "const m = await import('node:path'); m.basename('/a/b.txt')", "'b.txt'"},
		{"javascript", "require('fs').existsSync('.')", "true"},
		{"javascript", "{a: 1, b: 2}", "{ a: 1, b: 2 }"},
		{"javascript", "import path from 'node:path'", ""},
		{"javascript", "path.sep", "'/'"},
		{"python", "x = 'py'; x", "'py'"},
		{"javascript", "x", "2"}, // each language has its own variables
	}
	for _, s := range steps {
		r := g.runLang(t, s.lang, s.code, 0)
		if r.Status != api.StatusOK || plain(r) != s.want {
			t.Fatalf("%s %q: status %s, result %q, outputs %+v; want %q", s.lang, s.code, r.Status, plain(r), r.Outputs, s.want)
		}
	}

	r := g.runLang(t, "javascript", "console.log('out'); console.error('err'); display.html('<b>x</b>'); ({[Symbol.for('Jupyter.display')]() { return {'text/html': '<i>me</i>'} }})", 0)
	if text(r, "stdout") != "out\n" || text(r, "stderr") != "err\n" || len(r.Outputs) != 4 ||
		r.Outputs[2].Data["text/html"] != "<b>x</b>" || r.Outputs[3].Data["text/html"] != "<i>me</i>" {
		t.Fatalf("display: %+v", r.Outputs)
	}

	r = g.runLang(t, "javascript", "const o = {}; o.foo.bar", 0)
	if e := errorOf(r); r.Status != api.StatusError || e == nil || e.EName != "TypeError" || !strings.Contains(strings.Join(e.Traceback, "\n"), "cell[") {
		t.Fatalf("error: %+v", r)
	}
	r = g.runLang(t, "javascript", "const n = ;", 0)
	if e := errorOf(r); r.Status != api.StatusError || e == nil || e.EName != "SyntaxError" {
		t.Fatalf("syntax error: %+v", r)
	}

	// Interrupts: a loop (V8 breaks it) and an await that never ends; the state stays.
	for _, code := range []string{"while (true) {}", "await new Promise(() => {})"} {
		r = g.runLang(t, "javascript", code, 1)
		if r.Status != api.StatusTimeout || r.KernelRestarted {
			t.Fatalf("%q: %+v", code, r)
		}
	}
	if r = g.runLang(t, "javascript", "x", 0); plain(r) != "2" {
		t.Fatalf("after the interrupts: %+v", r)
	}

	// A kernel that dies is started again at the next cell.
	r = g.runLang(t, "javascript", "process.exit(3)", 0)
	if r.Status != api.StatusCrashed || !r.KernelRestarted {
		t.Fatalf("exit: %+v", r)
	}
	if r = g.runLang(t, "javascript", "typeof x", 0); plain(r) != "'undefined'" || r.ExecutionCount != 1 {
		t.Fatalf("after the exit: %+v", r)
	}
}

func TestBashKernel(t *testing.T) {
	g := startKernelGuest(t, testConfig())
	steps := []struct {
		code, out string
		status    string
	}{
		{"x=5; mkdir -p sub; cd sub; echo $x", "5\n", api.StatusOK},
		{"echo \"$x $(basename $PWD)\"", "5 sub\n", api.StatusOK},
		{"f() { echo \"f $1\"; }; f 'a b'", "f a b\n", api.StatusOK},
		{"f \"é'\\\"\\\\$x\"", "f é'\"\\5\n", api.StatusOK},
		{"cat <<EOF\nline $x\nEOF", "line 5\n", api.StatusOK},
		{"cat; echo read-nothing", "read-nothing\n", api.StatusOK},
		{"false", "", api.StatusError},
		{"if true; then\n echo 'unterminated", "", api.StatusError},
		{"echo still $x", "still 5\n", api.StatusOK},
	}
	for _, s := range steps {
		r := g.runLang(t, "bash", s.code, 0)
		if r.Status != s.status || text(r, "stdout") != s.out {
			t.Fatalf("%q: status %s, stdout %q (%+v); want %s, %q", s.code, r.Status, text(r, "stdout"), r.Outputs, s.status, s.out)
		}
	}
	if r := g.runLang(t, "bash", "echo a\x00b", 0); r.Status != api.StatusError || errorOf(r) == nil || errorOf(r).EName != "SyntaxError" {
		t.Fatalf("a NUL byte: %+v", r)
	}
	if r := g.runLang(t, "bash", "false", 0); errorOf(r) == nil || errorOf(r).EName != "ExitStatus" || errorOf(r).EValue != "1" {
		t.Fatalf("false: %+v", r)
	}

	// An interrupt stops the command and the rest of the cell; the shell lives on.
	for _, code := range []string{"sleep 30; echo not-reached", "while :; do :; done; echo not-reached", "g() { while :; do sleep 0.1; done; }; g; echo not-reached"} {
		r := g.runLang(t, "bash", code, 1)
		if r.Status != api.StatusTimeout || r.KernelRestarted || strings.Contains(text(r, "stdout"), "not-reached") {
			t.Fatalf("%q: %+v", code, r)
		}
	}
	if r := g.runLang(t, "bash", "echo $x", 0); text(r, "stdout") != "5\n" {
		t.Fatalf("after the interrupts: %+v", r)
	}
	// Per-cell environment, and contexts: another shell.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := g.Execute(ctx, api.ExecuteRequest{Language: "bash", Code: "echo $CELL_VAR", Env: map[string]string{"CELL_VAR": "v'1"}}, nil)
	if err != nil || text(r, "stdout") != "v'1\n" {
		t.Fatalf("env: %v %+v", err, r)
	}
	if r := g.runLang(t, "bash", "echo \"[$CELL_VAR]\"", 0); text(r, "stdout") != "[]\n" {
		t.Fatalf("env after its cell: %+v", r)
	}
	if r := g.runIn(t, "bash", "other", "echo \"[$x]\"; x=9", 0); text(r, "stdout") != "[]\n" {
		t.Fatalf("context: %+v", r)
	}
	if r := g.runLang(t, "bash", "echo $x", 0); text(r, "stdout") != "5\n" {
		t.Fatalf("default context after another: %+v", r)
	}
	// exit ends the shell: the cell says so, and the next one has a new shell.
	if r := g.runLang(t, "bash", "exit 4", 0); r.Status != api.StatusCrashed || !r.KernelRestarted || !strings.Contains(r.Message, "exit code 4") {
		t.Fatalf("exit: %+v", r)
	}
	if r := g.runLang(t, "bash", "echo \"[$x]\"", 0); text(r, "stdout") != "[]\n" || r.ExecutionCount != 1 {
		t.Fatalf("after exit: %+v", r)
	}
}

// needR skips the test when Rscript or its packages are missing.
func needR(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("Rscript", "-e", `library(jsonlite); library(repr)`).CombinedOutput(); err != nil {
		testbin.Missing(t, "Rscript with jsonlite and repr (install r-base-core r-cran-jsonlite r-cran-repr): %v: %s", err, out)
	}
}

func TestRKernel(t *testing.T) {
	needR(t)
	g := startKernelGuest(t, testConfig())
	r := g.runLang(t, "r", "x <- 41\nx + 1", 0)
	if r.Status != api.StatusOK || plain(r) != "[1] 42" || r.ExecutionCount != 1 {
		t.Fatalf("x + 1: %+v", r)
	}
	r = g.runLang(t, "r", "df <- data.frame(a = 1:3, b = c('x', 'y', 'z'))\nprint('printed')\ndf", 0)
	if r.Status != api.StatusOK || text(r, "stdout") != "[1] \"printed\"\n" || !strings.Contains(plain(r), "1 1 x") {
		t.Fatalf("data frame: %+v", r)
	}
	if html, _ := r.Outputs[len(r.Outputs)-1].Data["text/html"].(string); !strings.Contains(html, "<table") {
		t.Fatalf("data frame's HTML: %+v", r.Outputs)
	}
	r = g.runLang(t, "r", "plot(1:10)\nhist(rnorm(100))", 0)
	pngs := 0
	for _, o := range r.Outputs {
		if p, _ := o.Data["image/png"].(string); strings.HasPrefix(p, "iVBORw0KGgo") {
			pngs++
		}
	}
	if r.Status != api.StatusOK || pngs != 2 {
		t.Fatalf("plots: %d PNGs, %+v", pngs, r)
	}
	r = g.runLang(t, "r", "message('to stderr'); warning('careful'); stop('bad thing')\nprint('not reached')", 0)
	if e := errorOf(r); r.Status != api.StatusError || e == nil || e.EValue != "bad thing" ||
		!strings.Contains(text(r, "stderr"), "to stderr") || !strings.Contains(text(r, "stderr"), "careful") || strings.Contains(text(r, "stdout"), "not reached") {
		t.Fatalf("error: %+v", r)
	}
	r = g.runLang(t, "r", "x <- (", 0)
	if e := errorOf(r); r.Status != api.StatusError || e == nil || e.EName != "SyntaxError" {
		t.Fatalf("syntax error: %+v", r)
	}
	for _, code := range []string{"Sys.sleep(30)", "i <- 0; while (TRUE) i <- i + 1"} {
		r = g.runLang(t, "r", code, 1)
		if r.Status != api.StatusTimeout || r.KernelRestarted {
			t.Fatalf("%q: %+v", code, r)
		}
	}
	if r = g.runLang(t, "r", "x", 0); plain(r) != "[1] 41" {
		t.Fatalf("after the interrupts: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := g.Execute(ctx, api.ExecuteRequest{Language: "r", Code: "Sys.getenv('CELL_VAR')", Env: map[string]string{"CELL_VAR": "v1"}}, nil)
	if err != nil || plain(r) != `[1] "v1"` {
		t.Fatalf("env: %v %+v", err, r)
	}
	if r = g.runLang(t, "r", "Sys.getenv('CELL_VAR')", 0); plain(r) != `[1] ""` {
		t.Fatalf("env after its cell: %+v", r)
	}
}

// A language whose runtime the root lacks is refused with what to install.
func TestMissingRuntime(t *testing.T) {
	cfg := testConfig()
	cfg.Env = map[string]string{"PATH": t.TempDir()}
	cfg.Image = "slim"
	g := startKernelGuest(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := g.Execute(ctx, api.ExecuteRequest{Language: "r", Code: "1"}, nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), `image "slim" has no R`) || !strings.Contains(err.Error(), "r-base-core") {
		t.Errorf("R without Rscript: %v", err)
	}
	if r := g.exec(t, "print('python still runs')", 0); text(r, "stdout") != "python still runs\n" {
		t.Errorf("python: %+v", r)
	}
}

package session

import (
	"context"
	"fmt"
	"runtime"

	esbuild "github.com/evanw/esbuild/pkg/api"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// TypeScript runs in the JavaScript kernel: the server strips its types with esbuild (a
// parser in Go, so the guest stays small and no runtime needs a transpiler), keeping what
// a cell means on its own: imports it does not use stay (a later cell may), top-level await
// stays, and nothing is bundled or minified.

// maxTypeScript bounds a TypeScript cell. esbuild runs in the server, outside any sandbox's
// CPU limit, and some inputs cost it time out of proportion to their size (every
// "already declared" error scans the source for its line: 240 KB of them took 2.5 s here),
// so the cell is small and one strip runs at a time a core.
const maxTypeScript = 128 << 10

var stripSlots = make(chan struct{}, max(1, runtime.NumCPU()/2))

// fromTypeScript turns a TypeScript cell of req into the JavaScript that runs it. A cell
// that cannot run (a syntax error) is answered here: its error output goes to onOutput (may
// be nil) and is the returned result, with execution count count.
func fromTypeScript(ctx context.Context, req *api.ExecuteRequest, count int, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	if req.Language != api.LanguageTypeScript {
		return nil, nil
	}
	if len(req.Code) > maxTypeScript {
		return nil, fmt.Errorf("a TypeScript cell holds at most %d KiB (this one %d KiB): split it, or run it as JavaScript: %w",
			maxTypeScript>>10, len(req.Code)>>10, errdefs.ErrInvalidArgument)
	}
	select {
	case stripSlots <- struct{}{}:
		defer func() { <-stripSlots }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	js, bad := stripTypes(req.Code)
	if bad != nil {
		if onOutput != nil {
			onOutput(*bad)
		}
		return &api.ExecuteResult{Status: api.StatusError, ExecutionCount: count, Outputs: []api.Output{*bad}, Files: []api.FileChange{}}, nil
	}
	req.Code, req.Language = js, api.LanguageJavaScript
	return nil, nil
}

func stripTypes(code string) (js string, bad *api.Output) {
	defer func() {
		if recover() != nil { // the parser's fault, not the code's: say so without its words
			js, bad = "", &api.Output{Type: api.OutputError, EName: "SyntaxError", EValue: "the TypeScript could not be read",
				Traceback: []string{"SyntaxError: the TypeScript could not be read"}}
		}
	}()
	res := esbuild.Transform(code, esbuild.TransformOptions{
		Loader:      esbuild.LoaderTS,
		Target:      esbuild.ESNext,
		Sourcefile:  "cell.ts",
		TsconfigRaw: `{"compilerOptions": {"verbatimModuleSyntax": true}}`,
		LogLevel:    esbuild.LogLevelSilent,
		LogLimit:    10,
	})
	if len(res.Errors) == 0 {
		return string(res.Code), nil
	}
	var tb []string
	for _, e := range res.Errors {
		line := e.Text
		if e.Location != nil {
			line = fmt.Sprintf("cell.ts:%d:%d: %s", e.Location.Line, e.Location.Column+1, e.Text)
			if e.Location.LineText != "" {
				line += "\n    " + e.Location.LineText
			}
		}
		tb = append(tb, line)
	}
	return "", &api.Output{Type: api.OutputError, EName: "SyntaxError", EValue: res.Errors[0].Text, Traceback: tb}
}

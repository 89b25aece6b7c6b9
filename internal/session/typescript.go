package session

import (
	"fmt"

	esbuild "github.com/evanw/esbuild/pkg/api"

	"github.com/cellbox/cellbox/api"
)

// TypeScript runs in the JavaScript kernel: the server strips its types with esbuild (a
// parser in Go, so the guest stays small and no runtime needs a transpiler), keeping what
// a cell means on its own: imports it does not use stay (a later cell may), top-level await
// stays, and nothing is bundled or minified.

// fromTypeScript turns a TypeScript cell of req into the JavaScript that runs it; a syntax
// error is returned as the cell's error output.
func fromTypeScript(req *api.ExecuteRequest) *api.Output {
	if req.Language != api.LanguageTypeScript {
		return nil
	}
	js, bad := stripTypes(req.Code)
	if bad != nil {
		return bad
	}
	req.Code, req.Language = js, api.LanguageJavaScript
	return nil
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

// syntaxResult is the result of a cell that could not run: its error output.
func syntaxResult(bad *api.Output, count int) *api.ExecuteResult {
	return &api.ExecuteResult{Status: api.StatusError, ExecutionCount: count, Outputs: []api.Output{*bad}, Files: []api.FileChange{}}
}

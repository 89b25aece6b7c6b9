package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

func TestStripTypes(t *testing.T) {
	cases := []struct{ ts, has, hasNot string }{
		{"interface P { n: number }\nconst p: P = {n: 3}\np.n", "const p = { n: 3 }", "interface"},
		{"const sq = (v: number): number => v * v", "(v) => v * v", ": number"},
		{"import path from 'node:path'", "import path from", ""},                        // unused here, used by a later cell
		{"import type { X } from './x'\nconst y = await f<X>()", "await f()", "import"}, // top-level await stays
		{"enum Color { Red }\nColor.Red", "var Color", "enum"},
	}
	for _, c := range cases {
		js, bad := stripTypes(c.ts)
		if bad != nil || !strings.Contains(js, c.has) || (c.hasNot != "" && strings.Contains(js, c.hasNot)) {
			t.Errorf("%q: %q, %+v; want it to hold %q and not %q", c.ts, js, bad, c.has, c.hasNot)
		}
	}
	_, bad := stripTypes("const n: number = ;")
	if bad == nil || bad.Type != api.OutputError || bad.EName != "SyntaxError" || !strings.Contains(bad.Traceback[0], "cell.ts:1:") {
		t.Errorf("syntax error: %+v", bad)
	}
	req := api.ExecuteRequest{Code: "let x: string = 'a'", Language: api.LanguageTypeScript}
	if res, err := fromTypeScript(context.Background(), &req, 3, nil); res != nil || err != nil || req.Language != api.LanguageJavaScript || strings.Contains(req.Code, "string") {
		t.Errorf("fromTypeScript: %+v %+v %v", req, res, err)
	}
	// A cell too large for the server's parser is refused before it parses.
	big := api.ExecuteRequest{Code: strings.Repeat("const a: number = 1;\n", 7000), Language: api.LanguageTypeScript}
	if _, err := fromTypeScript(context.Background(), &big, 3, nil); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "128 KiB") {
		t.Errorf("a %d-byte TypeScript cell: %v", len(big.Code), err)
	}
	// Deep nesting is bounded by the size: no stack to exhaust.
	if _, bad := stripTypes(strings.Repeat("(", maxTypeScript)); bad == nil {
		t.Error("128 Ki open parentheses stripped without a syntax error")
	}
}

func FuzzStripTypes(f *testing.F) {
	f.Add("const x: number = 1")
	f.Add("class A<T> { constructor(private x: T) {} }")
	f.Add("import x = require('y')")
	f.Fuzz(func(t *testing.T, code string) {
		js, bad := stripTypes(code)
		if bad != nil {
			if bad.Type != api.OutputError || bad.EName != "SyntaxError" || len(bad.Traceback) == 0 {
				t.Fatalf("%q: a refusal that says nothing: %+v", code, bad)
			}
			return
		}
		// What it made is code it reads again.
		if _, again := stripTypes(js); again != nil {
			t.Fatalf("%q became %q, which does not read: %+v", code, js, again)
		}
	})
}

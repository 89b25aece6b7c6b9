// Package runners carries the kernel runners of the languages other than Python: a
// JavaScript runner (runner.js) that Node.js runs, an R runner (runner.R) that Rscript
// runs, and a Bash runner (runner.sh) that an interactive bash loads. Each speaks the guest's line protocol, the one Python's runner
// speaks (package pyrunner), or the part of it its language needs.
//
// The guest passes a runner in the environment variable Env; no file is written.
// Not for: starting kernels or the guest's side of the protocol (package guest).
package runners

import (
	_ "embed"
	"strings"
)

// Env is the environment variable that carries a runner's script to its bootstrap.
const Env = "CELLBOX_RUNNER"

// JavaScript is the JavaScript runner: a function expression of (require, dynamicImport).
//
//go:embed runner.js
var JavaScript string

// JavaScriptBootstrap is node's -e script: it runs the runner from Env, after removing it
// from the environment, with an import() compiled by node's own loader.
const JavaScriptBootstrap = `const s = process.env.` + Env + `; delete process.env.` + Env +
	`; require("vm").runInThisContext(s, {filename: "<cellbox-runner>"})(require, (m) => import(m))`

// Bash is the Bash runner, which the first line the guest writes loads.
//
//go:embed runner.sh
var Bash string

// BashLoad is the first line the guest writes to a Bash kernel.
const BashLoad = `eval "$` + Env + `"; unset ` + Env + "\n"

// BashCell is the line that runs a cell in a Bash kernel: code, and env (name, value
// pairs) exported for it; quiet cells are not counted. Nothing in code can end the line
// early: every byte is quoted. Code must hold no NUL byte, which no shell string can.
func BashCell(code string, quiet bool, env map[string]string) string {
	var b strings.Builder
	b.WriteString("__cellbox_cell ")
	if quiet {
		b.WriteString("1 ")
	} else {
		b.WriteString("0 ")
	}
	quote(&b, code)
	for k, v := range env {
		b.WriteByte(' ')
		quote(&b, k)
		b.WriteByte(' ')
		quote(&b, v)
	}
	b.WriteByte('\n')
	return b.String()
}

// quote writes s as bash's ANSI-C quoted string $'...': a backslash and a quote escaped,
// every byte but printable ASCII as \xHH (two digits: a digit after it is not read into it).
func quote(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			b.WriteString(`\x`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
}

// R is the R runner.
//
//go:embed runner.R
var R string

// RBootstrap is Rscript's -e expression: it runs the runner from Env, after removing it from
// the environment.
const RBootstrap = `local({s <- Sys.getenv("` + Env + `"); Sys.unsetenv("` + Env + `"); eval(parse(text = s, keep.source = FALSE))})`

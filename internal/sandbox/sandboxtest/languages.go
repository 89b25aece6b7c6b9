package sandboxtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/testbin"
)

// langCase is the kernel contract in one language: each field is code that does one thing
// of it, in that language. GUEST in code stands for the guest's pid.
type langCase struct {
	lang string
	set  string // sets x to 41
	get  string // prints x + 1 (42)
	fail string // raises an error
	loop string // runs forever
	big  string // prints 3 MiB
	bomb string // allocates without end
	kill string // sends SIGKILL to GUEST: prints "done" or "refused"
	peek string // reads GUEST's environment: prints "done" or "refused"
}

var langCases = []langCase{
	{lang: api.LanguageJavaScript, set: "const x = 41", get: "console.log(x + 1)", fail: "null.x", loop: "while (true) {}",
		big:  "console.log('x'.repeat(3 << 20))",
		bomb: "const a = []; while (true) a.push(Buffer.alloc(16 << 20, 1))",
		kill: "try { process.kill(GUEST, 'SIGKILL'); console.log('done') } catch (e) { console.log('refused') }",
		peek: "try { require('fs').readFileSync('/proc/GUEST/environ'); console.log('done') } catch (e) { console.log('refused') }"},
	{lang: api.LanguageR, set: "x <- 41", get: "cat(x + 1, '\\n')", fail: "stop('boom')", loop: "repeat {}",
		big:  "cat(strrep('x', 3 * 2^20), '\\n')",
		bomb: "a <- list(); repeat a[[length(a) + 1]] <- rep(1, 2e6)",
		kill: "if (tools::pskill(GUEST, tools::SIGKILL)) cat('done\\n') else cat('refused\\n')",
		peek: "r <- tryCatch({ readBin('/proc/GUEST/environ', 'raw', 100); 'done' }, error = function(e) 'refused', warning = function(w) 'refused'); cat(r, '\\n')"},
	{lang: api.LanguageBash, set: "x=41", get: "echo $((x + 1))", fail: "false", loop: "while :; do :; done",
		big:  "head -c 3145728 /dev/zero | tr '\\0' x; echo",
		bomb: "v=x; while :; do v=$v$v; done",
		kill: "kill -9 GUEST 2>/dev/null && echo done || echo refused",
		peek: "cat /proc/GUEST/environ >/dev/null 2>&1 && echo done || echo refused"},
}

// RunLanguages runs the kernel contract in every language beside Python (TypeScript is the
// server's, which strips its types: JavaScript here), each in its own kernel of one sandbox: state, errors, interrupts at a timeout, output caps, the memory
// limit, a fork bomb, and the guest out of reach of each. The sandbox's root must have the
// runtimes (the default image has them; on the host's root, install-deps installs them).
// Without contract, only state in each language: what a root filesystem changes (where the
// runtimes and their files are), for a backend whose contract another root already ran.
func RunLanguages(t *testing.T, b sandbox.Backend, contract bool) {
	l := limits
	l.MemoryMB, l.Pids = 384, 128
	x := start(t, b, l)
	if r := x.command(t, "sh", "-c", "command -v node && command -v Rscript && test -e /usr/share/nodejs/acorn"); r.ExitCode != 0 {
		testbin.Missing(t, "the sandbox's root has no node, acorn or Rscript (install nodejs node-acorn r-base-core r-cran-jsonlite r-cran-repr): %s", r.Stdout+r.Stderr)
	}
	guest := fmt.Sprint(x.c.Hello().PID)
	run := func(t *testing.T, lang, code string, timeoutS float64) *api.ExecuteResult {
		t.Helper()
		r, err := x.c.Execute(ctxT(t, time.Duration(timeoutS+60)*time.Second),
			api.ExecuteRequest{Language: lang, Code: strings.ReplaceAll(code, "GUEST", guest), TimeoutS: timeoutS}, nil)
		if err != nil {
			t.Fatalf("%s %q: %v", lang, code, err)
		}
		return r
	}
	for _, c := range langCases {
		t.Run(c.lang, func(t *testing.T) {
			if r := run(t, c.lang, c.set, 30); r.Status != api.StatusOK {
				t.Fatalf("set: %+v", r)
			}
			if r := run(t, c.lang, c.get, 30); strings.TrimSpace(stdout(r)) != "42" {
				t.Fatalf("state: %+v", r)
			}
			if !contract {
				return
			}
			r := run(t, c.lang, c.fail, 30)
			if r.Status != api.StatusError || len(r.Outputs) == 0 || r.Outputs[len(r.Outputs)-1].Type != api.OutputError {
				t.Errorf("error: %+v", r)
			}
			if r := run(t, c.lang, c.loop, 1); r.Status != api.StatusTimeout || r.KernelRestarted {
				t.Errorf("timeout: status %s (%s), kernel restarted %v", r.Status, r.Message, r.KernelRestarted)
			}
			if r := run(t, c.lang, c.get, 30); strings.TrimSpace(stdout(r)) != "42" {
				t.Errorf("state after the interrupt: %+v", r)
			}
			if r := run(t, c.lang, c.big, 30); !r.Truncated || len(stdout(r)) > 1<<20+1024 {
				t.Errorf("output cap: truncated %v, %d bytes", r.Truncated, len(stdout(r)))
			}
			for _, attack := range []string{c.kill, c.peek} {
				if attack == "" {
					continue
				}
				if got := strings.TrimSpace(stdout(run(t, c.lang, attack, 30))); got != "refused" {
					t.Errorf("%s from %s: %q, want refused", attack, c.lang, got)
				}
			}
			if c.bomb == "" {
				return
			}
			r = run(t, c.lang, c.bomb, 60)
			want := api.StatusOOM
			if !b.Capabilities().OOMReported {
				want = api.StatusCrashed
			}
			if r.Status != want || !r.KernelRestarted {
				t.Errorf("memory bomb: status %s (%s), want %s", r.Status, r.Message, want)
			}
			if r := run(t, c.lang, c.set+"\n"+c.get, 30); strings.TrimSpace(stdout(r)) != "42" {
				t.Errorf("after the memory bomb: %+v", r)
			}
		})
	}
	if !contract {
		return
	}
	t.Run("fork_bomb", func(t *testing.T) {
		// Its processes outlive the cell, as a cell's background jobs do, and hold the
		// sandbox at its limit; a restart of the kernels ends them all.
		r := run(t, api.LanguageBash, ":(){ :|:& };:; sleep 3", 5)
		t.Logf("fork bomb: status %s (%s)", r.Status, r.Message)
		if err := x.c.Restart(ctxT(t, 60*time.Second)); err != nil {
			t.Fatalf("restart after the fork bomb: %v", err)
		}
		for _, c := range langCases {
			if r := run(t, c.lang, c.set+"\n"+c.get, 30); strings.TrimSpace(stdout(r)) != "42" {
				t.Errorf("%s after the fork bomb: %+v", c.lang, r)
			}
		}
		if got := x.run(t, "print(1 + 1, end='')"); got != "2" {
			t.Errorf("Python after the fork bomb: %q", got)
		}
	})
	if h := x.c.Hello(); fmt.Sprint(h.PID) != guest {
		t.Errorf("the guest changed: pid %d, was %s", h.PID, guest)
	}
}

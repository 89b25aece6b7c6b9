package guest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guest/runners"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// langRuntime is how a language other than Python runs: the program its kernel is, and the
// runner that program runs.
type langRuntime struct {
	name    string // for messages: "JavaScript"
	program string
	args    []string // after the program's name
	script  string   // the runner, passed in runners.Env
	// shell: the runner is an interactive shell that reads its command lines on its
	// standard input (runners.BashCell), not JSON on descriptor 3.
	shell bool
	// packages: the Debian packages that provide program and what the runner needs.
	packages string
}

// runtimes are the languages with a runtime of their own. TypeScript comes as JavaScript:
// the server strips its types.
var runtimes = map[string]*langRuntime{
	api.LanguageJavaScript: {name: "JavaScript", program: "node",
		args: []string{"--no-deprecation", "-e", runners.JavaScriptBootstrap}, script: runners.JavaScript,
		packages: "nodejs node-acorn"},
	api.LanguageR: {name: "R", program: "Rscript",
		args: []string{"--no-init-file", "-e", runners.RBootstrap}, script: runners.R,
		packages: "r-base-core r-cran-jsonlite r-cran-repr"},
	api.LanguageBash: {name: "Bash", program: "bash",
		args: []string{"--noprofile", "--norc", "--noediting", "+m", "-i"}, script: runners.Bash, shell: true,
		packages: "bash"},
}

// kernelLanguage is the language whose kernel runs a cell of lang ("" for Python's).
func kernelLanguage(lang string) (string, *langRuntime, error) {
	switch lang {
	case "", api.LanguagePython:
		return "", nil, nil
	}
	rt := runtimes[lang]
	if rt == nil {
		return "", nil, fmt.Errorf("this sandbox's guest has no kernel for language %q: %w", lang, errdefs.ErrInvalidArgument)
	}
	return lang, rt, nil
}

// missingRuntime says that an image lacks a language's program, and which packages add it.
func missingRuntime(rt *langRuntime, image string) error {
	where := "the host's root filesystem"
	if image != "" {
		where = "image " + strconv.Quote(image)
	}
	return fmt.Errorf("%s has no %s: %q was not found; add the Debian packages %q to the image's package list and build it again (cellbox image build): %w",
		where, rt.name, rt.program, rt.packages, errdefs.ErrFailedPrecondition)
}

// langKey names a kernel of a language other than Python: one per execution context.
type langKey struct{ lang, ctx string }

// langKernel is a kernel of a language other than Python, started at its first cell.
type langKernel struct {
	k     *kernel
	count int // its execution count after its latest cell
}

// unrunnable is the error output of a cell rt cannot run (nil: it can): a shell's must hold
// no NUL byte.
func unrunnable(rt *langRuntime, code string) *api.Output {
	if rt.shell && strings.IndexByte(code, 0) >= 0 {
		return &api.Output{Type: api.OutputError, EName: "SyntaxError", EValue: "a shell cell cannot hold a NUL byte",
			Traceback: []string{"SyntaxError: a shell cell cannot hold a NUL byte"}}
	}
	return nil
}

// pythonKernelLocked returns the Python kernel, started anew if it has stopped (with a note
// for the cell's result). The caller holds kmu.
func (s *server) pythonKernelLocked() (*kernel, string, error) {
	k := s.currentKernel()
	if k != nil && !k.isDead() {
		return k, "", nil
	}
	if err := s.restartLocked(false); err != nil {
		return nil, "", err
	}
	note := ""
	if k != nil {
		note = "The kernel had stopped since the last cell and was restarted before this one; variables were lost, files in /mnt/data are kept."
	}
	return s.currentKernel(), note, nil
}

// langKernelLocked returns the kernel of key, started if it is not running. The caller
// holds kmu.
func (s *server) langKernelLocked(cfg *guestproto.Config, key langKey, rt *langRuntime) (*langKernel, string, error) {
	s.mu.Lock()
	lk := s.langs[key]
	s.mu.Unlock()
	if lk != nil && !lk.k.isDead() {
		return lk, "", nil
	}
	note := ""
	if lk != nil {
		s.dropLangKernel(key, lk)
		note = "The " + rt.name + " kernel had stopped since the last cell and was started again before this one; its variables were lost, files in /mnt/data are kept."
	} else if key.ctx != "" {
		if err := s.contextsFull(); err != nil {
			return nil, "", err
		}
	}
	spec := s.kernelSpec(cfg)
	spec.rt, spec.image = rt, cfg.Image
	k, err := startKernel(spec)
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		return nil, "", err
	}
	if err != nil {
		return nil, "", kernelStartError(err)
	}
	// The runner answers a ping once it reads its commands.
	r := newRun("", true, startTimeout, 0, nil)
	r.op, r.startup = "ping", true
	k.begin(r)
	<-r.done
	if r.died || !r.ok {
		k.kill()
		return nil, "", fmt.Errorf("the %s kernel did not start: %s: %w", rt.name, notStarted(r, startTimeout), errdefs.ErrUnavailable)
	}
	lk = &langKernel{k: k}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		k.kill()
		return nil, "", fmt.Errorf("%w: %w", errClosing, errdefs.ErrUnavailable)
	}
	if s.langs == nil {
		s.langs = map[langKey]*langKernel{}
	}
	s.langs[key] = lk
	s.mu.Unlock()
	return lk, note, nil
}

// contextsFull refuses a new named context when the session holds MaxContexts of them, of
// every language: Python's namespaces and the other languages' kernels. The caller holds
// kmu.
func (s *server) contextsFull() error {
	s.mu.Lock()
	n := len(s.ctxs)
	for key := range s.langs {
		if key.ctx != "" {
			n++
		}
	}
	s.mu.Unlock()
	if n < guestproto.MaxContexts {
		return nil
	}
	return fmt.Errorf("this session has %d execution contexts, the most it keeps: delete one you no longer need, or restart the kernel: %w",
		guestproto.MaxContexts, errdefs.ErrResourceExhausted)
}

// dropLangKernel kills lk, the kernel of key, and forgets it.
func (s *server) dropLangKernel(key langKey, lk *langKernel) {
	s.mu.Lock()
	if s.langs[key] == lk {
		delete(s.langs, key)
	}
	s.mu.Unlock()
	lk.k.kill()
}

// dropLangKernels kills the kernels of other languages (of context ctx only, unless all)
// and reports whether there were any. The caller holds kmu.
func (s *server) dropLangKernels(ctx string, all bool) bool {
	s.mu.Lock()
	var drop []*langKernel
	for key, lk := range s.langs {
		if all || key.ctx == ctx {
			drop = append(drop, lk)
			delete(s.langs, key)
		}
	}
	s.mu.Unlock()
	for _, lk := range drop {
		lk.k.killLater()
	}
	return len(drop) > 0
}

func (s *server) hasLangKernels() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.langs) > 0
}

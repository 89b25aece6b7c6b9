// Package pyrunner carries the Python kernel runner: a small script that drives an IPython
// InteractiveShell and speaks the guest's line protocol over file descriptors 3 and 4; the
// template script, a prepared runner whose forks become kernels (see template.py); and
// module cellbox (cellbox.py), which the runner makes importable in every kernel: the
// tools a model can call, made from the kernel's functions (`from cellbox import tool`).
//
// The guest starts a kernel as `python -c Bootstrap` with Script in the environment
// variable Env; no file is written. Package template starts a template as
// `python -c TemplateBootstrap` with Template in TemplateScriptEnv and Script in Env.
// Not for: the guest's side of that protocol (package guest), or starting a template
// (package template).
package pyrunner

import (
	_ "embed"
	"encoding/json"
	"fmt"

	"github.com/cellbox/cellbox/internal/guestproto"
)

//go:embed runner.py
var runner string

// Cellbox is the source of module cellbox.
//
//go:embed cellbox.py
var Cellbox string

// Script is the runner's source: runner.py, after lines that give it Cellbox as
// CELLBOX_MODULE (a JSON string is a Python string literal) and the bounds of a tool report
// (guestproto), which it enforces whatever the module, which user code can change, reports,
// and of a completion and a user expression's answer.
var Script = "CELLBOX_MODULE = " + pyString(Cellbox) + "\n" +
	fmt.Sprintf("TOOLS_MAX = %d\nTOOL_REPORT_MAX = %d\nCOMPLETIONS_MAX = %d\nUX_MAX = %d\n",
		guestproto.MaxTools, guestproto.MaxToolReport, guestproto.MaxCompletions, 256<<10) + runner

func pyString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Template is the template's source.
//
//go:embed template.py
var Template string

// Env is the environment variable that carries Script to Bootstrap.
const Env = "CELLBOX_RUNNER"

// Bootstrap runs the script from Env after removing it from the environment.
const Bootstrap = `import os; exec(compile(os.environ.pop("` + Env + `"), "<cellbox-runner>", "exec"))`

// Template's environment: its script, and its configuration (JSON).
const (
	TemplateScriptEnv = "CELLBOX_TEMPLATE_SCRIPT"
	TemplateConfigEnv = "CELLBOX_TEMPLATE"
)

// TemplateBootstrap runs the template script from TemplateScriptEnv.
const TemplateBootstrap = `import os; exec(compile(os.environ.pop("` + TemplateScriptEnv + `"), "<cellbox-template>", "exec"))`

// KernelTmp is the kernel's private folder in a sandbox (its IPYTHONDIR and MPLCONFIGDIR
// are below it): the same path in every sandbox and in a template, whose IPython and
// matplotlib keep the paths they started with.
const KernelTmp = "/tmp/cellbox-kernel"

// KernelEnv is the environment a kernel starts with beside the guest's own, below tmp
// (KernelTmp, or a private folder where the guest is not a sandbox's process 1).
func KernelEnv(tmp string) map[string]string {
	return map[string]string{
		"IPYTHONDIR":              tmp + "/ipython",
		"MPLCONFIGDIR":            tmp + "/matplotlib",
		"MPLBACKEND":              "module://matplotlib_inline.backend_inline",
		"PYTHONDONTWRITEBYTECODE": "1", // no __pycache__ folders among the user's files
		// One BLAS thread, unless a session's env says otherwise: a template must not have
		// threads when it forks, and a sandbox has about a core.
		"OPENBLAS_NUM_THREADS": "1",
	}
}

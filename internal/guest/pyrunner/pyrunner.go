// Package pyrunner carries the Python kernel runner: a small script that drives an IPython
// InteractiveShell and speaks the guest's line protocol over file descriptors 3 and 4.
//
// The guest starts it as `python -c Bootstrap` with Script in the environment variable Env;
// no file is written. Not for: the guest's side of that protocol (package guest).
package pyrunner

import _ "embed"

// Script is the runner's source.
//
//go:embed runner.py
var Script string

// Env is the environment variable that carries Script to Bootstrap.
const Env = "CELLBOX_RUNNER"

// Bootstrap runs the script from Env after removing it from the environment.
const Bootstrap = `import os; exec(compile(os.environ.pop("` + Env + `"), "<cellbox-runner>", "exec"))`

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cellbox/cellbox/api"
)

func init() {
	register("run", "run code once in a fresh sandbox, streaming its output and saving its plots and files", runMain)
}

func runMain(args []string) int {
	f := newFlags("run", "cellbox run [flags] (-c CODE | FILE | -)\n       cellbox run [flags] NOTEBOOK.ipynb [-p NAME VALUE]... [-o OUT.ipynb]")
	var code, out string
	var allowErrors bool
	f.fs.StringVar(&code, "c", "", "the code to run")
	f.fs.StringVar(&out, "o", "", "a notebook's output `file` (default: NOTEBOOK.out.ipynb beside it; never the notebook itself)")
	f.fs.Func("p", "set a notebook's parameter `NAME VALUE`, as papermill does (repeatable): a JSON number, true, false, null or \"quoted string\" is that value, anything else a string", func(string) error {
		return errors.New("give -p NAME VALUE, as two arguments")
	})
	f.fs.BoolVar(&allowErrors, "allow-errors", false, "a notebook's run goes on past a cell that raised or timed out (the exit status still says it failed)")
	f.own = append([]string{"c", "p", "o", "allow-errors"}, f.own...)
	args, params, err := cutParams(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cellbox run: %v\n", err)
		return exitUsage
	}
	if rc := f.parse(args); rc >= 0 {
		return rc
	}
	// Flags may follow FILE too: cellbox run plot.py --out plots.
	var pos []string
	for f.fs.NArg() > 0 {
		pos = append(pos, f.fs.Arg(0))
		if err := f.fs.Parse(f.fs.Args()[1:]); err != nil {
			return exitUsage
		}
	}
	notebook := code == "" && len(pos) == 1 && isNotebook(pos[0])
	if !notebook && (params != nil || out != "" || allowErrors) {
		fmt.Fprintln(os.Stderr, "cellbox run: -p, -o and --allow-errors are for notebooks: give a FILE ending in .ipynb")
		return exitUsage
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sig := watchSignals(cancel)
	defer sig.stop()
	if notebook {
		if out, err = notebookOut(pos[0], out); err != nil {
			fmt.Fprintf(os.Stderr, "cellbox run: %v\n", err)
			return exitUsage
		}
		return runNotebook(ctx, f, sig, pos[0], out, api.NotebookRequest{Parameters: params, CellTimeoutS: f.timeout.Seconds(), AllowErrors: allowErrors})
	}
	src, err := readCode(code, pos)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cellbox run: %v\n", err)
		f.fs.Usage()
		return exitUsage
	}
	s, end, err := f.start(ctx, sig)
	if err != nil {
		return failed(ctx, err)
	}
	defer end()
	res, err := s.run(ctx, src, f.timeout.Seconds())
	if err != nil {
		return failed(ctx, err)
	}
	if res.Status == api.StatusError {
		fmt.Fprintln(os.Stderr, "cellbox: the code raised an exception (status error)")
	}
	return exitCode(res.Status)
}

// failed reports an error of cellbox itself (or Ctrl-C before the code ran).
func failed(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "cellbox: canceled")
		return exitInterrupted
	}
	if errors.Is(err, errAbandoned) {
		fmt.Fprintf(os.Stderr, "cellbox: %v\n", err)
		return exitInterrupted
	}
	fmt.Fprintf(os.Stderr, "cellbox: %v\n", err)
	return exitService
}

// readCode returns the code of -c, of FILE, or of stdin for "-".
func readCode(code string, args []string) (string, error) {
	switch {
	case code != "" && len(args) > 0:
		return "", errors.New("give the code with -c or as FILE, not both")
	case code != "":
		return code, nil
	case len(args) != 1:
		return "", errors.New("give the code: -c CODE, a FILE, or - for standard input")
	case args[0] == "-":
		b, err := io.ReadAll(os.Stdin)
		return string(b), err
	}
	b, err := os.ReadFile(args[0])
	return string(b), err
}

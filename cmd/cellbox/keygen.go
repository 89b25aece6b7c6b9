package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cellbox/cellbox/internal/auth"
)

func init() {
	register("keygen", "print a new random API key (for CELLBOX_API_KEYS or an --api-keys file)", keygenMain)
}

func keygenMain(args []string) int {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	e2b := fs.Bool("e2b", false, "E2B's shape: e2b_ and 40 hex digits (default: cbx_ and 40 hex digits)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "cellbox keygen: no arguments; see cellbox keygen -h")
		return exitUsage
	}
	prefix := "cbx_"
	if *e2b {
		prefix = "e2b_"
	}
	fmt.Println(auth.NewKey(prefix))
	return 0
}

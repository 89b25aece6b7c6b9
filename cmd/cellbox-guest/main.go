// Command cellbox-guest is the part of cellbox that runs inside each sandbox, alone: the
// guest (`guest`) and a kernel template's start (`template-init`), with the arguments the
// backends give `cellbox` for them. It links none of the server's packages, so a guest
// keeps ~2 MiB less private memory (see internal/guestbin). scripts/build.sh attaches it
// to cellbox's binary (`attach GUEST EXE`), which writes it out and runs it.
package main

import (
	"fmt"
	"os"

	"github.com/cellbox/cellbox/internal/guest"
	"github.com/cellbox/cellbox/internal/guestbin"
	"github.com/cellbox/cellbox/internal/sandbox/runc/template/tinit"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cellbox-guest guest|template-init [flags] (started by cellbox, not by hand), or cellbox-guest attach GUEST EXE")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "guest":
		os.Exit(guest.Main(os.Args[2:]))
	case "template-init":
		os.Exit(tinit.Main(os.Args[2:]))
	case "attach":
		if len(os.Args) != 4 {
			fmt.Fprintln(os.Stderr, "usage: cellbox-guest attach GUEST EXE")
			os.Exit(2)
		}
		if err := guestbin.Attach(os.Args[3], os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "cellbox-guest attach:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "cellbox-guest: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

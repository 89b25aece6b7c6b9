package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/tool"
)

func init() {
	register("image", "build, list and remove sandbox images made from package lists (build, ls, rm, dockerfile)", imageMain)
}

const imageUsage = `usage: cellbox image <build|ls|rm|dockerfile> [flags]

  build [NAME] [--file LIST]   build the image NAME (default: "default", from cellbox's own list) from
                               its package list; cached: the same list is built once
  ls                           the images built on this machine
  rm NAME                      remove every build of NAME
  dockerfile [NAME] [--file LIST]
                               a Dockerfile of the same packages (for machines that can pull debian:*-slim)

Flags of each: --state-dir (images live in <state-dir>/images), build: --mirror (a Debian archive; default: this machine's apt's).`

func imageMain(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, imageUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("image "+sub, flag.ContinueOnError)
	stateDir := fs.String("state-dir", config.Default().StateDir, "the server's state dir: images are kept in its images/ folder")
	file := fs.String("file", "", "the image's package list (default: the list the image was built from; for default, cellbox's own)")
	mirror := fs.String("mirror", "", "the Debian archive to build from (default: the one this machine's apt uses for the list's suite, else "+image.DefaultMirror+")")
	if err := fs.Parse(reorder(args)); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return exitUsage
	}
	store := image.NewStore(filepath.Join(*stateDir, "images"), *mirror)
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "cellbox image %s: %v\n", sub, err)
		return 1
	}
	name := image.DefaultName
	if fs.NArg() > 1 {
		fmt.Fprintf(os.Stderr, "cellbox image %s: one image name at most\n%s\n", sub, imageUsage)
		return exitUsage
	}
	if fs.NArg() == 1 {
		name = fs.Arg(0)
	}
	switch sub {
	case "build":
		spec, err := imageSpec(store, name, *file)
		if err != nil {
			return fail(err)
		}
		if *mirror == "" {
			*mirror = image.HostMirror("/", spec.Suite)
		}
		store = image.NewStore(filepath.Join(*stateDir, "images"), *mirror)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		start := time.Now()
		fmt.Fprintf(os.Stderr, "image %s: %d packages listed, Debian %s from %s\n", name, len(spec.Debian)+len(spec.Pip), spec.Suite, *mirror)
		im, cached, err := store.Build(ctx, spec, progressPrinter(os.Stderr))
		if err != nil {
			return fail(err)
		}
		how := fmt.Sprintf("built in %s", time.Since(start).Round(time.Second))
		if cached {
			how = "already built from this list"
		}
		fmt.Fprintf(os.Stderr, "\nimage %s: %s, %s\n", name, how, tool.Size(im.SizeBytes))
		fmt.Println(im.Root)
	case "ls":
		list, err := store.List()
		if err != nil {
			return fail(err)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tHASH\tSUITE\tPACKAGES\tSIZE\tBUILT")
		for _, im := range list {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", im.Name, im.Hash, im.Suite, im.Packages, tool.Size(im.SizeBytes), im.BuiltAt.Local().Format("2006-01-02 15:04"))
		}
		w.Flush()
	case "rm":
		if fs.NArg() != 1 {
			fmt.Fprintf(os.Stderr, "cellbox image rm: name the image\n")
			return exitUsage
		}
		if err := store.Remove(name); err != nil {
			return fail(err)
		}
		fmt.Fprintf(os.Stderr, "image %s removed\n", name)
	case "dockerfile":
		spec, err := imageSpec(store, name, *file)
		if err != nil {
			return fail(err)
		}
		fmt.Print(spec.Dockerfile())
	default:
		fmt.Fprintf(os.Stderr, "cellbox image: unknown command %q\n%s\n", sub, imageUsage)
		return exitUsage
	}
	return 0
}

// imageSpec is the list of image name: from file, else the one it was built from, else
// (for default) cellbox's own.
func imageSpec(store *image.Store, name, file string) (*image.Spec, error) {
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return image.Parse(name, f)
	}
	if name == image.DefaultName {
		return image.Default(), nil
	}
	im, err := store.Get(name)
	if err != nil {
		return nil, fmt.Errorf("%w (or give its list with --file)", err)
	}
	f, err := os.Open(filepath.Join(filepath.Dir(im.Root), "list"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return image.Parse(name, f)
}

// progressPrinter shows a build's stages, package counts and downloaded bytes: on a
// terminal on one line that it rewrites, in a log a line at a time.
func progressPrinter(w io.Writer) func(image.Progress) {
	f, ok := w.(*os.File)
	tty := ok && isTerminal(f)
	var last time.Time
	stage := ""
	return func(p image.Progress) {
		// On a terminal one line, redrawn at most five times a second; in a log, a line a
		// stage and one every ten seconds.
		every := 200 * time.Millisecond
		if !tty {
			every = 10 * time.Second
		}
		if p.Stage == stage && time.Since(last) < every {
			return
		}
		stage, last = p.Stage, time.Now()
		line := p.Stage + "…"
		if p.Count > 0 {
			line = fmt.Sprintf("%s: %d packages (%s)", p.Stage, p.Count, p.Name)
		}
		if p.Bytes > 0 {
			line += fmt.Sprintf(", %.1f MB", float64(p.Bytes)/1e6)
		}
		if tty {
			fmt.Fprintf(w, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(w, line)
		}
	}
}

// reorder puts flags before the positional arguments, so that `build NAME --file X` works
// as `build --file X NAME` does.
func reorder(args []string) []string {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			rest = append(rest, args[i+1:]...)
			i = len(args)
		case len(a) > 1 && a[0] == '-':
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) { // every flag of image takes a value
				flags = append(flags, args[i+1])
				i++
			}
		default:
			rest = append(rest, a)
		}
	}
	return append(flags, rest...)
}

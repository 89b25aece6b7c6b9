package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cellbox/cellbox/client"
)

func init() {
	register("repl", "an interactive Python session in a sandbox, in this terminal", replMain)
}

// replMain reads cells from standard input and runs them in one session, so state is kept
// between them. A cell is one line, unless that line ends with ':' or '\', or leaves a
// bracket or a triple-quoted string open: then it goes on, and a line ending with ':'
// makes it go on until an empty line. Ctrl-C interrupts a running cell and clears the
// input at the prompt; Ctrl-D (end of input) runs what was typed, then ends the session.
// On a terminal it prompts like IPython ("In [1]: "); reading a pipe it prints only what
// the code does.
func replMain(args []string) int {
	f := newFlags("repl", "cellbox repl [flags]")
	if rc := f.parse(args); rc >= 0 {
		return rc
	}
	if f.fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cellbox repl: unexpected argument %q\n", f.fs.Arg(0))
		return exitUsage
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sig := watchSignals(cancel)
	defer sig.stop()
	s, end, err := f.start(ctx, sig)
	if err != nil {
		return failed(ctx, err)
	}
	defer end()
	s.prompts = isTerminal(os.Stdin)
	return repl(ctx, s, os.Stdin, f.timeout.Seconds())
}

func repl(ctx context.Context, s *session, in io.Reader, timeout float64) int {
	lines := readLines(in)
	cleared := make(chan struct{}, 1)
	defer s.sig.handle(func() {
		select {
		case cleared <- struct{}{}:
		default:
		}
	})()
	var block []string
	for {
		if s.prompts {
			if len(block) == 0 {
				fmt.Fprintf(s.stdout, "\nIn [%d]: ", s.count+1)
			} else {
				fmt.Fprintf(s.stdout, "%*s: ", len(fmt.Sprint(s.count+1))+5, "...")
			}
		}
		var line string
		var ok bool
		select {
		case <-ctx.Done():
			return exitInterrupted
		case <-cleared:
			block = nil
			if s.prompts {
				fmt.Fprintln(s.stdout, "\nKeyboardInterrupt")
			}
			continue
		case line, ok = <-lines:
		}
		if ok {
			block = append(block, line)
			if len(block) == 1 && strings.TrimSpace(line) == "" {
				block = nil
				continue
			}
			if !complete(block) {
				continue
			}
		}
		if code := strings.Join(block, "\n"); strings.TrimSpace(code) != "" {
			if _, err := s.run(ctx, code, timeout); err != nil {
				if ctx.Err() != nil || client.IsNotFound(err) { // the session is gone
					return failed(ctx, err)
				}
				fmt.Fprintf(s.stderr, "cellbox: %v\n", err)
			}
		}
		block = nil
		if !ok {
			if s.prompts {
				fmt.Fprintln(s.stdout)
			}
			return exitOK
		}
	}
}

// readLines sends the lines of r (without their newline) until its end, then closes.
func readLines(r io.Reader) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if line != "" || err == nil {
				ch <- strings.TrimRight(line, "\r\n")
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// complete reports whether a block of lines is a whole cell (see replMain).
func complete(block []string) bool {
	last := block[len(block)-1]
	depth, inTriple := scanPython(strings.Join(block, "\n"))
	if depth > 0 || inTriple {
		return false
	}
	t := strings.TrimRight(last, " \t")
	if strings.HasSuffix(t, ":") || strings.HasSuffix(t, `\`) {
		return false
	}
	for _, l := range block[:len(block)-1] {
		if strings.HasSuffix(strings.TrimRight(stripComment(l), " \t"), ":") {
			return strings.TrimSpace(last) == "" // an indented block ends at an empty line
		}
	}
	return true
}

// scanPython returns how many brackets src leaves open and whether it ends inside a
// triple-quoted string. Strings and comments are skipped; it is a heuristic, not a parser.
func scanPython(src string) (depth int, inTriple bool) {
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case '\'', '"':
			q := string(c)
			if strings.HasPrefix(src[i:], q+q+q) {
				end := strings.Index(src[i+3:], q+q+q)
				if end < 0 {
					return depth, true
				}
				i += 3 + end + 2
				continue
			}
			for i++; i < len(src) && src[i] != c && src[i] != '\n'; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		}
	}
	return depth, false
}

// stripComment drops a trailing # comment (outside strings, roughly) from a line.
func stripComment(line string) string {
	if i := strings.IndexByte(line, '#'); i >= 0 && !strings.ContainsAny(line[:i], `'"`) {
		return line[:i]
	}
	return line
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

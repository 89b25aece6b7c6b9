package main

// How run and repl show an execution: stdout and stderr as they come, results as text,
// tracebacks on stderr, images and the files the code made saved under the out folder.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
)

// session runs code in a session and shows what it does.
type session struct {
	c       *client.Client
	id      string
	outDir  string
	stdout  io.Writer
	stderr  io.Writer
	sig     *signals
	prompts bool // repl on a terminal: results as "Out[n]: ..."
	count   int  // the execution count of the last cell
	images  int  // images saved by the running cell
}

// run executes code: the first Ctrl-C interrupts the cell (and its result comes back), a
// second one abandons it. It returns the result after the files are saved.
func (x *session) run(parent context.Context, code string, timeout float64) (*api.ExecuteResult, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	x.images = 0
	interrupted := false
	restore := x.sig.handle(func() {
		if interrupted {
			cancel()
			return
		}
		interrupted = true
		fmt.Fprintln(x.stderr, "\ncellbox: interrupting the cell (Ctrl-C again to abandon it)")
		go x.c.Interrupt(ctx, x.id)
	})
	res, err := x.c.ExecuteStream(ctx, x.id, api.ExecuteRequest{Code: code, TimeoutS: timeout}, x.show)
	restore()
	if err != nil {
		if ctx.Err() != nil && parent.Err() == nil {
			return nil, errAbandoned
		}
		return nil, err
	}
	x.count++
	if res.ExecutionCount > 0 {
		x.count = res.ExecutionCount
	}
	for _, f := range res.Files {
		if f.Change != api.ChangeDeleted {
			x.download(ctx, f.Path)
		}
	}
	if res.Truncated {
		fmt.Fprintln(x.stderr, "cellbox: the output was too long and was cut")
	}
	if res.Status != api.StatusOK && res.Status != api.StatusError {
		msg := res.Message
		if msg == "" {
			msg = "the execution did not finish"
		}
		fmt.Fprintf(x.stderr, "cellbox: %s: %s\n", res.Status, msg)
	}
	return res, nil
}

// errAbandoned: a second Ctrl-C dropped the running cell; the server stops it.
var errAbandoned = errors.New("abandoned the running cell; the server stops it")

// show prints or saves one output.
func (x *session) show(o api.Output) {
	switch o.Type {
	case api.OutputStream:
		if o.Name == "stderr" {
			io.WriteString(x.stderr, o.Text)
		} else {
			io.WriteString(x.stdout, o.Text)
		}
	case api.OutputError:
		tb := strings.Join(o.Traceback, "\n")
		if tb == "" {
			tb = o.EName + ": " + o.EValue
		}
		fmt.Fprintln(x.stderr, strings.TrimRight(tb, "\n"))
	case api.OutputDisplayData, api.OutputExecuteResult:
		if x.saveImage(o.Data) {
			return
		}
		text, _ := o.Data["text/plain"].(string)
		if text == "" {
			return
		}
		if o.Type == api.OutputExecuteResult && x.prompts {
			text = fmt.Sprintf("Out[%d]: %s", o.ExecutionCount, text)
		}
		fmt.Fprintln(x.stdout, text)
	}
}

// imageTypes are the MIME types saved as files, best first.
var imageTypes = []struct{ mime, ext string }{
	{"image/png", ".png"}, {"image/jpeg", ".jpg"}, {"image/svg+xml", ".svg"}, {"application/pdf", ".pdf"},
}

// saveImage saves the best image of a MIME bundle as cell-N-out-M.ext; false if it has none.
func (x *session) saveImage(data map[string]any) bool {
	for _, t := range imageTypes {
		s, ok := data[t.mime].(string)
		if !ok {
			continue
		}
		b := []byte(s)
		if t.mime != "image/svg+xml" {
			var err error
			if b, err = base64.StdEncoding.DecodeString(strings.TrimSpace(s)); err != nil {
				fmt.Fprintf(x.stderr, "cellbox: an %s output is not valid base64; not saved\n", t.mime)
				return true
			}
		}
		x.images++
		name := fmt.Sprintf("cell-%d-out-%d%s", x.count+1, x.images, t.ext)
		x.save(name, func(w io.Writer) error { _, err := w.Write(b); return err })
		return true
	}
	return false
}

// download saves a workspace file (an absolute path under /mnt/data, as the server
// reports changes) under the out folder at the same relative path.
func (x *session) download(ctx context.Context, path string) {
	rel, ok := strings.CutPrefix(path, api.WorkspaceDir+"/")
	if !ok {
		fmt.Fprintf(x.stderr, "cellbox: not saving %q: not a workspace path\n", path)
		return
	}
	x.save(rel, func(w io.Writer) error {
		_, err := x.c.DownloadFileTo(ctx, x.id, rel, w)
		return err
	})
}

// save writes a file at rel (slash-separated) inside the out folder. Nothing is ever
// written outside it: rel must be a local path, and the folder is opened as an os.Root,
// so neither ".." nor a symlink in it leads out.
func (x *session) save(rel string, write func(io.Writer) error) {
	shown := termSafe(filepath.Join(x.outDir, filepath.FromSlash(rel)), false)
	err := saveIn(x.outDir, rel, write)
	if err != nil {
		fmt.Fprintf(x.stderr, "cellbox: not saved: %s: %v\n", shown, err)
		return
	}
	fmt.Fprintf(x.stderr, "saved %s\n", shown)
}

func saveIn(dir, rel string, write func(io.Writer) error) (err error) {
	local := filepath.FromSlash(rel)
	if strings.ContainsAny(rel, "\\\x00") || !filepath.IsLocal(local) {
		return fmt.Errorf("unsafe file name %q", rel)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if d := filepath.Dir(local); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	f, err := root.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			root.Remove(local) // never leave a partial file that looks whole
		}
	}()
	return write(f)
}

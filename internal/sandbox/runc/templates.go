package runc

import (
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/sandbox/runc/template"
)

// templates keeps one kernel template per root filesystem, each in a folder of its own under
// dir that every sandbox on that root has bound (spec's templateDir). The folder's name
// depends on the root only, so sandboxes that outlive this server reach the next server's
// template there.
type templates struct {
	cfg      Kernels
	dir      string
	uid, gid int
	binary   string // the cellbox binary (the guest's)
	log      *slog.Logger

	mu     sync.Mutex
	byDir  map[string]*templateRun
	closed bool
}

// templateRun is the template of one root, and when it last started.
type templateRun struct {
	t       *template.Template // nil: it could not start
	started time.Time
	img     string // the image whose build the root is; "" for the host's
}

// restartAfter spaces the starts of a root's template that keeps ending. renewAfter is
// how long a template serves before a new one replaces it: between forks it writes some of
// its memory (each request's work), which its kernels then no longer share with it.
const restartAfter = 10 * time.Second

var renewAfter = time.Hour // a variable for tests

// forRoot returns the host folder to bind for a sandbox on rootfs (an image's root, named
// img, whose font cache is in it when imgMPL; or the backend's host-mode root, with the
// host's font cache hostMPL), starting its template if none runs.
func (ts *templates) forRoot(rootfs, img string, imgMPL bool, hostMPL string) string {
	if img == "" {
		return ts.get("host", "", "", hostMPL)
	}
	mpl := ""
	if imgMPL {
		mpl = image.MPLCachePath
	}
	// The image's name and build: .../images/<name>/<hash>/rootfs.
	return ts.get(img+"-"+filepath.Base(filepath.Dir(rootfs)), img, rootfs, mpl)
}

// get returns the folder of the template key on root ("": the host's; else a build of
// image img), starting the template when none runs (and the last start is restartAfter
// ago). A template of another build of img ends then: new sandboxes are on this build,
// and the sandboxes left on the other start their kernels afresh.
func (ts *templates) get(key, img, root, mpl string) string {
	dir := filepath.Join(ts.dir, key)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	r := ts.byDir[dir]
	renew := r != nil && r.t != nil && !done(r.t) && time.Since(r.started) > renewAfter
	if ts.closed || (r != nil && !renew && (r.t != nil && !done(r.t) || time.Since(r.started) < restartAfter)) {
		return dir
	}
	switch {
	case renew:
		ts.log.Info("renewing the kernel template", "template", dir, "served", time.Since(r.started).Round(time.Second))
	case r != nil && r.t != nil:
		ts.log.Warn("kernel template ended: starting it again", "template", dir)
	}
	t, err := template.Start(template.Config{Python: ts.cfg.Python, Preimport: ts.cfg.Preimport, UID: ts.uid, GID: ts.gid,
		Root: root, MPLCache: mpl, Dir: dir, Binary: ts.binary, Replace: renew, Detach: ts.cfg.Detach, Logger: ts.log})
	switch {
	case err != nil && renew:
		ts.log.Warn("kernel template did not start: the one running serves on", "template", dir, "error", err)
		r.started = time.Now()
		return dir
	case err != nil:
		ts.log.Warn("kernel template did not start: kernels start afresh", "template", dir, "error", err)
	case renew:
		// The new one takes the socket over once ready (renamed over it); then the old
		// one ends, once it has no request, and its kernels run on.
		go func(old, new *template.Template) {
			select {
			case <-new.Ready():
			case <-new.Done():
			}
			old.Close()
		}(r.t, t)
	}
	ts.byDir[dir] = &templateRun{t: t, started: time.Now(), img: img}
	if img != "" && err == nil {
		for d, o := range ts.byDir {
			if d != dir && o.img == img {
				ts.log.Info("a newer build of the image has a kernel template: the older build's ends", "template", d, "image", img)
				if o.t != nil {
					go o.t.Close() // it ends once it has no request
				}
				delete(ts.byDir, d)
			}
		}
	}
	return dir
}

func done(t *template.Template) bool {
	select {
	case <-t.Done():
		return true
	default:
		return false
	}
}

// close ends every template.
func (ts *templates) close() {
	ts.mu.Lock()
	ts.closed = true
	runs := ts.byDir
	ts.byDir = map[string]*templateRun{}
	ts.mu.Unlock()
	for _, r := range runs {
		if r.t != nil {
			r.t.Close()
		}
	}
}

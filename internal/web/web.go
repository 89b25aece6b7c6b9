// Package web is the browser page of cellbox, served by `cellbox serve` at /: a chat with a
// model that runs code in a session, a notebook on the same session (with its files, network
// policy and recent connections), and the key's sessions.
// Its assets (static/, with the vendored libraries of scripts/vendor-web.sh) are embedded;
// the page talks only to the REST API v1 of the same origin.
//
// Not for: any API logic. The handler serves fixed files and nothing else.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed static
var static embed.FS

// contentSecurityPolicy allows the page its own scripts, styles and fonts, images from
// itself and from data: and blob: URLs (plots arrive as base64), and requests to its own
// origin only. Model output is untrusted: even HTML that got past the sanitiser can neither
// run a script nor send data elsewhere (no image beacons, no form posts, no frames).
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes are the types of the files the page has; any other is plain text or bytes.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".ico":  "image/x-icon",
	".json": "application/json",
}

// asset is one embedded file, read and hashed once.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

type handler struct {
	assets map[string]asset // by path relative to static/, e.g. "app.js", "vendor/marked.js"
}

// Handler serves GET / (static/index.html) and GET /assets/<file> (a file of static/).
// Anything else, directories included, is a plain 404. Every response carries a strict
// Content-Security-Policy; files are revalidated on each load (no-cache) by their ETag.
func Handler() http.Handler { return theHandler() }

// theHandler is made at the first call: the guest, the same binary, never serves the UI and
// should not hold a copy of its files (~300 KB in every sandbox).
var theHandler = sync.OnceValue(func() *handler { return newHandler(static) })

func newHandler(embedded fs.FS) *handler {
	root, err := fs.Sub(embedded, "static")
	if err != nil {
		panic(err) // the embed pattern names static: it is there
	}
	h := &handler{assets: map[string]asset{}}
	err = fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		body, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			ct = http.DetectContentType(body)
		}
		h.assets[name] = asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		panic(err) // reading an embedded file cannot fail
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", contentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cache-Control", "no-cache")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	a, ok := h.lookup(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	hdr.Set("Content-Type", a.contentType)
	hdr.Set("ETag", a.etag)
	// ServeContent answers If-None-Match with 304, ranges and HEAD.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

// lookup finds the asset a request names: / is index.html, /assets/NAME is NAME. Only the
// exact names of embedded files match: no directory, no "..", no encoded slash.
func (h *handler) lookup(r *http.Request) (asset, bool) {
	if r.URL.Path == "/" {
		a, ok := h.assets["index.html"]
		return a, ok
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/assets/")
	if !ok || !fs.ValidPath(name) || strings.Contains(name, `\`) {
		return asset{}, false
	}
	if esc := strings.ToLower(r.URL.EscapedPath()); strings.Contains(esc, "%2f") || strings.Contains(esc, "%5c") {
		return asset{}, false
	}
	a, ok := h.assets[name]
	return a, ok
}

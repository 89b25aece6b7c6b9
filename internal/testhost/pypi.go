package testhost

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Wheel is a pure-Python package of one module, built as a wheel by Build.
type Wheel struct {
	Name    string // the distribution's name, as pip install is given it
	Version string
	Module  string // the module's file name, "hello.py"
	Source  string // its contents
}

// Build returns the wheel's file name (<dist>-<version>-py3-none-any.whl) and contents: the
// module, and the .dist-info's METADATA, WHEEL and RECORD (with each file's sha256 and size).
func (w Wheel) Build() (file string, data []byte) {
	dist := regexp.MustCompile(`[-_.]+`).ReplaceAllString(w.Name, "_")
	info := fmt.Sprintf("%s-%s.dist-info/", dist, w.Version)
	files := []struct{ name, body string }{
		{w.Module, w.Source},
		{info + "METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", w.Name, w.Version)},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: cellbox-testhost\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", info)
	files = append(files, struct{ name, body string }{info + "RECORD", record.String()})

	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		// A fixed time, so that the same Wheel is the same bytes.
		hdr := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
		fw, err := zw.CreateHeader(hdr)
		if err != nil {
			panic(err) // writing to memory
		}
		fw.Write([]byte(f.body))
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%s-%s-py3-none-any.whl", dist, w.Version), buf.Bytes()
}

// normalize is a project's name as PEP 503 has it in URLs.
func normalize(name string) string {
	return strings.ToLower(regexp.MustCompile(`[-_.]+`).ReplaceAllString(name, "-"))
}

// PyPI serves a PEP 503 simple index of pkgs: /simple/, /simple/<normalised name>/ linking
// each of its wheels as ../../files/<file>#sha256=<hex>, and the wheels at /files/<file>.
func PyPI(pkgs ...Wheel) http.Handler {
	files := map[string][]byte{}
	links := map[string][]string{} // by normalised project name
	for _, w := range pkgs {
		name, data := w.Build()
		sum := sha256.Sum256(data)
		files[name] = data
		n := normalize(w.Name)
		links[n] = append(links[n], fmt.Sprintf(`<a href="../../files/%s#sha256=%s">%s</a>`,
			html.EscapeString(name), hex.EncodeToString(sum[:]), html.EscapeString(name)))
	}
	var projects []string
	for n := range links {
		projects = append(projects, n)
	}
	sort.Strings(projects)

	page := func(w http.ResponseWriter, title string, lines []string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><title>%s</title></head><body>\n%s\n</body></html>\n",
			html.EscapeString(title), strings.Join(lines, "<br>\n"))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /simple/{$}", func(w http.ResponseWriter, r *http.Request) {
		var lines []string
		for _, n := range projects {
			lines = append(lines, fmt.Sprintf(`<a href="%s/">%s</a>`, n, n))
		}
		page(w, "Simple index", lines)
	})
	mux.HandleFunc("GET /simple/{project}/{$}", func(w http.ResponseWriter, r *http.Request) {
		n := r.PathValue("project")
		if normalize(n) != n {
			http.Redirect(w, r, "/simple/"+normalize(n)+"/", http.StatusMovedPermanently)
			return
		}
		l, ok := links[n]
		if !ok {
			http.NotFound(w, r)
			return
		}
		page(w, "Links for "+n, l)
	})
	mux.HandleFunc("GET /files/{file}", func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[r.PathValue("file")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	})
	return mux
}

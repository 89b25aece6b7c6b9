package listen

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// has reports whether the list holds s.
func has(s Socket) bool { return slices.Contains(Sockets(), s) }

// TCP lists what it opens, as bound, until it is closed; Peers adds its sockets until
// removed.
func TestTCP(t *testing.T) {
	ln, err := TCP("the test's API", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Socket{Addr: netip.MustParseAddrPort(ln.Addr().String()), Name: "the test's API"}
	if s.Addr.Port() == 0 || !has(s) {
		t.Fatalf("%+v not in %+v", s, Sockets())
	}
	// It is a listener: a connection to it arrives.
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	ln.Close()
	if has(s) {
		t.Errorf("%+v still listed once closed", s)
	}
	if err := ln.Close(); err == nil {
		t.Error("a second Close did not fail")
	}

	wild, err := TCP("the test's wildcard", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer wild.Close()
	ap := netip.MustParseAddrPort(wild.Addr().String())
	if !has(Socket{Addr: ap, Name: "the test's wildcard"}) || !ap.Addr().IsUnspecified() {
		t.Errorf("%v: want the unspecified address listed: %+v", ap, Sockets())
	}

	peer := Socket{Addr: netip.MustParseAddrPort("10.9.8.7:8080"), Name: "cellbox node b's API"}
	remove := Peers(func() []Socket { return []Socket{peer} })
	if !has(peer) {
		t.Errorf("the peer is not listed: %+v", Sockets())
	}
	remove()
	if has(peer) {
		t.Error("the peer is listed once removed")
	}
}

// A TCP listener opened anywhere but here would be out of the egress gateway's sight: the
// module's code (tests and tests' helpers aside) opens none. Listeners are net.Listen and its
// kin for TCP and UDP, net.ListenConfig, http.ListenAndServe and httptest; Unix sockets are
// not (the gateway dials TCP only). The guest's listeners are inside its sandbox.
func TestOnlyListenOpensListeners(t *testing.T) {
	root := moduleRoot(t)
	exempt := map[string]string{
		"internal/listen": "this package",
		"internal/guest":  "the guest listens inside its sandbox",
	}
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			if _, ok := exempt[filepath.ToSlash(rel)]; ok || testHelper(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, v := range listens(t, path) {
			bad = append(bad, filepath.ToSlash(rel)+":"+v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Errorf("%s: open the server's listeners with listen.TCP, so that sessions cannot reach them", b)
	}
}

// The tests' helpers, which the walk skips, are linked into no command.
func TestHelpersOutOfTheBinaries(t *testing.T) {
	root := moduleRoot(t)
	cmd := exec.Command("go", "list", "-deps", "./cmd/...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	const mod = "github.com/cellbox/cellbox/"
	for _, p := range strings.Fields(string(out)) {
		if rel, ok := strings.CutPrefix(p, mod); ok && testHelper(rel) {
			t.Errorf("a command links %s, a tests' helper that may listen where the egress gateway does not look", rel)
		}
	}
}

// testHelper reports whether a folder of the module holds a tests' helper package:
// internal/testhost, internal/sandbox/sandboxtest, internal/llm/llmtest, ...
func testHelper(rel string) bool {
	name := filepath.Base(rel)
	return strings.HasPrefix(name, "test") || strings.HasSuffix(name, "test")
}

// moduleRoot is the folder of go.mod above this package's.
func moduleRoot(t *testing.T) string {
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the package")
		}
		dir = up
	}
}

// listens lists the places in the Go file at path that open a TCP or UDP listener.
func listens(t *testing.T, path string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	names := map[string]string{} // local name of an import → its path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := p[strings.LastIndexByte(p, '/')+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		names[name] = p
		if p == "net/http/httptest" {
			return []string{strconv.Itoa(fset.Position(im.Pos()).Line) + ": imports net/http/httptest"}
		}
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg := ""
		if id, ok := sel.X.(*ast.Ident); ok {
			pkg = names[id.Name]
		}
		what := ""
		switch {
		case pkg == "net" && slices.Contains([]string{"Listen", "ListenTCP", "ListenUDP", "ListenPacket", "ListenIP", "ListenMulticastUDP", "FileListener", "ListenConfig"}, sel.Sel.Name):
			what = "net." + sel.Sel.Name
		case sel.Sel.Name == "ListenAndServe" || sel.Sel.Name == "ListenAndServeTLS":
			what = sel.Sel.Name
		}
		if what != "" {
			out = append(out, strconv.Itoa(fset.Position(sel.Pos()).Line)+": "+what)
		}
		return true
	})
	// net.Listen("unix", ...) and net.ListenPacket("unixgram", ...) are Unix sockets.
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if lit, ok := call.Args[0].(*ast.BasicLit); ok && strings.HasPrefix(lit.Value, `"unix`) {
			at := strconv.Itoa(fset.Position(sel.Pos()).Line) + ": "
			out = slices.DeleteFunc(out, func(s string) bool { return strings.HasPrefix(s, at) })
		}
		return true
	})
	return out
}

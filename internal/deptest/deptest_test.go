package deptest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

const mod = "github.com/cellbox/cellbox/"

// pkg is what go list says of a package: the packages it links, directly or not.
type pkg struct {
	ImportPath string
	Deps       []string
	Standard   bool
}

// graph is every package that ./... links on one GOOS, by import path.
type graph map[string]*pkg

var (
	graphMu sync.Mutex
	graphs  = map[string]graph{}
)

// load lists the build graph of ./... for goos, once per test binary.
func load(t *testing.T, goos string) graph {
	t.Helper()
	graphMu.Lock()
	defer graphMu.Unlock()
	if g, ok := graphs[goos]; ok {
		return g
	}
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Deps,Standard", mod+"...")
	cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list (GOOS=%s): %v\n%s", goos, err, stderr.Bytes())
	}
	g := graph{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		p := new(pkg)
		if err := dec.Decode(p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		g[p.ImportPath] = p
	}
	graphs[goos] = g
	return g
}

// rule is one dependency rule: no package that from names may link a package for which
// bad gives a reason.
type rule struct {
	from []string                               // import paths below mod; "x/..." is x and all below it
	bad  func(g graph, dep string) (why string) // "" when dep is allowed
}

// match reports whether path is named by pattern (below mod, "x/..." for x and below).
func match(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == mod+base || strings.HasPrefix(path, mod+base+"/")
	}
	return path == mod+pattern
}

func matchAny(patterns []string, path string) bool {
	for _, p := range patterns {
		if match(p, path) {
			return true
		}
	}
	return false
}

// violations lists, for each GOOS, every dependency that breaks r; it fails the test if r
// names no package (a rule about a package that moved).
func (r rule) violations(t *testing.T, g graph) []string {
	t.Helper()
	var bad []string
	found := false
	for path, p := range g {
		if !matchAny(r.from, path) {
			continue
		}
		found = true
		for _, dep := range p.Deps {
			if why := r.bad(g, dep); why != "" {
				bad = append(bad, fmt.Sprintf("%s links %s: %s", strings.TrimPrefix(path, mod), dep, why))
			}
		}
	}
	if !found {
		t.Fatalf("the rule names no package of the module: %v (moved?)", r.from)
	}
	return bad
}

// check applies r on Linux and macOS.
func (r rule) check(t *testing.T) {
	t.Helper()
	for _, goos := range []string{"linux", "darwin"} {
		for _, v := range r.violations(t, load(t, goos)) {
			t.Errorf("GOOS=%s: %s", goos, v)
		}
	}
}

// onlyStd allows the standard library and the module's packages that allowed names.
func onlyStd(allowed ...string) func(graph, string) string {
	return func(g graph, dep string) string {
		if p := g[dep]; p != nil && p.Standard || matchAny(allowed, dep) {
			return ""
		}
		if len(allowed) == 0 {
			return "only the standard library"
		}
		return "only the standard library and " + strings.Join(allowed, ", ")
	}
}

// onlyModule allows, of the module's packages, those that allowed names.
func onlyModule(allowed ...string) func(graph, string) string {
	return func(g graph, dep string) string {
		if strings.HasPrefix(dep, mod) && !matchAny(allowed, dep) {
			return "of the module only " + strings.Join(allowed, ", ")
		}
		return ""
	}
}

// none refuses the module's packages that patterns names.
func none(why string, patterns ...string) func(graph, string) string {
	return func(g graph, dep string) string {
		if matchAny(patterns, dep) {
			return why
		}
		return ""
	}
}

// either refuses what any of rules refuses.
func either(rules ...func(graph, string) string) func(graph, string) string {
	return func(g graph, dep string) string {
		for _, r := range rules {
			if why := r(g, dep); why != "" {
				return why
			}
		}
		return ""
	}
}

// The public wire types: anyone's program may import them.
func TestAPIOnlyStandardLibrary(t *testing.T) {
	rule{from: []string{"api"}, bad: onlyStd()}.check(t)
}

// The Go SDK: a user's program gets no third-party module and nothing of the server.
func TestClientOnlyAPI(t *testing.T) {
	rule{from: []string{"client"}, bad: onlyStd("api")}.check(t)
}

// The error vocabulary is a leaf every layer (the guest too) imports; its transports'
// mappings are its sub-packages, which only the front doors link.
func TestErrdefsLeaf(t *testing.T) {
	rule{from: []string{"internal/errdefs"}, bad: onlyStd("api")}.check(t)
}

// The guest's own binary links none of the server's packages (sessions, front doors,
// backends, LLMs, Kubernetes, Docker's client, metrics), and not net/http: every
// sandbox runs it, and each package it links costs memory in each.
func TestGuestLinksNoServer(t *testing.T) {
	guest := []string{"cmd/cellbox-guest", "internal/guest/...", "internal/guestproto", "internal/guestbin",
		"internal/sandbox/runc/template/tinit", "internal/workspace", "internal/mountinfo", "internal/errdefs", "api"}
	rule{from: []string{"cmd/cellbox-guest"}, bad: func(g graph, dep string) string {
		switch {
		case dep == "net/http":
			return "the guest speaks no HTTP: net/http is ~1.5 MB of every guest"
		case strings.HasPrefix(dep, mod) && !matchAny(guest, dep):
			return "a server package"
		case strings.HasPrefix(dep, "github.com/moby/") || strings.HasPrefix(dep, "github.com/docker/") ||
			strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "github.com/prometheus/") ||
			strings.HasPrefix(dep, "github.com/modelcontextprotocol/") || strings.HasPrefix(dep, "connectrpc.com/") ||
			strings.HasPrefix(dep, "github.com/openai/") || strings.HasPrefix(dep, "github.com/anthropics/"):
			return "a server's dependency"
		}
		return ""
	}}.check(t)
}

// The protocol is what both sides import; it knows neither side's internals.
func TestGuestprotoNeitherSide(t *testing.T) {
	rule{from: []string{"internal/guestproto"}, bad: none("the protocol knows neither side", "internal/guest", "internal/guest/...",
		"internal/session/...", "internal/sandbox/...")}.check(t)
}

// Backends serve the session layer and know nothing above it; they link of the guest only
// its leaves (the runner script, the relay), never the daemon.
func TestBackendsBelowSessions(t *testing.T) {
	rule{from: []string{"internal/sandbox/..."}, bad: either(
		none("a backend knows nothing above the session layer", "internal/session/...", "internal/server/...",
			"internal/httpapi/...", "internal/mcpserver/...", "internal/e2b/...", "internal/openai/...", "internal/conversation/...",
			"internal/agent/...", "internal/llm/...", "internal/cluster/...", "internal/tool/...", "internal/jupyter/..."),
		none("the guest daemon is the guest's, not the server's", "internal/guest"),
	)}.check(t)
}

// The interfaces package, and image (which backends build on), link no backend: arrows run
// down the tree, from a backend to what it implements.
func TestSandboxInterfacesBelowBackends(t *testing.T) {
	rule{from: []string{"internal/sandbox", "internal/image"}, bad: none("an arrow back up from the backends",
		"internal/sandbox/runc/...", "internal/sandbox/docker/...", "internal/sandbox/local/...")}.check(t)
	rule{from: []string{"internal/image"}, bad: onlyModule("api", "internal/errdefs", "internal/mountinfo", "internal/statefile")}.check(t)
}

// The front doors reach sandboxes only through the session manager, which knows only
// sandbox.Backend: none links a backend (the session layer's test helpers may).
func TestFrontDoorsNoBackends(t *testing.T) {
	rule{from: []string{"internal/httpapi/...", "internal/mcpserver/...", "internal/e2b/...", "internal/openai/...",
		"internal/conversation/...", "internal/agent/...", "internal/jupyter/...", "internal/session"},
		bad: none("a front door (or the session layer) sees sandbox.Backend, not a backend",
			"internal/sandbox/runc/...", "internal/sandbox/docker/...", "internal/sandbox/local/...")}.check(t)
}

// The front doors that httpapi mounts stand on the session manager, not on httpapi, which
// mounts them through interfaces it owns (the server wires them together); and the session
// layer links no front door.
func TestFrontDoorsApart(t *testing.T) {
	rule{from: []string{"internal/mcpserver/...", "internal/e2b/...", "internal/openai/...", "internal/conversation/...", "internal/agent/...",
		"internal/jupyter/..."},
		bad: none("a front door links another front door's package", "internal/httpapi/...")}.check(t)
	rule{from: []string{"internal/jupyter/..."}, bad: none("a front door links another front door's package",
		"internal/e2b/...", "internal/mcpserver/...", "internal/openai/...", "internal/conversation/...", "internal/agent/...", "internal/notebook/...")}.check(t)
	rule{from: []string{"internal/openai/..."}, bad: none("a front door links another front door's package",
		"internal/e2b/...", "internal/mcpserver/...", "internal/conversation/...", "internal/agent/...")}.check(t)
	rule{from: []string{"internal/session/..."},
		bad: none("the session layer links a front door",
			"internal/httpapi/...", "internal/mcpserver/...", "internal/e2b/...", "internal/openai/...", "internal/conversation/...", "internal/agent/...",
			"internal/jupyter/...")}.check(t)
}

// The notebook runner stands on its own Sessions interface: of the module it links only
// the wire types and the error vocabulary (httpapi serves it, cellbox run reaches it over
// REST).
func TestNotebookStandsAlone(t *testing.T) {
	rule{from: []string{"internal/notebook"}, bad: onlyModule("api", "internal/errdefs")}.check(t)
}

package jupyter_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestKernelLanguages: a kernelspec a language; kernels of JavaScript, TypeScript, R and
// Bash started through the REST API run their cells over the websocket, say their language
// in kernel_info_reply, answer complete, inspect and is_complete with nothing, and are
// listed under their kernelspec, as is a session of another language made elsewhere.
func TestKernelLanguages(t *testing.T) {
	g := startGateway(t, false)

	type spec struct {
		Name string `json:"name"`
		Spec struct {
			DisplayName string `json:"display_name"`
			Language    string `json:"language"`
		} `json:"spec"`
	}
	var specs struct {
		Default     string          `json:"default"`
		Kernelspecs map[string]spec `json:"kernelspecs"`
	}
	if st := g.do(t, "GET", "/api/kernelspecs", aliceKey, "", &specs); st != http.StatusOK || specs.Default != "python3" || len(specs.Kernelspecs) != 5 {
		t.Fatalf("kernelspecs: %d %+v", st, specs)
	}
	for name, lang := range map[string]string{"python3": "python", "javascript": "javascript", "typescript": "typescript", "r": "R", "bash": "bash"} {
		var one spec
		if st := g.do(t, "GET", "/api/kernelspecs/"+name, aliceKey, "", &one); st != http.StatusOK || one.Name != name ||
			one.Spec.Language != lang || one.Spec.DisplayName == "" || specs.Kernelspecs[name].Spec.Language != lang {
			t.Errorf("kernelspec %s: %d %+v, listed %+v", name, st, one, specs.Kernelspecs[name])
		}
	}
	if st := g.do(t, "GET", "/api/kernelspecs/ir", aliceKey, "", nil); st != http.StatusNotFound {
		t.Errorf("kernelspec ir: %d", st)
	}
	if st := g.do(t, "POST", "/api/kernels", aliceKey, `{"name":"cobol"}`, nil); st != http.StatusNotFound {
		t.Errorf("a kernel of no kernelspec: %d", st)
	}

	version := regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)
	for _, c := range []struct {
		name, code, out, lang, mimetype, ext string
		versioned                            bool
	}{
		{"javascript", "let x = 6 * 7\nconsole.log('js', x)", "js 42\n", "javascript", "application/javascript", ".js", true},
		{"typescript", "const n: number = 6 * 7\nconsole.log('ts', n)", "ts 42\n", "typescript", "text/typescript", ".ts", false},
		{"r", "x <- 6 * 7\ncat(sprintf('r %g\\n', x))", "r 42\n", "R", "text/x-r-source", ".r", true},
		{"bash", "x=$((6 * 7))\necho bash $x", "bash 42\n", "bash", "text/x-sh", ".sh", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var k kernelModel
			if st := g.do(t, "POST", "/api/kernels", aliceKey, `{"name":"`+c.name+`"}`, &k); st != http.StatusCreated || k.Name != c.name {
				t.Fatalf("start a %s kernel: %d %+v", c.name, st, k)
			}
			t.Cleanup(func() { g.do(t, "DELETE", "/api/kernels/"+k.ID, aliceKey, "", nil) })
			ws := g.mustDial(t, k.ID, aliceKey, c.name != "r")

			_, reply := ws.request("shell", "kernel_info_request", map[string]any{})
			li, _ := reply.Content["language_info"].(map[string]any)
			v, hasVersion := li["version"].(string)
			if reply.Content["status"] != "ok" || li["name"] != c.lang || li["mimetype"] != c.mimetype || li["file_extension"] != c.ext ||
				li["codemirror_mode"] == nil || li["pygments_lexer"] == "" || reply.Content["implementation"] != "cellbox-"+c.name {
				t.Errorf("kernel_info: %+v", reply.Content)
			}
			if c.versioned && !version.MatchString(v) || !c.versioned && hasVersion {
				t.Errorf("language_info's version: %q (%v)", v, hasVersion)
			}

			iopub, reply := ws.request("shell", "execute_request", map[string]any{"code": c.code, "silent": false, "store_history": true,
				"user_expressions": map[string]string{"x": "x"}, "allow_stdin": true})
			if reply.Content["status"] != "ok" || reply.Content["execution_count"] != 1.0 || texts(iopub, "stream") != c.out {
				t.Errorf("execute: %+v %q", reply.Content, texts(iopub, "stream"))
			}
			if ux, _ := reply.Content["user_expressions"].(map[string]any); ux == nil || len(ux) != 0 {
				t.Errorf("user_expressions, which are Python's: %+v", reply.Content["user_expressions"])
			}

			_, reply = ws.request("shell", "complete_request", map[string]any{"code": "xy", "cursor_pos": 2})
			if m, ok := reply.Content["matches"].([]any); reply.Content["status"] != "ok" || !ok || len(m) != 0 ||
				reply.Content["cursor_start"] != 2.0 || reply.Content["cursor_end"] != 2.0 {
				t.Errorf("complete: %+v", reply.Content)
			}
			_, reply = ws.request("shell", "inspect_request", map[string]any{"code": "xy", "cursor_pos": 1, "detail_level": 0})
			if reply.Content["status"] != "ok" || reply.Content["found"] != false || reply.Content["data"] == nil {
				t.Errorf("inspect: %+v", reply.Content)
			}
			_, reply = ws.request("shell", "is_complete_request", map[string]any{"code": "if true"})
			if reply.Content["status"] != "unknown" {
				t.Errorf("is_complete: %+v", reply.Content)
			}

			var list []kernelModel
			g.do(t, "GET", "/api/kernels", aliceKey, "", &list)
			if !hasKernelNamed(list, k.ID, c.name) {
				t.Errorf("the kernel list: %+v", list)
			}
		})
	}

	// IRkernel's name starts an R kernel; a session made in Bash through cellbox's REST API
	// is a bash kernel.
	var k kernelModel
	if st := g.do(t, "POST", "/api/kernels", aliceKey, `{"name":"ir"}`, &k); st != http.StatusCreated || k.Name != "r" {
		t.Errorf("start an ir kernel: %d %+v", st, k)
	}
	g.do(t, "DELETE", "/api/kernels/"+k.ID, aliceKey, "", nil)
	req, _ := http.NewRequest("POST", g.url+"/v1/sessions", strings.NewReader(`{"language":"bash"}`))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ ID, Language string }
	json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || s.Language != "bash" {
		t.Fatalf("a bash session: %d %+v", resp.StatusCode, s)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", g.url+"/v1/sessions/"+s.ID, nil)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	var list []kernelModel
	g.do(t, "GET", "/api/kernels", aliceKey, "", &list)
	bash := 0
	for _, k := range list {
		if k.Name == "bash" {
			bash++
		}
	}
	if bash != 1 {
		t.Errorf("the bash session among the kernels: %+v", list)
	}
}

func hasKernelNamed(list []kernelModel, id, name string) bool {
	for _, k := range list {
		if k.ID == id {
			return k.Name == name
		}
	}
	return false
}

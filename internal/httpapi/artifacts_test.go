package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/artifacts/artifactstest"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/testbin"
)

// TestArtifacts: with --artifacts-store on a real S3 server (versitygw) and on Azure's
// emulator (Azurite), what a cell, a command or a one-shot changes is uploaded: the result
// names each object and gives its presigned URL at once, which works without credentials
// once the upload is done (awaited when links were asked), and outlives the session; a
// session's patterns choose the files; a bucket that refuses is reported in the result
// (links asked) or in the next one, and the cell itself is fine.
func TestArtifacts(t *testing.T) {
	alice := "Authorization: Bearer " + aliceKey
	exec := func(t *testing.T, k *keyed, id string, req api.ExecuteRequest) api.ExecuteResult {
		t.Helper()
		body, _ := json.Marshal(req)
		a := k.do(t, "POST", "/v1/sessions/"+id+"/execute", string(body), alice)
		var res api.ExecuteResult
		if a.status != 200 || json.Unmarshal(a.body, &res) != nil {
			t.Fatalf("execute: %d %s", a.status, a.body)
		}
		return res
	}
	for _, kind := range []string{"s3", "azblob"} {
		t.Run(kind, func(t *testing.T) {
			// Where the objects are: the URL they are downloaded from, the name the result gives.
			var urls string
			if kind == "s3" {
				urls = artifactstest.StartS3(t, "artifacts") + "/artifacts/runs/"
			} else {
				urls = artifactstest.StartAzurite(t, "artifacts") + "/artifacts/runs/"
			}
			k := startKeyed(t, func(c *config.Config) { c.ArtifactsStore = kind + "://artifacts/runs" })
			a := k.do(t, "POST", "/v1/sessions", "{}", alice)
			var sess api.Session
			json.Unmarshal(a.body, &sess)

			// Links asked: the upload is done when the result comes.
			res := exec(t, k, sess.ID, api.ExecuteRequest{Code: "open('chart.png', 'wb').write(b'PNG!')", Links: true})
			// Named by tenant (hashed), session and run: a later run's chart.png is another object.
			if len(res.Files) != 1 || !strings.HasPrefix(res.Files[0].URL, urls) || !strings.HasPrefix(res.Files[0].Object, kind+"://artifacts/runs/t-") ||
				!strings.Contains(res.Files[0].Object, "/"+sess.ID+"/r-") || !strings.HasSuffix(res.Files[0].Object, "/chart.png") || res.Message != "" {
				t.Fatalf("result %+v", res)
			}
			if st, body := testbin.Get(t, res.Files[0].URL); st != 200 || body != "PNG!" {
				t.Errorf("the object's URL: %d %q", st, body)
			}
			// Not asked: the URL comes at once, the object when its upload (beside the next cell) ends.
			res = exec(t, k, sess.ID, api.ExecuteRequest{Code: "open('later.txt', 'w').write('later')"})
			if len(res.Files) != 1 || res.Files[0].URL == "" {
				t.Fatalf("result %+v", res)
			}
			testbin.WaitFor(t, 30*time.Second, "the upload of later.txt", func() error {
				if st, body := testbin.Get(t, res.Files[0].URL); st != 200 || body != "later" {
					return fmt.Errorf("%d %q", st, body)
				}
				return nil
			})
			// A command's files too.
			a = k.do(t, "POST", "/v1/sessions/"+sess.ID+"/commands", `{"cmd": ["sh", "-c", "echo cmd > cmd.txt"], "links": true}`, alice)
			var cr api.CommandResult
			if json.Unmarshal(a.body, &cr) != nil || len(cr.Files) != 1 {
				t.Fatalf("command: %d %s", a.status, a.body)
			}
			if st, body := testbin.Get(t, cr.Files[0].URL); st != 200 || body != "cmd\n" {
				t.Errorf("a command's file: %d %q", st, body)
			}
			// MCP's python results name the object's URL, for the model to hand on.
			cs := k.mcpClient(t, "Authorization", "Bearer "+aliceKey)
			mres, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "python", Arguments: map[string]any{"code": "open('mcp.txt', 'w').write('mcp')"}})
			if err != nil {
				t.Fatal(err)
			}
			text := callText(mres)
			_, link, ok := strings.Cut(text, "/mnt/data/mcp.txt (created, 3 B), link for the user: ")
			link, _, _ = strings.Cut(link, "\n")
			if !ok || !strings.HasPrefix(link, urls) {
				t.Fatalf("MCP's result: %s", text)
			}
			testbin.WaitFor(t, 30*time.Second, "the upload of mcp.txt", func() error {
				if st, body := testbin.Get(t, link); st != 200 || body != "mcp" {
					return fmt.Errorf("%d %q", st, body)
				}
				return nil
			})
			// The objects outlive the session.
			k.do(t, "DELETE", "/v1/sessions/"+sess.ID, "", alice)
			if st, _ := testbin.Get(t, res.Files[0].URL); st != 200 {
				t.Errorf("an object after its session ended: %d", st)
			}
			// A session ended at once, its uploads still going: it waits for them (the
			// URLs were given).
			a = k.do(t, "POST", "/v1/sessions", "{}", alice)
			var quick api.Session
			json.Unmarshal(a.body, &quick)
			res = exec(t, k, quick.ID, api.ExecuteRequest{Code: "open('big.bin', 'wb').write(b'x' * (48 << 20))"})
			if len(res.Files) != 1 || res.Files[0].URL == "" {
				t.Fatalf("result %+v", res)
			}
			if a := k.do(t, "DELETE", "/v1/sessions/"+quick.ID, "", alice); a.status != 204 {
				t.Fatalf("DELETE: %d %s", a.status, a.body)
			}
			if st, body := testbin.Get(t, res.Files[0].URL); st != 200 || len(body) != 48<<20 {
				t.Errorf("the object of a session ended at once: %d, %d bytes", st, len(body))
			}
			// A one-shot's files, uploaded before its sandbox goes.
			a = k.do(t, "POST", "/v1/execute", `{"code": "open('once.txt', 'w').write('once')", "links": true}`, alice)
			var once api.ExecuteResult
			if json.Unmarshal(a.body, &once) != nil || len(once.Files) != 1 {
				t.Fatalf("one-shot: %d %s", a.status, a.body)
			}
			if st, body := testbin.Get(t, once.Files[0].URL); st != 200 || body != "once" {
				t.Errorf("a one-shot's file: %d %q", st, body)
			}
		})
	}

	// The rest on S3.
	artifactstest.StartS3(t, "artifacts")
	k := startKeyed(t, func(c *config.Config) { c.ArtifactsStore = "s3://artifacts/runs" })
	t.Run("a session's patterns", func(t *testing.T) {
		a := k.do(t, "POST", "/v1/sessions", `{"artifacts": ["*.png", "out/*"]}`, alice)
		var sess api.Session
		json.Unmarshal(a.body, &sess)
		if len(sess.Artifacts) != 2 {
			t.Fatalf("session %d %s", a.status, a.body)
		}
		res := exec(t, k, sess.ID, api.ExecuteRequest{Code: "import os\nos.makedirs('out', exist_ok=True)\nfor p in ['a.png', 'deep/b.png', 'notes.txt', 'out/c.csv']:\n    os.makedirs(os.path.dirname(p) or '.', exist_ok=True)\n    open(p, 'w').write(p)", Links: true})
		kept := map[string]bool{}
		for _, f := range res.Files {
			kept[f.Path] = f.Object != ""
		}
		if want := map[string]bool{"/mnt/data/a.png": true, "/mnt/data/deep/b.png": true, "/mnt/data/notes.txt": false, "/mnt/data/out/c.csv": true}; fmt.Sprint(kept) != fmt.Sprint(want) {
			t.Errorf("kept %v, want %v", kept, want)
		}
		for _, f := range res.Files {
			st, body := testbin.Get(t, f.URL)
			switch {
			case f.Object != "" && (st != 200 || body != strings.TrimPrefix(f.Path, "/mnt/data/")):
				t.Errorf("%s in the bucket: %d %q", f.Path, st, body)
			case f.Object == "" && !strings.HasPrefix(f.URL, k.url+"/v1/sessions/"):
				t.Errorf("%s, not kept, has no link to the session's file: %q", f.Path, f.URL)
			}
		}
		for _, bad := range []string{`{"artifacts": ["[a-"]}`, `{"artifacts": [""]}`, `{"artifacts": ["` + strings.Repeat("x", 300) + `"]}`} {
			if a := k.do(t, "POST", "/v1/sessions", bad, alice); a.status != 400 || !strings.Contains(string(a.body), "artifacts pattern") {
				t.Errorf("%s: %d %s", bad, a.status, a.body)
			}
		}
	})

	t.Run("a name too long for the store", func(t *testing.T) {
		a := k.do(t, "POST", "/v1/sessions", "{}", alice)
		var sess api.Session
		json.Unmarshal(a.body, &sess)
		res := exec(t, k, sess.ID, api.ExecuteRequest{Code: "import os\nd = '/'.join(['d' * 200] * 5)\nos.makedirs(d)\nopen(d + '/deep.txt', 'w').write('x')\nopen('short.txt', 'w').write('y')", Links: true})
		if res.Status != api.StatusOK || len(res.Files) != 2 || !strings.Contains(res.Message, "deep.txt (its path is too long for an object's name") {
			t.Fatalf("result %+v", res)
		}
		for _, f := range res.Files {
			if long := strings.HasSuffix(f.Path, "deep.txt"); long != (f.Object == "") {
				t.Errorf("%.40s...: object %q", f.Path, f.Object)
			}
		}
	})

	t.Run("a bucket that refuses", func(t *testing.T) {
		k := startKeyed(t, func(c *config.Config) { c.ArtifactsStore = "s3://no-such-bucket/runs" })
		a := k.do(t, "POST", "/v1/sessions", "{}", alice)
		var sess api.Session
		json.Unmarshal(a.body, &sess)
		body, _ := json.Marshal(api.ExecuteRequest{Code: "open('x.txt', 'w').write('x'); print('fine')", Links: true})
		a = k.do(t, "POST", "/v1/sessions/"+sess.ID+"/execute", string(body), alice)
		var res api.ExecuteResult
		json.Unmarshal(a.body, &res)
		if res.Status != api.StatusOK || !strings.Contains(res.Message, "not kept in the artifacts store: /mnt/data/x.txt") || !strings.Contains(res.Message, "NoSuchBucket") {
			t.Errorf("links asked, the bucket refusing: %d %s", a.status, a.body)
		}
		// Not asked: the next execution says so.
		body, _ = json.Marshal(api.ExecuteRequest{Code: "open('y.txt', 'w').write('y')"})
		k.do(t, "POST", "/v1/sessions/"+sess.ID+"/execute", string(body), alice)
		testbin.WaitFor(t, 30*time.Second, "the failed upload told", func() error {
			body, _ := json.Marshal(api.ExecuteRequest{Code: "1"})
			a := k.do(t, "POST", "/v1/sessions/"+sess.ID+"/execute", string(body), alice)
			if !strings.Contains(string(a.body), "not kept in the artifacts store: /mnt/data/y.txt") {
				return fmt.Errorf("%s", a.body)
			}
			return nil
		})
		if !strings.Contains(k.log.String(), "artifacts upload failed") {
			t.Error("no log line of the failed upload")
		}
	})
}

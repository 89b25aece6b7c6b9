package e2b_test

// End-to-end tests of the E2B-compatible API: E2B's official JS SDKs (npm e2b and
// @e2b/code-interpreter, testdata/e2bclient) drive a real cellbox server (in process) over
// real HTTP, with real runc sandboxes, the real guest and IPython; raw HTTP plays the
// attacker. CELLBOX_TEST_RUNTIME picks the OCI runtime (runc by default).

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testserver"
)

const (
	aliceKey = "e2b_a11ce000000000000000000000000000000000"
	bobKey   = "e2b_b0b00000000000000000000000000000000000"
	// maxUpload is the test server's upload limit.
	maxUpload = 1 << 20
)

// shared is the server of this package's tests, with the keys of alice and bob, on
// testbin.TestSetup's setup.
var shared = &testserver.Shared{Prefix: "e2b", FromSetup: true, Prepare: func(dir string, cfg *config.Config, opts *server.Options) error {
	file := filepath.Join(dir, "keys")
	if err := os.WriteFile(file, []byte(aliceKey+" alice\n"+bobKey+" bob\n"), 0o600); err != nil {
		return err
	}
	keys, err := auth.Load("", file)
	if err != nil {
		return err
	}
	cfg.MaxUploadBytes = maxUpload
	// bob may ask for an allowlist within pypi.org at most (TestNetworkRefusals).
	cfg.EgressTenants = filepath.Join(dir, "egress-tenants.json")
	if err := os.WriteFile(cfg.EgressTenants, []byte(`{"tenants":{"bob":{"max":{"egress":"allowlist","allow":["pypi.org"]}}}}`), 0o600); err != nil {
		return err
	}
	opts.Keys, opts.Quiet = keys, true
	return nil
}}

func TestMain(m *testing.M) { testserver.Main(m, shared) }

// serverURL starts (once) the shared server.
func serverURL(t *testing.T) string {
	t.Helper()
	u := shared.Start(t).URL
	// On images (testbin.TestSetup) a template that is no image's is not found instead of
	// refused.
	onImages = shared.Setup().ImagesDir != ""
	return u
}

// onImages: the server's sandboxes run on images (set by serverURL).
var onImages bool

// report is what client.mjs printed: one entry per step.
type report map[string]json.RawMessage

// get decodes step name into v.
func (r report) get(t *testing.T, name string, v any) {
	t.Helper()
	raw, ok := r[name]
	if !ok {
		t.Fatalf("the report has no %q", name)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v in %s", name, err, raw)
	}
}

// threw is a step that threw.
type threw struct {
	Threw   string `json:"threw"`
	Message string `json:"message"`
}

func (r report) threw(t *testing.T, name, class, contains string) {
	t.Helper()
	var th threw
	r.get(t, name, &th)
	if th.Threw != class || !strings.Contains(th.Message, contains) {
		t.Errorf("%s: threw %s %q; want %s containing %q", name, th.Threw, th.Message, class, contains)
	}
}

// execution is client.mjs's summary of an Execution.
type execution struct {
	Text   *string `json:"text"`
	Stdout string  `json:"stdout"`
	Stderr string  `json:"stderr"`
	Error  *struct {
		Name, Value, Traceback string
	} `json:"error"`
	Results []struct {
		Main    bool     `json:"main"`
		Formats []string `json:"formats"`
		Text    *string  `json:"text"`
		PNG     bool     `json:"png"`
	} `json:"results"`
	ExecutionCount *int   `json:"executionCount"`
	Threw          string `json:"threw"`
	Message        string `json:"message"`
}

func (e execution) text() string {
	if e.Text == nil {
		return "<none>"
	}
	return *e.Text
}

func (e execution) errName() string {
	if e.Error == nil {
		return ""
	}
	return e.Error.Name
}

// runClient runs a scenario of client.mjs with key.
func runClient(t *testing.T, key string, args ...string) report {
	t.Helper()
	node := testbin.NeedProgram(t, "node", "nodejs")
	dir, err := filepath.Abs(filepath.Join("testdata", "e2bclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@e2b", "code-interpreter")); err != nil {
		testbin.Missing(t, "needs E2B's SDKs: run npm ci in %s (make test does)", dir)
	}
	url := serverURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"client.mjs"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+key, "E2B_DOMAIN=", "E2B_DEBUG=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var r report
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil || err != nil || r["error"] != nil {
		t.Fatalf("client: %v, %v\nreport: %s\nstderr: %s", err, jerr, &stdout, &stderr)
	}
	return r
}

// TestProgram runs the E2B program, unmodified: create, write a CSV, analyse it
// with pandas, plot, run a shell command, read back a file the code wrote, kill.
func TestProgram(t *testing.T) {
	csv, err := filepath.Abs(filepath.Join("..", "..", "examples", "data", "traffic_accidents.csv"))
	if err != nil {
		t.Fatal(err)
	}
	r := runClient(t, aliceKey, "program", csv)
	var analysis, plot execution
	r.get(t, "analysis", &analysis)
	r.get(t, "plot", &plot)
	if analysis.errName() != "" || !strings.Contains(analysis.Stdout, "8000 rows") || !strings.Contains(analysis.text(), "urban_area") {
		t.Errorf("analysis: %+v", analysis)
	}
	if len(plot.Results) != 1 || !plot.Results[0].PNG || plot.Results[0].Main {
		t.Errorf("plot: want one PNG display result, got %+v", plot)
	}
	var cmd struct {
		ExitCode int
		Stdout   string
	}
	r.get(t, "command", &cmd)
	if cmd.ExitCode != 0 || !strings.Contains(cmd.Stdout, "accidents.csv") || !strings.Contains(cmd.Stdout, "8001 accidents.csv") {
		t.Errorf("command: %+v", cmd)
	}
	var back struct {
		Bytes int
		PNG   bool
	}
	r.get(t, "readBack", &back)
	if !back.PNG || back.Bytes < 1000 {
		t.Errorf("read back: %+v", back)
	}
	var killed bool
	r.get(t, "killed", &killed)
	if !killed {
		t.Error("kill returned false")
	}
}

// TestSDK exercises every call the issue lists, errors included.
func TestSDK(t *testing.T) {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	r := runClient(t, aliceKey, "sdk", run)
	ex := func(name string) execution {
		t.Helper()
		var e execution
		r.get(t, name, &e)
		return e
	}
	var sandboxID string
	r.get(t, "sandboxId", &sandboxID)

	t.Run("code", func(t *testing.T) {
		if e := ex("state"); e.text() != "42" || e.ExecutionCount == nil || len(e.Results) != 1 || !e.Results[0].Main {
			t.Errorf("state: %+v", e)
		}
		if e := ex("plot"); len(e.Results) != 1 || !e.Results[0].PNG || e.Results[0].Main {
			t.Errorf("plot: %+v", e)
		}
		if e := ex("html"); len(e.Results) != 1 || !strings.Contains(strings.Join(e.Results[0].Formats, ","), "html") {
			t.Errorf("dataframe: want an html result, got %+v", e)
		}
		if e := ex("zeroDivision"); e.errName() != "ZeroDivisionError" || !strings.Contains(e.Error.Traceback, "1/0") {
			t.Errorf("1/0: %+v", e)
		}
		if e := ex("envCreate"); e.text() != "hello from create" {
			t.Errorf("env of create: %+v", e)
		}
		if e := ex("envCall"); e.text() != "('per call', '1')" {
			t.Errorf("env of the call: %+v", e)
		}
		if e := ex("envAfter"); e.text() != "('hello from create', None)" {
			t.Errorf("env after the call: %+v", e)
		}
		if e := ex("cwd"); e.errName() != "" {
			t.Errorf("cwd: %+v", e)
		}
		var s struct {
			Seen   []string
			Stdout string
		}
		r.get(t, "streaming", &s)
		if !strings.Contains(s.Stdout, "released") || strings.Contains(s.Stdout, "never") {
			t.Errorf("stdout did not reach onStdout while the cell ran: %+v", s)
		}
		r.threw(t, "timeout", "TimeoutError", "")
		if e := ex("afterTimeout"); e.Stdout != "alive\n" {
			t.Errorf("after a timeout: %+v", e)
		}
	})

	t.Run("languages", func(t *testing.T) {
		var l struct {
			JS, JSState, TS, R, RPlot, Bash, BashFail, JSError, Ctx, Unknown execution
			CtxLanguage                                                      string
		}
		r.get(t, "languages", &l)
		if l.JS.text() != "21" || !l.JS.Results[0].Main || l.JSState.Stdout != "40\n" {
			t.Errorf("js: %+v, then %+v", l.JS, l.JSState)
		}
		if l.TS.text() != "22" {
			t.Errorf("ts, in js's kernel: %+v", l.TS)
		}
		if len(l.R.Results) != 1 || !strings.Contains(strings.Join(l.R.Results[0].Formats, ","), "html") || len(l.RPlot.Results) != 1 || !l.RPlot.Results[0].PNG {
			t.Errorf("r: %+v; plot %+v", l.R, l.RPlot)
		}
		if l.Bash.Stdout != "5 /tmp\n" || l.BashFail.errName() != "ExitStatus" {
			t.Errorf("bash: %+v; false: %+v", l.Bash, l.BashFail)
		}
		if l.JSError.errName() != "TypeError" {
			t.Errorf("js error: %+v", l.JSError)
		}
		if l.CtxLanguage != "javascript" || l.Ctx.text() != "undefined /home/user/ctxdir" {
			t.Errorf("a js context: language %q, %+v", l.CtxLanguage, l.Ctx)
		}
		if l.Unknown.errName() != "UnsupportedLanguage" || !strings.Contains(l.Unknown.Error.Value, "cobol") {
			t.Errorf("language cobol: %+v", l.Unknown)
		}
	})

	t.Run("links", func(t *testing.T) {
		type got struct {
			Status int
			Body   string
			CSP    string
		}
		var l struct {
			Down                               string
			Get, Expiring                      got
			Put                                int
			Uploaded                           string
			OtherPath, OtherOperation, Expired int
		}
		r.get(t, "links", &l)
		if l.Get.Status != 200 || l.Get.Body != "via a link" || l.Get.CSP != "sandbox" || l.Expiring.Body != "via a link" {
			t.Errorf("downloadUrl, fetched without the token: %+v %+v", l.Get, l.Expiring)
		}
		if l.Put != 200 || l.Uploaded != "from a link" {
			t.Errorf("uploadUrl, posted without the token: HTTP %d, then %q", l.Put, l.Uploaded)
		}
		// A changed path matches no sandbox's signature; a link used for the other
		// operation, or expired, is refused by its sandbox.
		if l.OtherPath != 404 || l.OtherOperation != 403 || l.Expired != 403 {
			t.Errorf("other path %d, other operation %d, expired %d", l.OtherPath, l.OtherOperation, l.Expired)
		}
	})

	t.Run("contexts", func(t *testing.T) {
		var c struct {
			ID, Cwd                                       string
			InCtx, Isolated, DefaultSeesNoY, AfterRestart execution
			AfterRemove                                   execution
			Listed                                        []string
		}
		r.get(t, "contexts", &c)
		if c.Cwd != "/home/user/ctxdir" || c.InCtx.text() != "/home/user/ctxdir" || c.Isolated.text() != "7" {
			t.Errorf("context: %+v", c)
		}
		if c.DefaultSeesNoY.errName() != "NameError" {
			t.Errorf("the default context sees the other's variable: %+v", c.DefaultSeesNoY)
		}
		if !strings.Contains(strings.Join(c.Listed, ","), c.ID) || !strings.Contains(strings.Join(c.Listed, ","), "default") {
			t.Errorf("listed %v", c.Listed)
		}
		if c.AfterRestart.errName() != "NameError" {
			t.Errorf("restart kept the variable: %+v", c.AfterRestart)
		}
		if c.AfterRemove.Threw != "NotFoundError" {
			t.Errorf("after remove: %+v", c.AfterRemove)
		}
	})

	t.Run("commands", func(t *testing.T) {
		var ok struct {
			ExitCode                 int
			Stdout, Stderr, Streamed string
		}
		r.get(t, "cmdOK", &ok)
		if ok.ExitCode != 0 || ok.Stdout != "one\n/home/user\nhello from create\n" || ok.Stderr != "two\n" || ok.Streamed != ok.Stdout {
			t.Errorf("command: %+v", ok)
		}
		r.threw(t, "cmdExit", "CommandExitError", "exit status 3")
		var detail struct {
			Name           string
			ExitCode       int
			Stdout, Stderr string
		}
		r.get(t, "cmdExitDetail", &detail)
		if detail.Name != "CommandExitError" || detail.ExitCode != 3 || detail.Stdout != "partial\n" || detail.Stderr != "bad\n" {
			t.Errorf("exit error: %+v", detail)
		}
		var ec struct{ Stdout, Tmp string }
		r.get(t, "cmdEnvCwd", &ec)
		if ec.Stdout != "bar\n/home/user/ctxdir\n" || ec.Tmp != "/tmp\n" {
			t.Errorf("envs, cwd: %+v", ec)
		}
		r.threw(t, "cmdCwdMissing", "CommandExitError", "no such folder")
		r.threw(t, "cmdTimeout", "TimeoutError", "")
		r.threw(t, "cmdRoot", "SandboxError", "root")
		var bg struct {
			PID               int
			Listed, After     []int
			Killed, KillAgain bool
			Waited            threw
			Stdout            string
		}
		r.get(t, "background", &bg)
		if !contains(bg.Listed, bg.PID) || contains(bg.After, bg.PID) || !bg.Killed || bg.KillAgain {
			t.Errorf("background: %+v", bg)
		}
		if bg.Waited.Threw != "CommandExitError" || !strings.Contains(bg.Stdout, "started") {
			t.Errorf("background wait: %+v", bg)
		}
		var cc struct {
			ExitCode int
			Stdout   string
		}
		r.get(t, "connectCommand", &cc)
		if cc.ExitCode != 0 || cc.Stdout != "finished\n" {
			t.Errorf("connect to a command: %+v", cc)
		}
		if e := ex("beside"); e.text() != "True" {
			t.Errorf("a command beside a running cell: %+v", e)
		}
	})

	t.Run("files", func(t *testing.T) {
		var wr struct {
			Info  struct{ Path, Name, Type string }
			Text  string
			Bytes int
		}
		r.get(t, "writeRead", &wr)
		if wr.Info.Path != "/home/user/dir/hello.txt" || wr.Info.Name != "hello.txt" || wr.Text != "hello file" || wr.Bytes != 10 {
			t.Errorf("write, read: %+v", wr)
		}
		var many []struct{ Path, Name, Type string }
		r.get(t, "writeMany", &many)
		if len(many) != 2 || many[0].Path != "/home/user/many/a.txt" || many[1].Path != "/home/user/many/b.bin" {
			t.Errorf("write many: %+v", many)
		}
		if e := ex("codeSeesFiles"); e.text() != "ahello file" {
			t.Errorf("code sees: %+v", e)
		}
		var rel string
		r.get(t, "readCodeFile", &rel)
		if rel != "relative" {
			t.Errorf("a file the code wrote: %q", rel)
		}
		var list []struct {
			Name, Type, Path string
			Size             int
		}
		r.get(t, "list", &list)
		if len(list) != 2 || list[0].Name != "a.txt" || list[0].Type != "file" || list[1].Path != "/home/user/many/b.bin" || list[1].Size != 4 {
			t.Errorf("list: %+v", list)
		}
		var deep []string
		r.get(t, "listDeep", &deep)
		if strings.Join(deep, ",") != "/home/user/many,/home/user/many/a.txt,/home/user/many/b.bin" {
			t.Errorf("list depth 2: %v", deep)
		}
		var exists struct{ File, Dir, Missing bool }
		r.get(t, "exists", &exists)
		if !exists.File || !exists.Dir || exists.Missing {
			t.Errorf("exists: %+v", exists)
		}
		var info struct {
			Name, Type, Path, Permissions string
			Size, Mode                    int
		}
		r.get(t, "getInfo", &info)
		if info.Name != "hello.txt" || info.Type != "file" || info.Path != "/home/user/dir/hello.txt" || info.Size != 10 ||
			info.Mode != 0o644 || info.Permissions != "-rw-r--r--" {
			t.Errorf("getInfo: %+v", info)
		}
		var md struct {
			Created, Again bool
			Listed         []string
		}
		r.get(t, "makeDir", &md)
		if !md.Created || md.Again || strings.Join(md.Listed, ",") != "deep:dir" {
			t.Errorf("makeDir: %+v", md)
		}
		var mv struct {
			Path      string
			OldExists bool
			Text      string
		}
		r.get(t, "rename", &mv)
		if mv.Path != "/home/user/moved/hello.txt" || mv.OldExists || mv.Text != "hello file" {
			t.Errorf("rename: %+v", mv)
		}
		var rm struct{ Gone bool }
		r.get(t, "remove", &rm)
		if !rm.Gone {
			t.Errorf("remove: %+v", rm)
		}
		r.threw(t, "readMissing", "FileNotFoundError", "missing.txt")
		r.threw(t, "renameMissing", "FileNotFoundError", "missing.txt")
		r.threw(t, "listMissing", "FileNotFoundError", "missing")
		r.threw(t, "readOutside", "InvalidArgumentError", "outside /home/user")
		r.threw(t, "writeEscape", "InvalidArgumentError", "outside /home/user")
	})

	t.Run("sandbox", func(t *testing.T) {
		var info struct {
			SandboxID, TemplateID, State, Started, End string
			Metadata                                   map[string]string
		}
		r.get(t, "info", &info)
		if info.SandboxID != sandboxID || info.TemplateID != "code-interpreter-v1" || info.State != "running" || info.Metadata["run"] != run {
			t.Errorf("getInfo: %+v", info)
		}
		started, _ := time.Parse(time.RFC3339, info.Started)
		end, _ := time.Parse(time.RFC3339, info.End)
		if d := end.Sub(started); d < 110*time.Second || d > 130*time.Second {
			t.Errorf("timeoutMs 120000 gave a sandbox from %s to %s", info.Started, info.End)
		}
		var left struct{ SecondsLeft int }
		r.get(t, "setTimeout", &left)
		if left.SecondsLeft < 500 || left.SecondsLeft > 600 {
			t.Errorf("setTimeout(600 s) left %d s", left.SecondsLeft)
		}
		var running bool
		r.get(t, "isRunning", &running)
		if !running {
			t.Error("isRunning: false")
		}
		var second string
		r.get(t, "secondId", &second)
		var list struct {
			Both, OnlySecond, None struct {
				IDs   []string
				Pages int
			}
			Metadata          map[string]string
			State, TemplateID string
		}
		r.get(t, "sandboxList", &list)
		if len(list.Both.IDs) != 2 || list.Both.Pages < 2 || !containsS(list.Both.IDs, sandboxID) || !containsS(list.Both.IDs, second) {
			t.Errorf("list with limit 1 over two sandboxes: %+v", list.Both)
		}
		if strings.Join(list.OnlySecond.IDs, ",") != second || len(list.None.IDs) != 0 {
			t.Errorf("list by metadata: %+v", list)
		}
		if list.Metadata["second"] != "yes" || list.State != "running" || list.TemplateID != "code-interpreter-v1" {
			t.Errorf("listed sandbox: %+v", list)
		}
		if e := ex("connect"); e.text() != "41" {
			t.Errorf("connect kept no state: %+v", e)
		}
		if onImages {
			r.threw(t, "unknownTemplate", "SandboxError", "cellbox image build no-such-template")
		} else {
			r.threw(t, "unknownTemplate", "SandboxError", "host's root filesystem")
		}
		var killed, again bool
		r.get(t, "kill", &killed)
		r.get(t, "killAgain", &again)
		if !killed || again {
			t.Errorf("kill: %v, again: %v", killed, again)
		}
		r.threw(t, "infoAfterKill", "SandboxNotFoundError", sandboxID)
		r.threw(t, "connectAfterKill", "SandboxNotFoundError", sandboxID)
		r.threw(t, "runAfterKill", "TimeoutError", "")
		r.threw(t, "filesAfterKill", "TimeoutError", "")
	})
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func containsS(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// raw is an HTTP request to the test server.
func raw(t *testing.T, method, path string, body io.Reader, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, serverURL(t)+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// created is a sandbox made over raw HTTP.
type created struct {
	SandboxID       string `json:"sandboxID"`
	EnvdAccessToken string `json:"envdAccessToken"`
	EnvdVersion     string `json:"envdVersion"`
}

func create(t *testing.T, key string) created {
	t.Helper()
	st, _, body := raw(t, "POST", "/v2/sandboxes", strings.NewReader(`{"templateID":"code-interpreter-v1","timeout":300}`), "X-API-Key: "+key, "Content-Type: application/json")
	var c created
	if st != http.StatusCreated || json.Unmarshal([]byte(body), &c) != nil || c.SandboxID == "" || c.EnvdAccessToken == "" {
		t.Fatalf("create: %d %s", st, body)
	}
	t.Cleanup(func() { raw(t, "DELETE", "/sandboxes/"+c.SandboxID, nil, "X-API-Key: "+key) })
	return c
}

// TestOtherTenant: bob's key sees nothing of alice's sandbox, through the SDK.
func TestOtherTenant(t *testing.T) {
	a := create(t, aliceKey)
	r := runClient(t, bobKey, "tenant", a.SandboxID)
	r.threw(t, "connect", "SandboxNotFoundError", a.SandboxID)
	r.threw(t, "info", "SandboxNotFoundError", a.SandboxID)
	r.threw(t, "setTimeout", "SandboxNotFoundError", a.SandboxID)
	var killed bool
	var list []string
	r.get(t, "kill", &killed)
	r.get(t, "list", &list)
	if killed || containsS(list, a.SandboxID) {
		t.Errorf("bob killed alice's sandbox (%v) or lists it (%v)", killed, list)
	}
	if st, _, body := raw(t, "GET", "/sandboxes/"+a.SandboxID, nil, "X-API-Key: "+aliceKey); st != http.StatusOK {
		t.Errorf("alice's sandbox after bob's attempts: %d %s", st, body)
	}
}

// TestWrongKey: a key the server does not have is AuthenticationError.
func TestWrongKey(t *testing.T) {
	r := runClient(t, "e2b_0000000000000000000000000000000000000000", "wrongKey")
	r.threw(t, "create", "AuthenticationError", "not one of this server's")
	r.threw(t, "list", "AuthenticationError", "")
}

// TestLegacySDK: e2b 2.49 creates at POST /sandboxes and connects at
// /sandboxes/{id}/connect.
func TestLegacySDK(t *testing.T) {
	r := runClient(t, aliceKey, "legacy")
	var id, out, connected string
	var killed bool
	r.get(t, "sandboxId", &id)
	r.get(t, "command", &out)
	r.get(t, "connect", &connected)
	r.get(t, "kill", &killed)
	if out != "legacy\n" || connected != id || !killed {
		t.Errorf("legacy SDK: %s", mustJSON(r))
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// sandboxHeaders are the headers of sandbox traffic.
func sandboxHeaders(id, port, token string) []string {
	h := []string{"E2b-Sandbox-Id: " + id, "E2b-Sandbox-Port: " + port}
	if token != "" {
		h = append(h, "X-Access-Token: "+token)
	}
	return h
}

// TestAttackSandboxTraffic: sandbox traffic without the sandbox's token, for sandboxes
// that do not exist, on ports nothing serves, and with paths that leave the workspace.
func TestAttackSandboxTraffic(t *testing.T) {
	a := create(t, aliceKey)
	b := create(t, bobKey)
	const envd, interp = "49983", "49999"
	cases := []struct {
		name   string
		method string
		path   string
		body   string
		hdr    []string
		status int
		want   string
	}{
		{"no token", "GET", "/files?path=x", "", sandboxHeaders(a.SandboxID, envd, ""), 401, "missing access token"},
		{"another sandbox's token", "GET", "/files?path=x", "", sandboxHeaders(a.SandboxID, envd, b.EnvdAccessToken), 401, "not this sandbox's"},
		{"another sandbox's token, execute", "POST", "/execute", `{"code":"1"}`, sandboxHeaders(a.SandboxID, interp, b.EnvdAccessToken), 401, ""},
		{"no token, contexts", "GET", "/contexts", "", sandboxHeaders(a.SandboxID, interp, ""), 401, ""},
		{"traffic token header", "GET", "/contexts", "", append(sandboxHeaders(a.SandboxID, interp, ""), "E2B-Traffic-Access-Token: "+a.EnvdAccessToken), 200, "default"},
		{"the API key is no token", "GET", "/files?path=x", "", sandboxHeaders(a.SandboxID, envd, aliceKey), 401, ""},
		{"unknown sandbox", "GET", "/files?path=x", "", sandboxHeaders("0123456789abcdef01234567", envd, a.EnvdAccessToken), 502, "not found"},
		{"path as sandbox id", "GET", "/files?path=x", "", sandboxHeaders("../../../etc", envd, a.EnvdAccessToken), 502, ""},
		{"other port", "GET", "/", "", sandboxHeaders(a.SandboxID, "22", a.EnvdAccessToken), 502, "port 22"},
		{"no port", "GET", "/", "", sandboxHeaders(a.SandboxID, "", a.EnvdAccessToken), 502, "port (none)"},
		{"health needs no token", "GET", "/health", "", sandboxHeaders(a.SandboxID, envd, ""), 204, ""},
		{"dot-dot", "GET", "/files?path=/home/user/../../etc/passwd", "", sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), 400, "outside /home/user"},
		{"relative dot-dot", "GET", "/files?path=../../etc/passwd", "", sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), 400, "outside"},
		{"absolute elsewhere", "GET", "/files?path=/proc/self/environ", "", sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), 400, "outside"},
		{"NUL", "GET", "/files?path=a%00b", "", sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), 400, "NUL"},
		{"a folder", "GET", "/files?path=/home/user", "", sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), 400, "folder"},
		{"REST through sandbox traffic", "GET", "/v1/sessions", "", sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), 404, "not served by cellbox's envd"},
		{"MCP through sandbox traffic", "POST", "/mcp", `{}`, sandboxHeaders(a.SandboxID, interp, a.EnvdAccessToken), 404, "not served"},
		{"double slash execute", "POST", "//execute", `{"code":"6*7"}`, sandboxHeaders(a.SandboxID, interp, a.EnvdAccessToken), 200, `"text":"42"`},
		{"context and language", "POST", "/execute", `{"code":"1","context_id":"x","language":"python"}`, sandboxHeaders(a.SandboxID, interp, a.EnvdAccessToken), 400, "not both"},
		{"unknown context", "POST", "/execute", `{"code":"1","context_id":"../../x"}`, sandboxHeaders(a.SandboxID, interp, a.EnvdAccessToken), 404, "not found"},
		{"bad JSON", "POST", "/execute", `{"code":`, sandboxHeaders(a.SandboxID, interp, a.EnvdAccessToken), 400, "not valid JSON"},
		{"big body", "POST", "/execute", `{"code":"` + strings.Repeat("x", 9<<20) + `"}`, sandboxHeaders(a.SandboxID, interp, a.EnvdAccessToken), 413, "limit"},
		{"rpc: stat outside", "POST", "/filesystem.Filesystem/Stat", `{"path":"/etc/passwd"}`, append(sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), "Content-Type: application/json"), 400, "invalid_argument"},
		{"rpc: remove home", "POST", "/filesystem.Filesystem/Remove", `{"path":"/home/user/.."}`, append(sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), "Content-Type: application/json"), 400, "outside"},
		{"rpc: list too deep", "POST", "/filesystem.Filesystem/ListDir", `{"path":"/home/user","depth":1000}`, append(sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), "Content-Type: application/json"), 400, "depth"},
		{"rpc: bad JSON", "POST", "/filesystem.Filesystem/Stat", `{"path":`, append(sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), "Content-Type: application/json"), 400, "invalid_argument"},
		{"rpc: unknown method", "POST", "/process.Process/Update", `{}`, append(sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), "Content-Type: application/json"), 404, ""},
		// A message past the body cap, plain or gzipped (a bomb: 16 MiB from ~16 KiB), is
		// refused before it is decoded.
		{"rpc: big message", "POST", "/filesystem.Filesystem/Stat", `{"path":"` + strings.Repeat("a", 9<<20) + `"}`, append(sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), "Content-Type: application/json"), 429, "resource_exhausted"},
		{"rpc: gzip bomb", "POST", "/filesystem.Filesystem/Stat", gzipped(`{"path":"` + strings.Repeat("a", 16<<20) + `"}`), append(sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), "Content-Type: application/json", "Content-Encoding: gzip"), 429, "resource_exhausted"},
		{"rpc: signal unknown pid", "POST", "/process.Process/SendSignal", `{"process":{"pid":4242},"signal":"SIGNAL_SIGKILL"}`, append(sandboxHeaders(a.SandboxID, envd, a.EnvdAccessToken), "Content-Type: application/json"), 404, "not_found"},
	}
	for _, c := range cases {
		t.Run("attack/"+c.name, func(t *testing.T) {
			st, _, body := raw(t, c.method, c.path, strings.NewReader(c.body), c.hdr...)
			if st != c.status || !strings.Contains(body, c.want) {
				t.Errorf("%s %s: %d %.300s; want %d containing %q", c.method, c.path, st, body, c.status, c.want)
			}
		})
	}
}

func gzipped(s string) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.String()
}

// upload sends files as the SDK does: multipart parts named "file" whose file name is
// the path as given.
func upload(t *testing.T, c created, query string, files map[string]string) (int, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for name, content := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, name))
		h.Set("Content-Type", "application/octet-stream")
		w, _ := mw.CreatePart(h)
		io.WriteString(w, content)
	}
	mw.Close()
	st, _, body := raw(t, "POST", "/files"+query, &buf, append(sandboxHeaders(c.SandboxID, "49983", c.EnvdAccessToken), "Content-Type: "+mw.FormDataContentType())...)
	return st, body
}

// TestAttackUploads: uploads that leave the workspace, are too large, or follow a link.
func TestAttackUploads(t *testing.T) {
	a := create(t, aliceKey)
	for _, c := range []struct {
		name   string
		query  string
		files  map[string]string
		status int
		want   string
	}{
		{"dot-dot name", "", map[string]string{"../../etc/evil": "x"}, 400, "outside"},
		{"absolute name elsewhere", "", map[string]string{"/etc/evil": "x"}, 400, "outside"},
		{"dot-dot query", "?path=/home/user/../x", map[string]string{"a": "x"}, 400, "outside"},
		{"the home folder", "?path=/home/user", map[string]string{"a": "x"}, 400, "folder"},
		{"too large", "", map[string]string{"big.bin": strings.Repeat("x", maxUpload+1)}, 413, "upload limit"},
		{"through a link out", "", map[string]string{"/home/user/out/evil": "x"}, 400, ""},
	} {
		t.Run("attack/"+c.name, func(t *testing.T) {
			if c.name == "through a link out" {
				st, body := execute(t, a, "import os\nos.symlink('/etc', '/home/user/out')")
				if st != 200 || strings.Contains(body, `"error"`) {
					t.Fatalf("symlink: %s", body)
				}
			}
			st, body := upload(t, a, c.query, c.files)
			if st != c.status || !strings.Contains(body, c.want) {
				t.Errorf("%d %s; want %d containing %q", st, body, c.status, c.want)
			}
		})
	}
	// Nothing of the refused uploads is in the workspace.
	_, body := execute(t, a, "import os\nsorted(os.listdir('/home/user'))")
	if !strings.Contains(body, `"text":"['out']"`) {
		t.Errorf("workspace after the refused uploads: %s", body)
	}
	if st, body := upload(t, a, "", map[string]string{"/home/user/a/b.txt": "ok", "c.txt": "ok"}); st != 200 ||
		!strings.Contains(body, `"path":"/home/user/a/b.txt"`) || !strings.Contains(body, `"path":"/home/user/c.txt"`) {
		t.Errorf("a good upload: %d %s", st, body)
	}
}

func execute(t *testing.T, c created, code string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"code": code})
	st, _, body := raw(t, "POST", "/execute", bytes.NewReader(b), sandboxHeaders(c.SandboxID, "49999", c.EnvdAccessToken)...)
	return st, body
}

// TestControlPlaneErrors: the control plane's refusals, in E2B's error shape.
func TestControlPlaneErrors(t *testing.T) {
	json := "Content-Type: application/json"
	serverURL(t)
	template := struct {
		status int
		want   string
	}{400, "--rootfs image"}
	if onImages {
		template.status, template.want = 404, "cellbox image build ubuntu"
	}
	for _, c := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		want                     string
	}{
		{"no key", "GET", "/v2/sandboxes", "", nil, 401, `"code":401`},
		{"wrong key", "POST", "/v2/sandboxes", `{}`, []string{"X-API-Key: e2b_00"}, 401, "not one of this server's"},
		{"template that is no image", "POST", "/v2/sandboxes", `{"templateID":"ubuntu"}`, []string{"X-API-Key: " + aliceKey, json}, template.status, template.want},
		{"zero timeout", "POST", "/sandboxes", `{"timeout":0}`, []string{"X-API-Key: " + aliceKey, json}, 400, "at least 1 second"},
		{"bad metadata", "POST", "/v2/sandboxes", `{"metadata":{"k":"a\u0000b"}}`, []string{"X-API-Key: " + aliceKey, json}, 400, "NUL"},
		{"bad filter", "GET", "/v2/sandboxes?metadata=novalue", "", []string{"X-API-Key: " + aliceKey}, 400, "key=value"},
		{"bad token", "GET", "/v2/sandboxes?nextToken=zzz", "", []string{"X-API-Key: " + aliceKey}, 400, "nextToken"},
		{"bad limit", "GET", "/v2/sandboxes?limit=100000", "", []string{"X-API-Key: " + aliceKey}, 400, "limit"},
		{"unknown sandbox", "DELETE", "/sandboxes/nope", "", []string{"X-API-Key: " + aliceKey}, 404, `"code":404`},
		{"unsupported call", "POST", "/sandboxes/x/snapshots", "", []string{"X-API-Key: " + aliceKey}, 404, "not part of"},
		{"pause unknown", "POST", "/sandboxes/nope/pause", "", []string{"X-API-Key: " + aliceKey}, 404, `"code":404`},
		{"resume unknown", "POST", "/sandboxes/nope/resume", "", []string{"X-API-Key: " + aliceKey}, 404, `"code":404`},
		{"fork unknown", "POST", "/sandboxes/nope/fork", `{"count":2}`, []string{"X-API-Key: " + aliceKey, json}, 404, `"code":404`},
		{"fork none", "POST", "/sandboxes/nope/fork", `{"count":0}`, []string{"X-API-Key: " + aliceKey, json}, 400, "at least 1"},
		{"pause, files only", "POST", "/sandboxes/nope/pause", `{"memory":false}`, []string{"X-API-Key: " + aliceKey, json}, 400, "keeps only the files"},
		{"create, pause keeping files only", "POST", "/v2/sandboxes", `{"autoPause":true,"autoPauseMemory":false}`, []string{"X-API-Key: " + aliceKey, json}, 400, "keeps only the files"},
		{"create, pause after more than the idle maximum", "POST", "/v2/sandboxes", `{"autoPause":true,"timeout":90000}`, []string{"X-API-Key: " + aliceKey, json}, 400, "--max-idle-timeout"},
		{"bad state", "GET", "/v2/sandboxes?state=running,sleeping", "", []string{"X-API-Key: " + aliceKey}, 400, "running or paused"},
		{"not JSON", "POST", "/v2/sandboxes", `{`, []string{"X-API-Key: " + aliceKey, json}, 400, "not valid JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _, body := raw(t, c.method, c.path, strings.NewReader(c.body), c.hdr...)
			if st != c.status || !strings.Contains(body, c.want) {
				t.Errorf("%d %s; want %d containing %q", st, body, c.status, c.want)
			}
		})
	}
}

// needPause calls Missing unless the tests' runtime can pause sandboxes, and returns it.
func needPause(t *testing.T) string {
	t.Helper()
	switch rt := testserver.Runtime(); rt {
	case "runc":
		testbin.NeedProgram(t, "criu", "criu (scripts/criu.sh builds it; make deps installs it)")
		return rt
	case "runsc":
		return rt
	default:
		testbin.Missing(t, "pausing needs runc (with CRIU) or runsc, not %s", rt)
		return rt
	}
}

// TestPause pauses and resumes sandboxes through E2B's SDK: by hand and by their timeout,
// listed as paused, resumed by connect (and by a call) with their variables; a fork; the
// refusals. Pausing takes CRIU on runc (make deps installs it), or runsc.
func TestPause(t *testing.T) {
	rt := needPause(t)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	r := runClient(t, aliceKey, "pause", run)
	var id, idleID string
	r.get(t, "sandboxId", &id)
	r.get(t, "idleId", &idleID)
	ex := func(name string) execution {
		t.Helper()
		var e execution
		r.get(t, name, &e)
		return e
	}
	type info struct {
		State     string
		Lifecycle *struct {
			OnTimeout  string
			AutoResume bool
		}
		SecondsLeft int
	}
	infoOf := func(name string) info {
		t.Helper()
		var i info
		r.get(t, name, &i)
		return i
	}
	type listedSandbox struct{ ID, State string }
	listOf := func(name string) []listedSandbox {
		t.Helper()
		var l []listedSandbox
		r.get(t, name, &l)
		return l
	}
	boolOf := func(name string) bool {
		t.Helper()
		var b bool
		r.get(t, name, &b)
		return b
	}

	t.Run("by hand", func(t *testing.T) {
		if e := ex("set"); e.errName() != "" {
			t.Fatalf("x = 41: %+v", e)
		}
		// The timeout (300 s by default) is the idle timeout: no lifetime.
		if i := infoOf("info"); i.State != "running" || i.Lifecycle == nil || i.Lifecycle.OnTimeout != "pause" || !i.Lifecycle.AutoResume ||
			i.SecondsLeft < 250 || i.SecondsLeft > 300 {
			t.Errorf("getInfo of a sandbox that pauses on timeout: %+v", i)
		}
		r.threw(t, "busy", "SandboxError", "in the background")
		if !boolOf("pause") || boolOf("pauseAgain") {
			t.Errorf("pause: %s, again: %s; want true, then false", r["pause"], r["pauseAgain"])
		}
		if i := infoOf("infoPaused"); i.State != "paused" || i.SecondsLeft > 0 {
			t.Errorf("getInfo of a paused sandbox: %+v; want paused, ended when it was paused", i)
		}
	})

	t.Run("listed", func(t *testing.T) {
		// The run has one sandbox yet, paused.
		if l := listOf("listPaused"); len(l) != 1 || l[0].ID != id || l[0].State != "paused" {
			t.Errorf("list of paused sandboxes: %+v", l)
		}
		if l := listOf("listRunning"); len(l) != 0 {
			t.Errorf("list of running sandboxes: %+v; want none", l)
		}
		if l := listOf("listAll"); len(l) != 1 || l[0].State != "paused" {
			t.Errorf("list without a state: %+v; want the paused sandbox", l)
		}
		var v1 []string
		r.get(t, "listV1", &v1)
		if containsS(v1, id) {
			t.Errorf("GET /sandboxes (running only, as on E2B) lists the paused sandbox: %v", v1)
		}
	})

	t.Run("connect resumes", func(t *testing.T) {
		if e := ex("connect"); e.text() != "42" {
			t.Errorf("x + 1 after connect: %+v", e)
		}
		if i := infoOf("infoResumed"); i.State != "running" || i.Lifecycle == nil || i.Lifecycle.OnTimeout != "pause" {
			t.Errorf("after connect: %+v", i)
		}
	})

	t.Run("timeout pauses", func(t *testing.T) {
		var paused, resumed string
		r.get(t, "idlePaused", &paused)
		r.get(t, "idleResumed", &resumed)
		if e := ex("idleSet"); e.errName() != "" || paused != "paused" {
			t.Errorf("a sandbox of timeout 3 s, idle: %s (y = 7: %+v)", paused, e)
		}
		if e := ex("callResumes"); e.text() != "7" || resumed != "running" {
			t.Errorf("runCode on the paused sandbox: %+v, then %s", e, resumed)
		}
		// setTimeout and connect leave a sandbox that pauses on timeout without a lifetime,
		// which would end it.
		for _, step := range []string{"setTimeoutPausing", "legacyConnect"} {
			if i := infoOf(step); i.State != "running" || i.Lifecycle == nil || i.Lifecycle.OnTimeout != "pause" || i.SecondsLeft > 3 {
				t.Errorf("%s: %+v; want running, pausing within its 3 s", step, i)
			}
		}
	})

	t.Run("fork", func(t *testing.T) {
		var f struct {
			Forks []struct {
				ID, X, Threw, Message string
			}
			Other, Source string
			Info          info
		}
		r.get(t, "fork", &f)
		if len(f.Forks) != 2 || f.Forks[0].X != "41" || f.Forks[1].X != "41" || f.Forks[0].ID == f.Forks[1].ID ||
			f.Forks[0].ID == id || f.Forks[1].ID == id {
			t.Errorf("fork of 2: %+v", f.Forks)
		}
		if f.Other != "41" || f.Source != "41" {
			t.Errorf("a fork's change reached the other fork (%s) or the source (%s)", f.Other, f.Source)
		}
		if f.Info.State != "running" || f.Info.Lifecycle == nil || f.Info.Lifecycle.OnTimeout != "pause" {
			t.Errorf("a fork of a sandbox that pauses on timeout: %+v", f.Info)
		}
	})

	t.Run("not created to pause", func(t *testing.T) {
		if i := infoOf("plainInfo"); i.Lifecycle == nil || i.Lifecycle.OnTimeout != "kill" {
			t.Errorf("getInfo of a plain sandbox: %+v", i)
		}
		if rt == "runc" {
			// Its kernel is forked from a template shared with other sandboxes.
			r.threw(t, "pausePlain", "SandboxError", "onTimeout: 'pause'")
			r.threw(t, "forkPlain", "SandboxError", "onTimeout: 'pause'")
		} else if !boolOf("pausePlain") {
			t.Errorf("pause of a plain sandbox on %s: %s", rt, r["pausePlain"])
		}
	})

	t.Run("refusals", func(t *testing.T) {
		r.threw(t, "pauseUnknown", "SandboxNotFoundError", "0123456789abcdef01234567")
		r.threw(t, "connectUnknown", "SandboxNotFoundError", "0123456789abcdef01234567")
		r.threw(t, "keepMemoryFalse", "SandboxError", "keeps only the files")
		r.threw(t, "createKeepMemoryFalse", "SandboxError", "keeps only the files")
		var killed []bool
		r.get(t, "killed", &killed)
		if slices.Contains(killed, false) {
			t.Errorf("kill: %v", killed)
		}
	})
}

// TestPauseRaw: the statuses of pause and of E2B's deprecated resume, over raw HTTP.
func TestPauseRaw(t *testing.T) {
	needPause(t)
	key := []string{"X-API-Key: " + aliceKey, "Content-Type: application/json"}
	st, _, body := raw(t, "POST", "/v2/sandboxes", strings.NewReader(`{"templateID":"code-interpreter-v1","autoPause":true,"timeout":600}`), key...)
	var c created
	if st != http.StatusCreated || json.Unmarshal([]byte(body), &c) != nil {
		t.Fatalf("create: %d %s", st, body)
	}
	t.Cleanup(func() { raw(t, "DELETE", "/sandboxes/"+c.SandboxID, nil, key...) })
	if st, body := execute(t, c, "z = 5"); st != 200 || strings.Contains(body, `"error"`) {
		t.Fatalf("z = 5: %d %s", st, body)
	}
	for _, step := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"resume a running sandbox", "resume", "", 409, "already running"},
		{"pause", "pause", "", 204, ""},
		{"pause again", "pause", "{}", 409, "already paused"},
		{"resume", "resume", `{"timeout":60}`, 201, c.SandboxID},
		{"resume again", "resume", "", 409, "already running"},
		{"pause, memory true", "pause", `{"memory":true}`, 204, ""},
		{"connect", "connect", `{"timeout":60}`, 201, c.SandboxID},
		{"connect to a running sandbox", "connect", `{"timeout":60}`, 200, c.SandboxID},
	} {
		st, _, body := raw(t, "POST", "/sandboxes/"+c.SandboxID+"/"+step.path, strings.NewReader(step.body), key...)
		if st != step.status || !strings.Contains(body, step.want) {
			t.Fatalf("%s: %d %s; want %d containing %q", step.name, st, body, step.status, step.want)
		}
	}
	if st, body := execute(t, c, "z"); st != 200 || !strings.Contains(body, `"text":"5"`) {
		t.Errorf("z after two pauses: %d %s", st, body)
	}
	// Neither timeout gave the sandbox a lifetime: its end is its idle timeout's.
	st, _, body = raw(t, "GET", "/sandboxes/"+c.SandboxID, nil, key...)
	var d struct {
		EndAt     time.Time
		Lifecycle struct{ OnTimeout string }
	}
	if json.Unmarshal([]byte(body), &d) != nil || st != 200 || d.Lifecycle.OnTimeout != "pause" || time.Until(d.EndAt) < 500*time.Second {
		t.Errorf("after resume and connect with timeout 60: %d %s", st, body)
	}
}

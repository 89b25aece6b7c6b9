package openai_test

// End-to-end tests of the Containers and Files APIs: OpenAI's official JS SDK (npm openai,
// testdata/openaiclient) drives a real cellbox server (in process) over real HTTP, with
// real runc sandboxes, the real guest and IPython.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testhost"
	"github.com/cellbox/cellbox/internal/testserver"
)

const (
	aliceKey = "oai_a11ce000000000000000000000000000000000"
	bobKey   = "oai_b0b00000000000000000000000000000000000"
)

// shared is the server of this package's tests, with the keys of alice and bob; sessions
// may ask for at most 4 GiB (so memory_limit 16g and 64g are refused).
var shared = &testserver.Shared{Prefix: "openai", FromSetup: true, Prepare: func(dir string, cfg *config.Config, opts *server.Options) error {
	file := filepath.Join(dir, "keys")
	if err := os.WriteFile(file, []byte(aliceKey+" alice\n"+bobKey+" bob\n"), 0o600); err != nil {
		return err
	}
	keys, err := auth.Load("", file)
	if err != nil {
		return err
	}
	cfg.MaxMemoryMB = 4096
	opts.Keys, opts.Quiet = keys, true
	return nil
}}

func TestMain(m *testing.M) { testserver.Main(m, shared) }

// report is what client.mjs printed: one entry per step.
type report map[string]json.RawMessage

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

// threw checks that step name threw class with status, its message containing contains.
func (r report) threw(t *testing.T, name, class string, status int, contains string) {
	t.Helper()
	var th struct {
		Threw   string `json:"threw"`
		Message string `json:"message"`
		Status  int    `json:"status"`
	}
	r.get(t, name, &th)
	if th.Threw != class || th.Status != status || !strings.Contains(th.Message, contains) {
		t.Errorf("%s: threw %s (%d) %q; want %s (%d) containing %q", name, th.Threw, th.Status, th.Message, class, status, contains)
	}
}

// runClient runs a scenario of client.mjs with key.
func runClient(t *testing.T, key string, args ...string) report {
	t.Helper()
	node := testbin.NeedProgram(t, "node", "nodejs")
	dir, err := filepath.Abs(filepath.Join("testdata", "openaiclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		testbin.Missing(t, "needs OpenAI's SDK: run npm ci in %s (make test does)", dir)
	}
	url := shared.Start(t).URL
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"client.mjs"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CELLBOX_URL="+url, "OPENAI_API_KEY="+key, "OPENAI_BASE_URL=", "OPENAI_LOG=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var r report
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil || err != nil || r["error"] != nil {
		t.Fatalf("client: %v, %v\nreport: %s\nstderr: %s", err, jerr, &stdout, &stderr)
	}
	return r
}

type container struct {
	ID           string `json:"id"`
	Object       string `json:"object"`
	Name         string `json:"name"`
	Status       string `json:"status"`
	CreatedAt    int64  `json:"created_at"`
	LastActiveAt int64  `json:"last_active_at"`
	MemoryLimit  string `json:"memory_limit"`
	ExpiresAfter struct {
		Anchor  string `json:"anchor"`
		Minutes int    `json:"minutes"`
	} `json:"expires_after"`
}

type containerFile struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Path        string `json:"path"`
	Source      string `json:"source"`
	Bytes       int64  `json:"bytes"`
	ContainerID string `json:"container_id"`
}

// TestSDK: containers and their files, /v1/files, and the SDK's errors, through the SDK.
func TestSDK(t *testing.T) {
	r := runClient(t, aliceKey, "sdk")
	var uploaded struct {
		ID, Filename, Purpose, Object string
		Bytes                         int64
	}
	r.get(t, "uploaded", &uploaded)
	if !strings.HasPrefix(uploaded.ID, "file-") || uploaded.Filename != "data.csv" || uploaded.Bytes != 23 || uploaded.Purpose != "user_data" {
		t.Errorf("files.create: %+v", uploaded)
	}
	var created, retrieved container
	r.get(t, "created", &created)
	r.get(t, "retrieved", &retrieved)
	if !strings.HasPrefix(created.ID, "cntr_") || created.Object != "container" || created.Name != "sdk-box" || created.Status != "running" ||
		created.MemoryLimit != "1g" || created.ExpiresAfter.Anchor != "last_active_at" || created.ExpiresAfter.Minutes != 30 || created.CreatedAt == 0 {
		t.Errorf("containers.create: %+v", created)
	}
	if retrieved.ID != created.ID || retrieved.Name != "sdk-box" || retrieved.MemoryLimit != "1g" {
		t.Errorf("containers.retrieve: %+v", retrieved)
	}
	var listed, byName []string
	r.get(t, "listed", &listed)
	r.get(t, "listedByName", &byName)
	if len(listed) != 2 || !slices.Contains(listed, created.ID) {
		t.Errorf("containers.list (a page of 1, followed): %v", listed)
	}
	if len(byName) != 1 || byName[0] == created.ID {
		t.Errorf("containers.list({name}): %v", byName)
	}
	var upload, fromID containerFile
	r.get(t, "fileCreated", &upload)
	r.get(t, "fileFromID", &fromID)
	if upload.Path != "/mnt/data/notes.txt" || upload.Object != "container.file" || upload.Source != "user" || upload.Bytes != 16 || upload.ContainerID != created.ID {
		t.Errorf("containers.files.create (multipart): %+v", upload)
	}
	if fromID.Path != "/mnt/data/data.csv" || fromID.Source != "user" || fromID.Bytes != 23 {
		t.Errorf("containers.files.create (file_id): %+v", fromID)
	}
	var executed struct {
		Status string `json:"status"`
	}
	r.get(t, "executed", &executed)
	if executed.Status != "ok" {
		t.Fatalf("execute: %s", r["executed"])
	}
	var files []containerFile
	r.get(t, "files", &files)
	sources := map[string]string{}
	for _, f := range files {
		sources[f.Path] = f.Source
	}
	if len(files) != 3 || sources["/mnt/data/data.csv"] != "user" || sources["/mnt/data/notes.txt"] != "user" || sources["/mnt/data/out/summary.csv"] != "assistant" {
		t.Errorf("containers.files.list: %+v", files)
	}
	var written containerFile
	r.get(t, "writtenRetrieved", &written)
	var content, notes string
	r.get(t, "writtenContent", &content)
	r.get(t, "notesContent", &notes)
	if written.Path != "/mnt/data/out/summary.csv" || content != "total,8\n" || notes != "hello, container" {
		t.Errorf("a file code wrote: %+v %q; notes %q", written, content, notes)
	}
	var after []string
	r.get(t, "filesAfterDelete", &after)
	if !slices.Equal(after, []string{"/mnt/data/data.csv", "/mnt/data/out/summary.csv"}) {
		t.Errorf("after containers.files.delete: %v", after)
	}
	r.threw(t, "deletedFileRetrieved", "NotFoundError", 404, "no file")

	var ids []string
	r.get(t, "filesList", &ids)
	var fileContent string
	r.get(t, "fileContent", &fileContent)
	if !slices.Equal(ids, []string{uploaded.ID}) || fileContent != "city,accidents\nA,3\nB,5\n" {
		t.Errorf("files.list %v, files.content %q", ids, fileContent)
	}
	var del struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
	}
	r.get(t, "fileDelete", &del)
	if del.ID != uploaded.ID || !del.Deleted {
		t.Errorf("files.delete: %+v", del)
	}
	r.threw(t, "fileAfterDelete", "NotFoundError", 404, "no file")
	r.threw(t, "unknownContainer", "NotFoundError", 404, "no container")
	r.threw(t, "tooMuchMemory", "BadRequestError", 400, "memory_limit 64g (65536 MiB) is above this server's maximum of 4096 MiB")
	r.threw(t, "unknownFileID", "NotFoundError", 404, "no file")
	r.threw(t, "afterDelete", "NotFoundError", 404, "no container")

	// bob sees nothing of alice's container.
	rb := runClient(t, bobKey, "tenant", created.ID)
	for _, step := range []string{"retrieve", "files", "delete"} {
		rb.threw(t, step, "NotFoundError", 404, "no container")
	}
	var bobs []string
	rb.get(t, "list", &bobs)
	if slices.Contains(bobs, created.ID) {
		t.Errorf("bob's list has alice's container: %v", bobs)
	}
}

// TestWrongKey: the REST API's refusal, in cellbox's error shape, is read by the SDK as an
// AuthenticationError with cellbox's message.
func TestWrongKey(t *testing.T) {
	r := runClient(t, "oai_wrong0000000000000000000000000000000000", "wrongKey")
	r.threw(t, "list", "AuthenticationError", 401, "the API key is not one of this server's")
	r.threw(t, "create", "AuthenticationError", 401, "the API key is not one of this server's")
}

// TestNetworkPolicy: network_policy becomes the session's egress policy; curl through the
// container's proxy is refused (403) beyond the allowlist and when disabled.
func TestNetworkPolicy(t *testing.T) {
	shared.Start(t)
	h := testhost.New(t)
	echo := h.ServeHTTP(t, netip.AddrPortFrom(h.Addr(1), 80), testhost.Echo())
	r := runClient(t, aliceKey, "network", "http://"+echo.String()+"/")
	for step, want := range map[string]string{"refusedFetch": "403", "allowedFetch": "200", "disabledFetch": "403"} {
		var got string
		r.get(t, step, &got)
		if got != want {
			t.Errorf("%s: curl said %q; want %s", step, got, want)
		}
	}
	var refused, disabled struct {
		Type           string   `json:"type"`
		AllowedDomains []string `json:"allowed_domains"`
	}
	r.get(t, "refusedPolicy", &refused)
	r.get(t, "disabledPolicy", &disabled)
	if refused.Type != "allowlist" || !slices.Equal(refused.AllowedDomains, []string{"pypi.org"}) || disabled.Type != "disabled" {
		t.Errorf("network_policy read back: %+v, %+v", refused, disabled)
	}
}

// TestResponsesSDK: the SDK's responses.create (and its streaming helper) with the
// code_interpreter tool, the model played by a Chat Completions stand-in: the answer comes
// from code that ran in a cellbox sandbox, a follow-up uses the variable of the turn
// before, a function tool of the client's goes out and its output comes back.
func TestResponsesSDK(t *testing.T) {
	model := llmtest.NewOpenAI(t, func(r llmtest.Request) llmtest.Reply {
		last := r.Messages[len(r.Messages)-1]
		if len(last.ToolResults) > 0 {
			res := last.ToolResults[0]
			if res.Name == "get_weather" {
				return llmtest.Text("In Paris: " + res.Text)
			}
			return llmtest.Text("The result is " + strings.TrimSpace(res.Text))
		}
		switch {
		case strings.Contains(last.Text, "weather"):
			return llmtest.CallTool("get_weather", `{"city": "Paris"}`)
		case strings.Contains(last.Text, "Add one"):
			return llmtest.CallTool("python", `{"code": "x = x + 1\nprint(x)"}`)
		}
		return llmtest.CallTool("python", `{"code": "x = 6 * 7\nprint(x)"}`)
	})
	t.Setenv("OPENAI_BASE_URL", model.URL)
	t.Setenv("OPENAI_API_KEY", model.Key)
	t.Setenv("ANTHROPIC_API_KEY", "")
	r := runClient(t, aliceKey, "responses")
	get := func(name string) (s struct {
		ID         string `json:"id"`
		Status     string `json:"status"`
		OutputText string `json:"output_text"`
		Types      []string
		Calls      []struct {
			Code        string `json:"code"`
			ContainerID string `json:"container_id"`
			Status      string `json:"status"`
			Outputs     []struct{ Type, Logs string }
		}
		Functions []struct {
			Name   string `json:"name"`
			CallID string `json:"call_id"`
		}
	}) {
		r.get(t, name, &s)
		return s
	}
	first := get("first")
	if first.Status != "completed" || first.OutputText != "The result is 42" || strings.Join(first.Types, ",") != "code_interpreter_call,message" ||
		len(first.Calls) != 1 || !strings.HasPrefix(first.Calls[0].ContainerID, "cntr_") || len(first.Calls[0].Outputs) != 1 || first.Calls[0].Outputs[0].Logs != "42\n" {
		t.Errorf("first: %+v", first)
	}
	second := get("second")
	if second.OutputText != "The result is 43" || second.Calls[0].ContainerID != first.Calls[0].ContainerID {
		t.Errorf("second (previous_response_id, the same container): %+v", second)
	}
	var streamed struct {
		Events []string
	}
	r.get(t, "streamed", &streamed)
	events := strings.Join(streamed.Events, ",")
	for _, want := range []string{"response.created", "response.code_interpreter_call.interpreting", "response.code_interpreter_call_code.done",
		"response.output_text.delta", "response.completed"} {
		if !strings.Contains(events, want) {
			t.Errorf("the stream has no %s: %s", want, events)
		}
	}
	asked := get("asked")
	if len(asked.Functions) != 1 || asked.Functions[0].Name != "get_weather" {
		t.Errorf("asked: %+v", asked)
	}
	if answered := get("answered"); answered.OutputText != "In Paris: sunny, 21 C" {
		t.Errorf("answered: %+v", answered)
	}
	if retrieved := get("retrieved"); retrieved.OutputText != "The result is 42" {
		t.Errorf("retrieved: %+v", retrieved)
	}
	r.threw(t, "retrieveDeleted", "NotFoundError", 404, "no response")
	r.threw(t, "unknownPrevious", "NotFoundError", 404, "resp_nope")
	r.threw(t, "malformedTool", "BadRequestError", 400, "container")
	r.threw(t, "unknownContainer", "NotFoundError", 404, "cntr_0123456789abcdef01234567")
}

package main

// cellbox mcp as an MCP client starts it, and cellbox serve's /mcp: the Go SDK's client on
// stdio (local-unsafe backend: fast, no root), and the official TypeScript SDK's client on
// both transports with the runc backend.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/mcpserver"
	"github.com/cellbox/cellbox/internal/testbin"
)

// mcpProcess is a `cellbox mcp` with a Go SDK client on its stdio.
type mcpProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	cs     *mcp.ClientSession
}

func startMCP(t *testing.T, args ...string) *mcpProcess {
	t.Helper()
	if testing.Short() {
		t.Skip("starts sandboxes; not in -short mode")
	}
	testbin.NeedIPython(t)
	p := &mcpProcess{}
	p.cmd = exec.Command(testbin.Cellbox(t), append([]string{"mcp", "--state-dir", t.TempDir(), "--log-level", "info"}, args...)...)
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	p.cs, err = c.Connect(context.Background(), &mcp.IOTransport{Reader: stdout, Writer: p.stdin}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, &p.stderr)
	}
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *mcpProcess) wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(time.Minute):
		t.Fatalf("cellbox mcp did not exit\n%s", &p.stderr)
	}
	return -1
}

// TestMCPStdioEnds: the session of cellbox mcp ends, and the process exits 0, when stdin
// closes and on SIGTERM.
func TestMCPStdioEnds(t *testing.T) {
	for _, how := range []string{"stdin closed", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			p := startMCP(t, "--backend", "local-unsafe", "--pool-size", "0", "--preimport", "")
			res, err := p.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "python", Arguments: map[string]any{"code": "6 * 7"}})
			if err != nil || res.IsError {
				t.Fatalf("%v %+v\n%s", err, res, &p.stderr)
			}
			id, _ := res.Meta[mcpserver.MetaSessionID].(string)
			if how == "SIGTERM" {
				p.cmd.Process.Signal(syscall.SIGTERM)
			} else {
				p.stdin.Close()
			}
			if code := p.wait(t); code != 0 {
				t.Fatalf("exit code %d\n%s", code, &p.stderr)
			}
			if id == "" || !strings.Contains(p.stderr.String(), `session ended" session_id=`+id) {
				t.Fatalf("session %q not ended:\n%s", id, &p.stderr)
			}
		})
	}
}

// TestMCPServeShutdown sends SIGTERM to a server with an MCP connection over HTTP whose
// call runs: the call gets its (interrupted) result, and the server exits 0 although the
// connection's event stream is open.
func TestMCPServeShutdown(t *testing.T) {
	needRunc(t)
	srv := serve(t, t.TempDir(), "--pool-size", "0", "--log-level", "info")
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	running := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "python", Arguments: map[string]any{"code": "import time; time.sleep(600)"}})
		running <- answer{res, err}
	}()
	rc := client.New(srv.URL)
	testbin.WaitFor(t, time.Minute, "the session busy", func() error {
		list, err := rc.ListSessions(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].State != "busy" {
			return fmt.Errorf("sessions %+v", list)
		}
		return nil
	})
	srv.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case a := <-running:
		if a.err != nil || !a.res.IsError || !strings.Contains(text(a.res), "interrupted") {
			t.Errorf("running call's answer: %+v, %v; want an interrupted result", a.res, a.err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no answer to the running call\n%s", srv.Output())
	}
	select {
	case <-srv.Exited:
		if srv.Err != nil {
			t.Errorf("cellbox serve: %v, want exit 0\n%s", srv.Err, srv.Output())
		}
	case <-time.After(40 * time.Second): // its own shutdown gives up after 30 s
		t.Fatalf("cellbox serve still runs 40 s after SIGTERM\n%s", srv.Output())
	}
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// tsReport is what testdata/tsclient/client.mjs prints.
type tsReport struct {
	Transport string            `json:"transport"`
	Server    map[string]string `json:"server"`
	Tools     []string          `json:"tools"`
	SessionID string            `json:"sessionId"`
	FirstText string            `json:"firstText"`
	State     struct {
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	} `json:"state"`
	Progress int `json:"progress"`
	Images   []struct {
		MIMEType string `json:"mimeType"`
		PNG      bool   `json:"png"`
	} `json:"images"`
	ZeroDivision struct {
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	} `json:"zeroDivision"`
	Resources    []string `json:"resources"`
	ResourceText string   `json:"resourceText"`
	HostileRead  string   `json:"hostileRead"`
	Error        string   `json:"error"`
}

// tsClient is node and the folder of the MCP TypeScript SDK's client scripts.
func tsClient(t *testing.T) (node, dir string) {
	t.Helper()
	node = testbin.NeedProgram(t, "node", "nodejs")
	dir, err := filepath.Abs(filepath.Join("..", "..", "internal", "mcpserver", "testdata", "tsclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		testbin.Missing(t, "needs the MCP TypeScript SDK: run npm ci in %s (make test does)", dir)
	}
	return node, dir
}

// TestMCPTypeScriptClient runs the official MCP TypeScript SDK's client against cellbox mcp
// (stdio) and cellbox serve's /mcp (streamable HTTP), on the setup of testbin.TestSetup
// (runc on the host's root unless CELLBOX_TEST_SETUP says otherwise).
func TestMCPTypeScriptClient(t *testing.T) {
	setup := testbin.TestSetup(t)
	node, dir := tsClient(t)
	bin := testbin.Cellbox(t)
	run := func(t *testing.T, args ...string) tsReport {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, append([]string{"client.mjs"}, args...)...)
		cmd.Dir = dir
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var r tsReport
		if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil || err != nil || r.Error != "" {
			t.Fatalf("client: %v, %v\nreport: %s\nstderr: %s", err, jerr, &stdout, &stderr)
		}
		return r
	}
	check := func(t *testing.T, r tsReport) {
		t.Helper()
		if r.Server["name"] != "cellbox" || strings.Join(r.Tools, ",") != "python,shell" {
			t.Errorf("server %v, tools %v", r.Server, r.Tools)
		}
		if r.SessionID == "" || !strings.Contains(r.FirstText, "session_id: "+r.SessionID) {
			t.Errorf("session %q not named in the first result %q", r.SessionID, r.FirstText)
		}
		if r.State.IsError || strings.TrimSpace(r.State.Text) != "42" {
			t.Errorf("state not kept: %+v", r.State)
		}
		if r.Progress == 0 {
			t.Error("no progress notification")
		}
		if len(r.Images) != 1 || r.Images[0].MIMEType != "image/png" || !r.Images[0].PNG {
			t.Errorf("plot: %+v, want one image/png", r.Images)
		}
		if !r.ZeroDivision.IsError || !strings.Contains(r.ZeroDivision.Text, "ZeroDivisionError") {
			t.Errorf("1/0: %+v", r.ZeroDivision)
		}
		if r.ResourceText != "hello from cellbox" || r.HostileRead != "refused" {
			t.Errorf("resources %v: read %q, hostile read %s", r.Resources, r.ResourceText, r.HostileRead)
		}
	}
	t.Run("stdio", func(t *testing.T) {
		check(t, run(t, append([]string{"stdio", bin, "mcp", "--state-dir", stateDir}, setup.Flags()...)...))
	})
	t.Run("streamable HTTP", func(t *testing.T) {
		srv := serve(t, t.TempDir(), append([]string{"--pool-size", "1"}, setup.Flags()...)...)
		check(t, run(t, "http", srv.URL+"/mcp"))
		t.Run("HTTP+SSE", func(t *testing.T) { check(t, run(t, "sse", srv.URL+"/mcp/sse")) })
	})
}

// TestPythonToolServer: gpt-oss's python tool as vLLM's tool server client reaches it (the
// MCP TypeScript SDK's HTTP+SSE client): a server named python with a tool python(code),
// state kept across connections of one conversation (x-session-id), none shared with
// another conversation.
func TestPythonToolServer(t *testing.T) {
	setup := testbin.TestSetup(t)
	node, dir := tsClient(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	serve(t, t.TempDir(), append([]string{"--pool-size", "1", "--python-tool-addr", addr}, setup.Flags()...)...)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "python.mjs", "http://"+addr+"/sse", "conversation-1", "conversation-2")
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	type call struct {
		Server       map[string]string
		Instructions string
		Tools        []struct {
			Name     string
			Required []string
		}
		IsError bool
		Text    string
	}
	var r struct {
		First, Again, Other call
		Error               string
	}
	if err := cmd.Run(); err != nil || json.Unmarshal(stdout.Bytes(), &r) != nil || r.Error != "" {
		t.Fatalf("client: %v\nreport: %s\nstderr: %s", err, &stdout, &stderr)
	}
	if r.First.Server["name"] != "python" || len(r.First.Tools) != 1 || r.First.Tools[0].Name != "python" ||
		strings.Join(r.First.Tools[0].Required, ",") != "code" || !strings.Contains(r.First.Instructions, "stateful") {
		t.Errorf("what vLLM matches and shows the model: server %v, tools %+v, instructions %q", r.First.Server, r.First.Tools, r.First.Instructions)
	}
	if r.First.IsError || !strings.Contains(r.First.Text, "set") {
		t.Errorf("first call: %+v", r.First)
	}
	if r.Again.IsError || !strings.Contains(r.Again.Text, "42") {
		t.Errorf("the conversation's variable on a new connection: %+v", r.Again)
	}
	if !r.Other.IsError || !strings.Contains(r.Other.Text, "NameError") {
		t.Errorf("another conversation saw the variable: %+v", r.Other)
	}
}

// TestMCPStdioSessionTools: over cellbox mcp's stdio, the MCP TypeScript SDK's client sees
// tools/list_changed once a cell defines a tool, lists it and calls it (internal/mcpserver
// runs the same script over HTTP; local-unsafe backend: fast, no root).
func TestMCPStdioSessionTools(t *testing.T) {
	testbin.NeedIPython(t)
	node, dir := tsClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "tools.mjs", "stdio", testbin.Cellbox(t), "mcp", "--state-dir", t.TempDir(),
		"--backend", "local-unsafe", "--pool-size", "0", "--preimport", "")
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var r struct {
		Changes int      `json:"changes"`
		After   []string `json:"after"`
		Call    struct {
			IsError bool     `json:"isError"`
			Texts   []string `json:"texts"`
		} `json:"call"`
		Error string `json:"error"`
	}
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil || err != nil || r.Error != "" {
		t.Fatalf("client: %v, %v\nreport: %s\nstderr: %s", err, jerr, &stdout, &stderr)
	}
	if r.Changes == 0 || !slices.Contains(r.After, "greet") {
		t.Errorf("after list_changed (%d): tools %v", r.Changes, r.After)
	}
	if r.Call.IsError || len(r.Call.Texts) == 0 || r.Call.Texts[0] != `"hello ada hello ada"` {
		t.Errorf("greet(ada, 2): %+v", r.Call)
	}
}

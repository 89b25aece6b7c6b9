package httpapi_test

// API keys and tenants end to end: a real server (in process) with keys, on the local-unsafe
// backend (the real guest and IPython; isolation is not what these tests are about), real
// HTTP, and the MCP SDK's own client over streamable HTTP.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/mcpserver"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testbin"
)

const (
	aliceKey = "cbx_a11ce00000000000000000000000000000000a"
	bobKey   = "e2b_b0b0000000000000000000000000000000000b"
)

// keyed is a server that requires the keys of alice and bob.
type keyed struct {
	url string
	log *testbin.Buffer // its log, at info
}

func startKeyed(t *testing.T, mod func(*config.Config)) *keyed {
	t.Helper()
	testbin.NeedIPython(t)
	file := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(file, []byte("# the test's tenants\r\n"+aliceKey+" alice\r\n"+bobKey+"\tbob\r\n"), 0o600)
	keys, err := auth.Load("", file)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Addr = "127.0.0.1:0"
	cfg.Backend = "local-unsafe"
	cfg.StateDir = t.TempDir()
	cfg.PoolSize = 0
	cfg.Preimport = ""
	if mod != nil {
		mod(&cfg)
	}
	k := &keyed{log: &testbin.Buffer{}}
	log := slog.New(slog.NewTextHandler(k.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := server.Start(ctx, cfg, server.Options{GuestBinary: testbin.Cellbox(t), Logger: log, Quiet: true, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.Shutdown(ctx)
		if l := k.log.String(); strings.Contains(l, aliceKey) || strings.Contains(l, bobKey) {
			t.Errorf("a key is in the log:\n%s", l)
		}
	})
	k.url = s.URL
	return k
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with the headers of hdr ("Key: value" each).
func (k *keyed) do(t *testing.T, method, path, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, k.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hdr {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Set(name, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

func (a answer) err() api.ErrorDetail {
	var e api.ErrorBody
	json.Unmarshal(a.body, &e)
	return e.Error
}

// TestAttackAPIKeys: without a key, with a wrong one, or with one in the wrong form (a
// valid one rides in the query, which does not count), every route but /healthz answers
// 401 unauthenticated, before reading the body (which is not JSON here); with a key, in
// either header, requests pass.
func TestAttackAPIKeys(t *testing.T) {
	k := startKeyed(t, nil)
	routes := []string{
		"POST /v1/sessions", "GET /v1/sessions", "GET /v1/sessions/x", "PATCH /v1/sessions/x", "DELETE /v1/sessions/x",
		"POST /v1/sessions/x/execute", "POST /v1/sessions/x/interrupt", "POST /v1/sessions/x/restart", "POST /v1/sessions/x/pause", "POST /v1/sessions/x/resume", "POST /v1/sessions/x/fork", "POST /v1/sessions/x/complete", "POST /v1/sessions/x/inspect",
		"POST /v1/sessions/x/commands", "DELETE /v1/sessions/x/contexts/c", "GET /v1/sessions/x/files", "PUT /v1/sessions/x/files/a.txt",
		"GET /v1/sessions/x/files/a.txt", "DELETE /v1/sessions/x/files/a.txt", "POST /v1/execute", "POST /v1/notebooks/execute",
		"GET /v1/tools", "POST /v1/agent", "GET /v1/openapi.json", "POST /mcp", "GET /mcp", "DELETE /mcp", "GET /mcp/sse", "POST /mcp/sse",
		"GET /v1/sessions/x/egress", "GET /v1/sessions/x/tools", "POST /v1/sessions/x/tools/t/call", "POST /v1/sessions/x/tools/t/save", "POST /v1/sessions/x/tools/load",
		"GET /v1/saved-tools", "GET /v1/saved-tools/t", "DELETE /v1/saved-tools/t",
		"GET /v1/providers", "POST /v1/conversations", "GET /v1/conversations", "GET /v1/conversations/x",
		"PATCH /v1/conversations/x", "DELETE /v1/conversations/x", "POST /v1/conversations/x/messages",
		"POST /v1/conversations/x/approvals", "POST /v1/conversations/x/stop",
		"GET /metrics", "GET /no/such/route", "PATCH /v1/sessions",
	}
	creds := map[string][]string{
		"no key":                     nil,
		"wrong key":                  {"Authorization: Bearer cbx_00000000000000000000000000000000000000000"},
		"a key's prefix":             {"Authorization: Bearer " + aliceKey[:len(aliceKey)-1]},
		"not bearer":                 {"Authorization: Basic " + aliceKey},
		"bearer without a key":       {"Authorization: Bearer"},
		"two tokens":                 {"Authorization: Bearer " + aliceKey + " " + aliceKey},
		"wrong X-API-Key":            {"X-API-Key: " + strings.ToUpper(bobKey)},
		"wrong bearer, good api key": {"Authorization: Bearer nope-nope-nope-nope", "X-API-Key: " + aliceKey},
	}
	for name, hdr := range creds {
		for _, route := range routes {
			t.Run("attack/"+name+"/"+route, func(t *testing.T) {
				method, path, _ := strings.Cut(route, " ")
				a := k.do(t, method, path+"?api_key="+aliceKey, "{not json", append(hdr, "Accept: application/json, text/event-stream", "Content-Type: application/json")...)
				if a.status != http.StatusUnauthorized || a.err().Code != api.CodeUnauthenticated || !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("status %d, WWW-Authenticate %q, body %s; want 401 unauthenticated", a.status, a.header.Get("WWW-Authenticate"), a.body)
				}
				if bytes.Contains(a.body, []byte(aliceKey[4:])) {
					t.Errorf("the answer quotes the key: %s", a.body)
				}
			})
		}
	}
	for _, tt := range []struct {
		name, path string
		hdr        []string
	}{
		{"healthz without a key", "/healthz", nil},
		{"bearer", "/v1/sessions", []string{"Authorization: Bearer " + aliceKey}},
		{"bearer in lower case", "/v1/sessions", []string{"authorization: bearer  " + bobKey}},
		{"X-API-Key", "/v1/sessions", []string{"X-API-Key: " + bobKey}},
		{"metrics with a key", "/metrics", []string{"X-API-Key: " + aliceKey}},
		{"openapi with a key", "/v1/openapi.json", []string{"Authorization: Bearer " + bobKey}},
	} {
		if a := k.do(t, "GET", tt.path, "", tt.hdr...); a.status != http.StatusOK {
			t.Errorf("%s: status %d %s", tt.name, a.status, a.body)
		}
	}
}

// TestAttackPageWithoutKey: the web page and its files come without a key (the page asks
// for one); nothing else does, whatever the path looks like.
func TestAttackPageWithoutKey(t *testing.T) {
	k := startKeyed(t, nil)
	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/", http.StatusOK},
		{"GET", "/assets/app.js", http.StatusOK},
		{"HEAD", "/assets/style.css", http.StatusOK},
		{"GET", "/assets/nope.js", http.StatusNotFound},
		{"GET", "/assets/", http.StatusNotFound},
		{"GET", "/assets/vendor/", http.StatusNotFound},
		{"GET", "/assets/..%2fv1%2fsessions", http.StatusNotFound},
		{"GET", "/assets/../v1/sessions", http.StatusUnauthorized}, // cleaned: /v1/sessions, which needs the key
		{"GET", "/index.html", http.StatusUnauthorized},
		{"POST", "/", http.StatusUnauthorized},
		{"GET", "/v1/providers", http.StatusUnauthorized},
		{"GET", "/v1/conversations", http.StatusUnauthorized},
	} {
		t.Run("attack/"+tt.method+" "+tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, k.url+tt.path, nil)
			req.URL.Opaque = tt.path // as sent, not cleaned by the client
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if resp.StatusCode == http.StatusOK && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Errorf("no CSP: %q", resp.Header.Get("Content-Security-Policy"))
			}
		})
	}
}

// TestMetricsPublic: --metrics-public opens /metrics, and nothing else.
func TestMetricsPublic(t *testing.T) {
	k := startKeyed(t, func(c *config.Config) { c.MetricsPublic = true })
	if a := k.do(t, "GET", "/metrics", ""); a.status != http.StatusOK || !bytes.Contains(a.body, []byte("cellbox_sessions ")) {
		t.Errorf("/metrics: %d", a.status)
	}
	if a := k.do(t, "GET", "/v1/sessions", ""); a.status != http.StatusUnauthorized {
		t.Errorf("/v1/sessions without a key: %d", a.status)
	}
}

// headerTransport adds a header to every request of an MCP client.
type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

func (k *keyed) mcpClient(t *testing.T, name, value string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: k.url + "/mcp", HTTPClient: &http.Client{Transport: headerTransport{name, value}}, DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		t.Fatalf("MCP connect with %s: %v", name, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestAttackTenantsOverHTTP: bob, with his own key, gets for every call on alice's session
// the answer of a session that never existed, over REST, /v1/agent and MCP; he does not see
// it listed, cannot use alice's MCP session, and alice's session is untouched.
func TestAttackTenantsOverHTTP(t *testing.T) {
	k := startKeyed(t, nil)
	llmSrv := useOpenAI(t, func(llmtest.Request) llmtest.Reply { return llmtest.Text("done") })
	alice, bob := "Authorization: Bearer "+aliceKey, "X-API-Key: "+bobKey
	var s api.Session
	if a := k.do(t, "POST", "/v1/sessions", "", alice); a.status != http.StatusCreated || json.Unmarshal(a.body, &s) != nil {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	if a := k.do(t, "PUT", "/v1/sessions/"+s.ID+"/files/secret.txt", "alice's", alice); a.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", a.status, a.body)
	}
	never := strings.Repeat("0", len(s.ID)) // no session has this id
	calls := []struct{ method, path, body string }{
		{"GET", "/v1/sessions/ID", ""},
		{"POST", "/v1/sessions/ID/execute", `{"code": "open('pwned', 'w')"}`},
		{"POST", "/v1/sessions/ID/interrupt", ""},
		{"POST", "/v1/sessions/ID/restart", ""},
		{"POST", "/v1/sessions/ID/commands", `{"cmd": ["touch", "pwned"]}`},
		{"GET", "/v1/sessions/ID/files?path=.", ""},
		{"PUT", "/v1/sessions/ID/files/pwned", "x"},
		{"GET", "/v1/sessions/ID/files/secret.txt", ""},
		{"DELETE", "/v1/sessions/ID/files/secret.txt", ""},
		{"POST", "/v1/agent", `{"input": "print the secret", "session_id": "ID", "files": [{"path": "pwned", "content": "x"}]}`},
		{"POST", "/v1/notebooks/execute", `{"session_id": "ID", "notebook": {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", "id": "c", "metadata": {}, "source": "open('pwned', 'w')", "outputs": [], "execution_count": null}]}}`},
		{"PATCH", "/v1/sessions/ID", `{"lifetime_s": 1}`},
		{"DELETE", "/v1/sessions/ID", ""}, // last: were it to work, the others would find nothing
	}
	for _, c := range calls {
		t.Run("attack/bob/"+c.method+" "+c.path, func(t *testing.T) {
			on := func(id, who string, accept string) answer {
				return k.do(t, c.method, strings.ReplaceAll(c.path, "ID", id), strings.ReplaceAll(c.body, "ID", id), who, "Accept: "+accept)
			}
			for _, accept := range []string{"application/json", "text/event-stream"} {
				got, want := on(s.ID, bob, accept), on(never, alice, accept)
				if got.status != http.StatusNotFound || got.err().Code != api.CodeNotFound ||
					strings.ReplaceAll(string(got.body), s.ID, "ID") != strings.ReplaceAll(string(want.body), never, "ID") {
					t.Errorf("%s: bob gets %d %s; a session that never existed: %d %s", accept, got.status, got.body, want.status, want.body)
				}
			}
		})
	}
	if n := len(llmSrv.Requests()); n != 0 {
		t.Errorf("the model was called %d times for bob's agent call on alice's session", n)
	}
	t.Run("attack/bob/list", func(t *testing.T) {
		if a := k.do(t, "GET", "/v1/sessions", "", bob); a.status != http.StatusOK || bytes.Contains(a.body, []byte(s.ID)) {
			t.Errorf("bob's list: %d %s", a.status, a.body)
		}
	})

	// MCP: bob names alice's session in a tool call and in a resource; then he tries alice's
	// MCP session itself.
	bm := k.mcpClient(t, "X-API-Key", bobKey)
	t.Run("attack/bob/mcp tool call", func(t *testing.T) {
		res, err := bm.CallTool(t.Context(), &mcp.CallToolParams{Name: "python", Arguments: map[string]any{"code": "print(open('secret.txt').read())", "session_id": s.ID}})
		if err != nil || !res.IsError || !strings.Contains(callText(res), "There is no session") || strings.Contains(callText(res), "alice's") {
			t.Errorf("%v %+v", err, res)
		}
	})
	t.Run("attack/bob/mcp resource", func(t *testing.T) {
		if res, err := bm.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: mcpserver.FileURI(s.ID, "secret.txt")}); err == nil {
			t.Errorf("read alice's file: %+v", res)
		}
	})
	am := k.mcpClient(t, "Authorization", "Bearer "+aliceKey)
	res, err := am.CallTool(t.Context(), &mcp.CallToolParams{Name: "python", Arguments: map[string]any{"code": "print(open('secret.txt').read())", "session_id": s.ID}})
	if err != nil || res.IsError || !strings.Contains(callText(res), "alice's") {
		t.Fatalf("alice's MCP call in her session: %v %+v", err, res)
	}
	t.Run("attack/bob/alice's mcp session", func(t *testing.T) {
		body := `{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "python", "arguments": {"code": "1"}}}`
		a := k.do(t, "POST", "/mcp", body, bob, "Mcp-Session-Id: "+am.ID(), "Content-Type: application/json",
			"Accept: application/json, text/event-stream", "Mcp-Protocol-Version: 2025-06-18")
		if a.status != http.StatusForbidden {
			t.Errorf("bob on alice's MCP session: %d %s", a.status, a.body)
		}
	})

	// The agent loop: bob's new session is his, not alice's.
	var ar api.AgentResponse
	if a := k.do(t, "POST", "/v1/agent", `{"input": "hi", "provider": "openai"}`, bob); a.status != http.StatusOK || json.Unmarshal(a.body, &ar) != nil {
		t.Fatalf("bob's agent call: %d %s", a.status, a.body)
	}
	if a := k.do(t, "GET", "/v1/sessions/"+ar.SessionID, "", bob); a.status != http.StatusOK {
		t.Errorf("bob's agent session, for bob: %d", a.status)
	}
	if a := k.do(t, "GET", "/v1/sessions/"+ar.SessionID, "", alice); a.status != http.StatusNotFound {
		t.Errorf("bob's agent session, for alice: %d", a.status)
	}

	var r api.ExecuteResult
	a := k.do(t, "POST", "/v1/sessions/"+s.ID+"/execute", `{"code": "import os; print(open('secret.txt').read(), sorted(os.listdir('.')))"}`, alice)
	if json.Unmarshal(a.body, &r) != nil || r.Status != api.StatusOK || stdout(r) != "alice's ['secret.txt']\n" {
		t.Errorf("alice's session after the attacks: %d %s", a.status, a.body)
	}
	if l := k.log.String(); !strings.Contains(l, "msg=\"session created\" session_id="+s.ID+" tenant=alice") {
		t.Errorf("the log does not name the tenant of a new session:\n%s", l)
	}
}

// TestAttackTenantCapsOverHTTP: past --tenant-max-sessions and --tenant-max-executions a
// tenant gets 429 naming the cap; another tenant is not held back; metrics count by tenant.
func TestAttackTenantCapsOverHTTP(t *testing.T) {
	k := startKeyed(t, func(c *config.Config) { c.TenantMaxSessions = 1; c.TenantMaxExecutions = 1 })
	alice, bob := "Authorization: Bearer "+aliceKey, "Authorization: Bearer "+bobKey
	create := func(who string) string {
		var s api.Session
		if a := k.do(t, "POST", "/v1/sessions", "", who); a.status != http.StatusCreated || json.Unmarshal(a.body, &s) != nil {
			t.Fatalf("create: %d %s", a.status, a.body)
		}
		return s.ID
	}
	a1, b1 := create(alice), create(bob)
	t.Run("attack/sessions", func(t *testing.T) {
		for path, body := range map[string]string{"/v1/sessions": "", "/v1/execute": `{"code": "1"}`} {
			a := k.do(t, "POST", path, body, alice)
			if a.status != http.StatusTooManyRequests || a.err().Code != api.CodeResourceExhausted || !strings.Contains(a.err().Message, "--tenant-max-sessions") {
				t.Errorf("POST %s past the cap: %d %s", path, a.status, a.body)
			}
		}
	})

	req, _ := http.NewRequest("POST", k.url+"/v1/sessions/"+a1+"/execute", strings.NewReader(`{"code": "print('started', flush=True); import time; time.sleep(60)"}`))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readSSE(t, resp.Body)
	if ev := <-events; ev.name != "output" {
		t.Fatalf("first event %+v", ev)
	}
	t.Run("attack/executions", func(t *testing.T) {
		a := k.do(t, "POST", "/v1/sessions/"+a1+"/commands", `{"cmd": ["true"]}`, alice)
		if a.status != http.StatusTooManyRequests || a.err().Code != api.CodeResourceExhausted || !strings.Contains(a.err().Message, "--tenant-max-executions") {
			t.Errorf("a second run: %d %s", a.status, a.body)
		}
	})
	if a := k.do(t, "POST", "/v1/sessions/"+b1+"/commands", `{"cmd": ["true"]}`, bob); a.status != http.StatusOK {
		t.Errorf("bob's command while alice is at her cap: %d %s", a.status, a.body)
	}
	if a := k.do(t, "POST", "/v1/sessions/"+a1+"/interrupt", "", alice); a.status != http.StatusOK {
		t.Fatalf("interrupt: %d %s", a.status, a.body)
	}
	for ev := range events {
		if ev.name == "result" && !strings.Contains(ev.data, `"status":"interrupted"`) {
			t.Errorf("result %s", ev.data)
		}
	}
	a := k.do(t, "GET", "/metrics", "", bob)
	for _, m := range []string{`cellbox_sessions_created_total{tenant="alice"} 1`, `cellbox_tenant_executions_total{kind="execute",tenant="alice"} 1`, `cellbox_tenant_executions_total{kind="command",tenant="bob"} 1`} {
		if !bytes.Contains(a.body, []byte(m)) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

// TestAttackMCPSSEOtherTenant: a stream of MCP's HTTP+SSE transport opened with alice's key
// takes messages only with alice's key: bob, knowing its session id, finds no such session.
func TestAttackMCPSSEOtherTenant(t *testing.T) {
	k := startKeyed(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", k.url+"/mcp/sse", nil)
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("alice's stream: %d", resp.StatusCode)
	}
	// The first event names the endpoint: data: /mcp/sse?sessionid=...
	var endpoint string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			endpoint = v
			break
		}
	}
	if !strings.Contains(endpoint, "sessionid=") {
		t.Fatalf("no endpoint event: %q", endpoint)
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	post := func(key string) int {
		r, _ := http.NewRequestWithContext(ctx, "POST", k.url+endpoint, strings.NewReader(initialize))
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := post(bobKey); st != http.StatusNotFound {
		t.Errorf("bob posting to alice's stream: %d, want 404", st)
	}
	if st := post(aliceKey); st != http.StatusAccepted {
		t.Errorf("alice posting to her stream: %d, want 202", st)
	}
}

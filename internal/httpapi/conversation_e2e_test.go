package httpapi_test

// /v1/conversations end to end: the shared runc server, real IPython, and a stand-in model
// API (llmtest) over HTTP. What the web page needs: history kept between messages, files
// described, approvals decided and answers stopped by other requests while one streams.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
)

// stream sends a message and returns its events as they come.
func (c *client) stream(convID string, req api.MessageRequest) (<-chan sseEvent, func()) {
	c.t.Helper()
	b, _ := json.Marshal(req)
	return c.postSSE("/v1/conversations/"+convID+"/messages", b)
}

// turnOf drains events into their names and the final turn (an error event fails the test).
func turnOf(t *testing.T, events <-chan sseEvent, on func(sseEvent)) ([]string, api.ConversationTurn) {
	t.Helper()
	var kinds []string
	var turn api.ConversationTurn
	for ev := range events {
		if len(kinds) == 0 || kinds[len(kinds)-1] != ev.name {
			kinds = append(kinds, ev.name)
		}
		if on != nil {
			on(ev)
		}
		switch ev.name {
		case "result":
			json.Unmarshal([]byte(ev.data), &turn)
		case "error":
			t.Fatalf("error event: %s", ev.data)
		}
	}
	return kinds, turn
}

func (c *client) conversation(req api.ConversationRequest) api.Conversation {
	c.t.Helper()
	var conv api.Conversation
	if st := c.do("POST", "/v1/conversations", req, &conv); st != http.StatusCreated {
		c.t.Fatalf("create conversation: status %d", st)
	}
	c.t.Cleanup(func() {
		c.do("DELETE", "/v1/conversations/"+conv.ID, nil, nil)
		if req.SessionID == "" {
			c.do("DELETE", "/v1/sessions/"+conv.SessionID, nil, nil)
		}
	})
	return conv
}

// TestConversationKeepsHistoryAndVariables: a file uploaded into the session is described to
// the model; the first message's call loads it; a follow-up uses its variable; the model is
// sent the whole conversation each time; GET shows both turns.
func TestConversationKeepsHistoryAndVariables(t *testing.T) {
	c := newClient(t)
	data, err := os.ReadFile(sharedData(t))
	if err != nil {
		t.Fatal(err)
	}
	llmSrv := useOpenAI(t, func(r llmtest.Request) llmtest.Reply {
		res, ok := toolResult(r)
		switch {
		case len(r.Messages) == 1:
			return llmtest.CallTool("python", `{"code": "import pandas as pd\ndf = pd.read_csv('/mnt/data/traffic_accidents.csv')\nprint(df.shape)"}`)
		case ok && len(r.Messages) == 3:
			return llmtest.Text("It has " + strings.TrimSpace(res.Text) + ".")
		case len(r.Messages) == 5:
			return llmtest.CallTool("python", `{"code": "print(len(df.columns))"}`)
		case ok:
			return llmtest.Text("There are " + strings.TrimSpace(res.Text) + " columns.")
		}
		return llmtest.Fail(400, fmt.Sprintf("unexpected request with %d messages", len(r.Messages)))
	})
	var providers api.ProviderList
	if st := c.do("GET", "/v1/providers", nil, &providers); st != 200 || len(providers.Providers) == 0 || providers.Providers[0].Name != "openai" || providers.Providers[0].DefaultModel == "" {
		t.Fatalf("providers: status %d %+v", st, providers)
	}
	conv := c.conversation(api.ConversationRequest{Provider: "openai", Model: "gpt-test"})
	if conv.SessionID == "" || conv.State != api.ConversationIdle || conv.Approve != api.ApproveAuto || conv.Model != "gpt-test" {
		t.Fatalf("conversation %+v", conv)
	}
	if st := c.do("PUT", "/v1/sessions/"+conv.SessionID+"/files/traffic_accidents.csv", data, nil); st/100 != 2 {
		t.Fatalf("upload: %d", st)
	}

	events, done := c.stream(conv.ID, api.MessageRequest{Input: "How big is the table?", Files: []string{"traffic_accidents.csv"}})
	kinds, turn := turnOf(t, events, nil)
	done()
	if want := "call,output,step,text,result"; strings.Join(kinds, ",") != want {
		t.Errorf("events %s, want %s", strings.Join(kinds, ","), want)
	}
	if turn.Output != "It has (8000, 10)." || turn.StopReason != api.AgentDone || len(turn.Steps) != 1 || turn.Steps[0].ID == "" || turn.EndedAt == nil {
		t.Errorf("first turn %+v", turn)
	}
	first := llmSrv.Requests()[0].Messages[0].Text
	for _, want := range []string{"/mnt/data/traffic_accidents.csv", "8,000 rows", "How big is the table?"} {
		if !strings.Contains(first, want) {
			t.Errorf("the model was not told %q:\n%s", want, first)
		}
	}

	var res api.ConversationTurn
	if st := c.do("POST", "/v1/conversations/"+conv.ID+"/messages", api.MessageRequest{Input: "And how many columns?"}, &res); st != 200 {
		t.Fatalf("follow-up: status %d", st)
	}
	if res.Output != "There are 10 columns." {
		t.Errorf("follow-up answer %q (steps %+v)", res.Output, res.Steps)
	}
	reqs := llmSrv.Requests()
	if last := reqs[len(reqs)-1]; len(last.Messages) != 7 || !strings.Contains(last.Messages[0].Text, "How big") {
		t.Errorf("the last request has %d messages, want the whole conversation (7)", len(last.Messages))
	}

	var got api.Conversation
	if st := c.do("GET", "/v1/conversations/"+conv.ID, nil, &got); st != 200 {
		t.Fatalf("get: %d", st)
	}
	if len(got.Turns) != 2 || got.TurnCount != 2 || got.Title != "How big is the table?" || got.Turns[0].Files[0] != "traffic_accidents.csv" ||
		got.Turns[1].Steps[0].Result == nil || stdout(*got.Turns[1].Steps[0].Result) != "10\n" {
		t.Errorf("conversation %+v", got)
	}
	var list api.ConversationList
	c.do("GET", "/v1/conversations?session_id="+conv.SessionID, nil, &list)
	if len(list.Conversations) != 1 || list.Conversations[0].ID != conv.ID || list.Conversations[0].Turns != nil {
		t.Errorf("list by session: %+v", list)
	}
}

// TestConversationApprovals: in ask mode each call waits; Run runs it, Skip tells the model,
// a decision for a call that does not wait is a 409, and a second message while one is
// answered is a 409 too.
func TestConversationApprovals(t *testing.T) {
	c := newClient(t)
	useOpenAI(t, func(r llmtest.Request) llmtest.Reply {
		switch len(r.Messages) {
		case 1:
			return llmtest.CallTool("python", `{"code": "approved = 1\nprint('ran')"}`)
		case 3:
			return llmtest.CallTool("python", `{"code": "skipped = 1"}`)
		}
		res, _ := toolResult(r)
		return llmtest.Text("done: " + res.Text)
	})
	conv := c.conversation(api.ConversationRequest{Provider: "openai", Approve: api.ApproveAsk})
	events, done := c.stream(conv.ID, api.MessageRequest{Input: "go"})
	defer done()
	decisions := []string{api.DecisionRun, api.DecisionSkip}
	var outputs []string
	kinds, turn := turnOf(t, events, func(ev sseEvent) {
		switch ev.name {
		case "call":
			var call struct{ ID, Tool, Code, Approval string }
			json.Unmarshal([]byte(ev.data), &call)
			if call.Approval != "pending" || call.ID == "" {
				t.Errorf("call event %s", ev.data)
			}
			var cv api.Conversation
			c.do("GET", "/v1/conversations/"+conv.ID, nil, &cv)
			if cv.State != api.ConversationWaiting {
				t.Errorf("state while a call waits: %s", cv.State)
			}
			var e api.ErrorBody
			if st := c.do("POST", "/v1/conversations/"+conv.ID+"/messages", api.MessageRequest{Input: "again"}, &e); st != 409 {
				t.Errorf("a second message while answering: %d %+v", st, e)
			}
			if st := c.do("POST", "/v1/conversations/"+conv.ID+"/approvals", api.ApprovalRequest{CallID: "not-" + call.ID, Decision: api.DecisionRun}, &e); st != 409 {
				t.Errorf("a decision for another call: %d %+v", st, e)
			}
			if st := c.do("POST", "/v1/conversations/"+conv.ID+"/approvals", api.ApprovalRequest{CallID: call.ID, Decision: "maybe"}, &e); st != 400 {
				t.Errorf("a bad decision: %d %+v", st, e)
			}
			d := decisions[0]
			decisions = decisions[1:]
			if st := c.do("POST", "/v1/conversations/"+conv.ID+"/approvals", api.ApprovalRequest{CallID: call.ID, Decision: d}, nil); st != 204 {
				t.Errorf("decide %s: %d", d, st)
			}
			if st := c.do("POST", "/v1/conversations/"+conv.ID+"/approvals", api.ApprovalRequest{CallID: call.ID, Decision: d}, &e); st != 409 {
				t.Errorf("deciding twice: %d %+v", st, e)
			}
		case "output":
			outputs = append(outputs, ev.data)
		}
	})
	if want := "call,output,step,call,step,text,result"; strings.Join(kinds, ",") != want {
		t.Errorf("events %s, want %s", strings.Join(kinds, ","), want)
	}
	if len(turn.Steps) != 2 || turn.Steps[0].Declined || !turn.Steps[1].Declined || turn.Steps[1].Result != nil || !strings.Contains(turn.Output, "declined") {
		t.Errorf("turn %+v", turn)
	}
	r := c.exec(conv.SessionID, "print('approved' in globals(), 'skipped' in globals())", 0)
	if stdout(r) != "True False\n" {
		t.Errorf("what ran: %q", stdout(r))
	}
}

// TestConversationStop: Stop ends the answer and interrupts the running cell; the session
// stays usable and the turn says stopped.
func TestConversationStop(t *testing.T) {
	c := newClient(t)
	useOpenAI(t, func(r llmtest.Request) llmtest.Reply {
		if len(r.Messages) == 1 {
			return llmtest.CallTool("python", `{"code": "import time\nkept = 1\nprint('started', flush=True)\ntime.sleep(120)"}`)
		}
		return llmtest.Text("this answer should not be asked for")
	})
	conv := c.conversation(api.ConversationRequest{Provider: "openai"})
	if st := c.do("POST", "/v1/conversations/"+conv.ID+"/stop", nil, nil); st != 204 {
		t.Errorf("stop with nothing running: %d", st)
	}
	events, done := c.stream(conv.ID, api.MessageRequest{Input: "wait a while"})
	defer done()
	start := time.Now()
	_, turn := turnOf(t, events, func(ev sseEvent) {
		if ev.name == "output" && strings.Contains(ev.data, "started") {
			if st := c.do("POST", "/v1/conversations/"+conv.ID+"/stop", nil, nil); st != 204 {
				t.Errorf("stop: %d", st)
			}
		}
	})
	if turn.StopReason != api.AgentStopped || turn.Error != "" {
		t.Errorf("turn %+v", turn)
	}
	if time.Since(start) > 60*time.Second {
		t.Errorf("the stopped answer took %s", time.Since(start))
	}
	r := c.exec(conv.SessionID, "print(kept)", 0)
	if stdout(r) != "1\n" {
		t.Errorf("after stop: %+v", r)
	}
	var cv api.Conversation
	c.do("GET", "/v1/conversations/"+conv.ID, nil, &cv)
	if cv.State != api.ConversationIdle || len(cv.Turns) != 1 || cv.Turns[0].StopReason != api.AgentStopped {
		t.Errorf("after stop: %+v", cv)
	}
}

func TestConversationErrors(t *testing.T) {
	c := newClient(t)
	useOpenAI(t, llmtest.Replies(llmtest.Fail(401, "Incorrect API key provided")))
	conv := c.conversation(api.ConversationRequest{Provider: "openai"})
	ended := c.conversation(api.ConversationRequest{Provider: "openai"})
	c.do("DELETE", "/v1/sessions/"+ended.SessionID, nil, nil)
	base := "/v1/conversations/" + conv.ID
	tests := []struct {
		name, method, path, body string
		status                   int
		msg                      string
	}{
		{"bad approval mode", "POST", "/v1/conversations", `{"approve": "sometimes"}`, 400, "sometimes"},
		{"too many steps", "POST", "/v1/conversations", `{"max_steps": 500}`, 400, "max_steps"},
		{"unknown provider", "POST", "/v1/conversations", `{"provider": "gemini"}`, 400, "gemini"},
		{"unknown session", "POST", "/v1/conversations", `{"session_id": "nope"}`, 404, "nope"},
		{"unknown field", "POST", "/v1/conversations", `{"temperature": 1}`, 400, "temperature"},
		{"unknown conversation", "GET", "/v1/conversations/conv_nope", "", 404, "conv_nope"},
		{"ended session", "GET", "/v1/conversations/" + ended.ID, "", 404, ended.ID},
		{"empty input", "POST", base + "/messages", `{"input": "  "}`, 400, "input is empty"},
		{"file outside the workspace", "POST", base + "/messages", `{"input": "x", "files": ["../../etc/passwd"]}`, 400, "../../etc/passwd"},
		{"missing file", "POST", base + "/messages", `{"input": "x", "files": ["nope.csv"]}`, 400, "upload it first"},
		{"model API refuses the key", "POST", base + "/messages", `{"input": "x"}`, 503, "Incorrect API key"},
		{"bad update", "PATCH", base, `{"approve": "never"}`, 400, "never"},
		{"unknown provider update", "PATCH", base, `{"provider": "gemini"}`, 400, "gemini"},
		{"stop unknown", "POST", "/v1/conversations/conv_nope/stop", "", 404, "conv_nope"},
		{"decide unknown", "POST", "/v1/conversations/conv_nope/approvals", `{"call_id": "x", "decision": "run"}`, 404, "conv_nope"},
		{"delete unknown", "DELETE", "/v1/conversations/conv_nope", "", 404, "conv_nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e api.ErrorBody
			var body any
			if tt.body != "" {
				body = tt.body
			}
			if st := c.do(tt.method, tt.path, body, &e); st != tt.status || !strings.Contains(e.Error.Message, tt.msg) {
				t.Errorf("status %d %+v, want %d with %q", st, e.Error, tt.status, tt.msg)
			}
			if !strings.HasSuffix(tt.path, "/messages") || tt.status == 503 {
				return // 503: the model API failed during the answer, so in the stream
			}
			// Refused before the stream starts, with the status, when a stream is asked for too.
			req, _ := http.NewRequest(tt.method, c.url+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Accept", "text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("streamed: status %d %s, want %d", resp.StatusCode, resp.Header.Get("Content-Type"), tt.status)
			}
		})
	}
	// The failed message is kept, saying why.
	var cv api.Conversation
	c.do("GET", base, nil, &cv)
	if len(cv.Turns) != 1 || cv.Turns[0].StopReason != api.AgentError || !strings.Contains(cv.Turns[0].Error, "Incorrect API key") {
		t.Errorf("after the failure: %+v", cv.Turns)
	}
	var upd api.Conversation
	if st := c.do("PATCH", base, api.UpdateConversationRequest{Approve: api.ApproveAsk, Model: "other-model"}, &upd); st != 200 || upd.Approve != api.ApproveAsk || upd.Model != "other-model" {
		t.Errorf("update: %d %+v", st, upd)
	}
}

// TestAttackConversationTenants: bob, with his own key, gets for every call on alice's
// conversation the answer of one that never existed; he does not see it listed, cannot
// start one on her session, and her conversation is untouched.
func TestAttackConversationTenants(t *testing.T) {
	k := startKeyed(t, nil)
	llmSrv := useOpenAI(t, func(llmtest.Request) llmtest.Reply { return llmtest.Text("done") })
	alice, bob := "Authorization: Bearer "+aliceKey, "X-API-Key: "+bobKey
	var conv api.Conversation
	if a := k.do(t, "POST", "/v1/conversations", `{"approve": "ask"}`, alice); a.status != http.StatusCreated || json.Unmarshal(a.body, &conv) != nil {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	never := "conv_" + strings.Repeat("0", len(conv.ID)-len("conv_"))
	calls := []struct{ method, path, body string }{
		{"GET", "/v1/conversations/ID", ""},
		{"PATCH", "/v1/conversations/ID", `{"approve": "auto"}`},
		{"POST", "/v1/conversations/ID/messages", `{"input": "print the secret"}`},
		{"POST", "/v1/conversations/ID/approvals", `{"call_id": "x", "decision": "run"}`},
		{"POST", "/v1/conversations/ID/stop", ""},
		{"DELETE", "/v1/conversations/ID", ""}, // last: were it to work, the others would find nothing
	}
	for _, c := range calls {
		t.Run("attack/bob/"+c.method+" "+c.path, func(t *testing.T) {
			for _, accept := range []string{"application/json", "text/event-stream"} {
				got := k.do(t, c.method, strings.ReplaceAll(c.path, "ID", conv.ID), c.body, bob, "Accept: "+accept)
				want := k.do(t, c.method, strings.ReplaceAll(c.path, "ID", never), c.body, alice, "Accept: "+accept)
				if got.status != http.StatusNotFound || got.err().Code != api.CodeNotFound ||
					strings.ReplaceAll(string(got.body), conv.ID, "ID") != strings.ReplaceAll(string(want.body), never, "ID") {
					t.Errorf("%s: bob gets %d %s; one that never existed: %d %s", accept, got.status, got.body, want.status, want.body)
				}
			}
		})
	}
	t.Run("attack/bob/list", func(t *testing.T) {
		for _, q := range []string{"", "?session_id=" + conv.SessionID} {
			if a := k.do(t, "GET", "/v1/conversations"+q, "", bob); a.status != http.StatusOK || bytes.Contains(a.body, []byte(conv.ID)) {
				t.Errorf("bob's list%s: %d %s", q, a.status, a.body)
			}
		}
	})
	t.Run("attack/bob/on alice's session", func(t *testing.T) {
		if a := k.do(t, "POST", "/v1/conversations", `{"session_id": "`+conv.SessionID+`"}`, bob); a.status != http.StatusNotFound {
			t.Errorf("bob starts a conversation on alice's session: %d %s", a.status, a.body)
		}
	})
	if n := len(llmSrv.Requests()); n != 0 {
		t.Errorf("the model was called %d times for bob", n)
	}
	a := k.do(t, "GET", "/v1/conversations/"+conv.ID, "", alice)
	var got api.Conversation
	if a.status != http.StatusOK || json.Unmarshal(a.body, &got) != nil || got.Approve != api.ApproveAsk || got.TurnCount != 0 {
		t.Errorf("alice's conversation after bob: %d %s", a.status, a.body)
	}
}

package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/testbin"
)

// TestAttackPauseAndForkTenants: another API key's caller cannot pause, resume or fork a
// session, nor find its forks; the forks belong to the key that made them. On runc with
// CRIU (make deps installs it).
func TestAttackPauseAndForkTenants(t *testing.T) {
	testbin.NeedProgram(t, "criu", "criu (scripts/criu.sh builds it; make deps installs it)")
	testbin.NeedRunc(t)
	k := startKeyed(t, func(c *config.Config) {
		c.Backend, c.RootFS, c.Runtime = "runc", "host", "runc"
		c.EndSessionsOnExit = true
	})
	alice, bob := "Authorization: Bearer "+aliceKey, "Authorization: Bearer "+bobKey
	a := k.do(t, "POST", "/v1/sessions", `{"idle_action": "pause"}`, alice)
	var s api.Session
	if a.status != 201 || json.Unmarshal(a.body, &s) != nil {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	if a := k.do(t, "POST", "/v1/sessions/"+s.ID+"/execute", `{"code": "secret = 'alice'"}`, alice); a.status != 200 {
		t.Fatalf("execute: %d %s", a.status, a.body)
	}
	for _, op := range []string{"pause", "resume", "fork"} {
		if a := k.do(t, "POST", "/v1/sessions/"+s.ID+"/"+op, `{}`, bob); a.status != 404 || a.err().Code != api.CodeNotFound {
			t.Errorf("bob's %s of alice's session: %d %s, want 404", op, a.status, a.body)
		}
	}
	if a := k.do(t, "POST", "/v1/sessions/"+s.ID+"/fork", `{"count": 33}`, alice); a.status != 400 {
		t.Errorf("a fork of 33: %d %s, want 400", a.status, a.body)
	}
	f := k.do(t, "POST", "/v1/sessions/"+s.ID+"/fork", `{"count": 2}`, alice)
	var forks api.ForkResult
	if f.status != 200 || json.Unmarshal(f.body, &forks) != nil || len(forks.Sessions) != 2 {
		t.Fatalf("fork: %d %s", f.status, f.body)
	}
	for _, fs := range forks.Sessions {
		if a := k.do(t, "GET", "/v1/sessions/"+fs.ID, "", bob); a.status != 404 {
			t.Errorf("bob finds alice's fork: %d %s", a.status, a.body)
		}
		if a := k.do(t, "POST", "/v1/sessions/"+fs.ID+"/execute", `{"code": "print(secret)"}`, bob); a.status != 404 {
			t.Errorf("bob runs code in alice's fork: %d %s", a.status, a.body)
		}
		if a := k.do(t, "POST", "/v1/sessions/"+fs.ID+"/execute", `{"code": "print(secret)"}`, alice); a.status != 200 || !strings.Contains(string(a.body), `"alice\n"`) {
			t.Errorf("alice's fork: %d %s", a.status, a.body)
		}
	}
	if l := k.do(t, "GET", "/v1/sessions", "", bob); strings.Contains(string(l.body), s.ID) || strings.Contains(string(l.body), forks.Sessions[0].ID) {
		t.Errorf("bob's list holds alice's sessions: %s", l.body)
	}
	// The source runs on after its fork, and pauses and resumes for its own key.
	if a := k.do(t, "POST", "/v1/sessions/"+s.ID+"/pause", ``, alice); a.status != 200 || !strings.Contains(string(a.body), `"state":"paused"`) {
		t.Errorf("alice's pause: %d %s", a.status, a.body)
	}
	if a := k.do(t, "POST", "/v1/sessions/"+s.ID+"/resume", ``, alice); a.status != 200 || !strings.Contains(string(a.body), `"state":"idle"`) {
		t.Errorf("alice's resume: %d %s", a.status, a.body)
	}
}

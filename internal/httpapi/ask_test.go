package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
)

// TestCompleteInspect: completion and inspection through REST, in the session's kernel
// with its variables; bad cursors and unknown sessions are refused with the error shape;
// execute's user expressions come back by key.
func TestCompleteInspect(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	c.exec(id, "import json\nrevenue_2024 = 10\ndef margin(x):\n    'Margin of x.'\n    return x", 60)

	var cp api.Completion
	if st := c.do("POST", "/v1/sessions/"+id+"/complete", api.CompleteRequest{Code: "print(revenue_"}, &cp); st != http.StatusOK ||
		!slices.Contains(cp.Matches, "revenue_2024") || cp.CursorStart != 6 || cp.CursorEnd != 14 {
		t.Fatalf("complete: %d %+v", st, cp)
	}
	pos := 7
	if st := c.do("POST", "/v1/sessions/"+id+"/complete", api.CompleteRequest{Code: "json.du(1)", CursorPos: &pos}, &cp); st != http.StatusOK ||
		!slices.Contains(cp.Matches, "dumps") {
		t.Fatalf("complete json.du|: %d %+v", st, cp)
	}
	var in api.Inspection
	if st := c.do("POST", "/v1/sessions/"+id+"/inspect", api.InspectRequest{Code: "margin"}, &in); st != http.StatusOK ||
		!in.Found || !strings.Contains(in.Data["text/plain"].(string), "Margin of x.") {
		t.Fatalf("inspect: %d %+v", st, in)
	}

	bad := 99
	var e api.ErrorBody
	if st := c.do("POST", "/v1/sessions/"+id+"/complete", api.CompleteRequest{Code: "x", CursorPos: &bad}, &e); st != http.StatusBadRequest ||
		!strings.Contains(e.Error.Message, "cursor_pos") {
		t.Errorf("a cursor past the code: %d %+v", st, e)
	}
	if st := c.do("POST", "/v1/sessions/nope/inspect", api.InspectRequest{Code: "x"}, &e); st != http.StatusNotFound {
		t.Errorf("an unknown session: %d %+v", st, e)
	}

	var res api.ExecuteResult
	req := api.ExecuteRequest{Code: "y = revenue_2024 * 2", UserExpressions: map[string]string{"y": "y", "oops": "undefined_name"}}
	if st := c.do("POST", "/v1/sessions/"+id+"/execute", req, &res); st != http.StatusOK ||
		res.UserExpressions["y"].Data["text/plain"] != "20" || res.UserExpressions["oops"].EName != "NameError" {
		t.Errorf("user expressions: %d %+v", st, res.UserExpressions)
	}
	many := map[string]string{}
	for i := range 17 {
		many[strings.Repeat("k", i+1)] = "1"
	}
	if st := c.do("POST", "/v1/sessions/"+id+"/execute", api.ExecuteRequest{Code: "1", UserExpressions: many}, &e); st != http.StatusBadRequest {
		t.Errorf("17 user expressions: %d %+v", st, e)
	}
}

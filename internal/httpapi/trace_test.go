package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	cbclient "github.com/cellbox/cellbox/client"
)

// TestTrace: an execution that asks (api.TraceHeader) gets a Server-Timing header, or an
// event stream's trailer, with every hop of the cell's path, durations that are not negative
// and nest; one that does not ask gets none.
func TestTrace(t *testing.T) {
	c := newClient(t)
	id := c.session(api.CreateSessionRequest{})
	body, _ := json.Marshal(api.ExecuteRequest{Code: "x = 1\nx", TimeoutS: 30})
	post := func(trace, sse bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", c.url+"/v1/sessions/"+id+"/execute", bytes.NewReader(body))
		if trace {
			req.Header.Set(api.TraceHeader, "1")
		}
		if sse {
			req.Header.Set("Accept", "text/event-stream")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"status":"ok"`)) {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return resp // its trailer is read with the body
	}
	for _, tt := range []struct {
		name string
		sse  bool
	}{{"json", false}, {"sse", true}} {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(true, tt.sse)
			h := resp.Header
			if tt.sse {
				if h.Get("Server-Timing") != "" {
					t.Errorf("Server-Timing in an event stream's header, not its trailer")
				}
				h = resp.Trailer
			}
			spans := map[string]time.Duration{}
			for _, tm := range cbclient.ParseServerTiming(h.Values("Server-Timing")) {
				if tm.Dur < 0 || tm.Desc == "" {
					t.Errorf("entry %+v: negative, or no description", tm)
				}
				spans[tm.Name] = tm.Dur
			}
			names := []string{"server", "guest_call", "guest", "files", "kernel", "runner", "run_cell"}
			for _, n := range names {
				if _, ok := spans[n]; !ok {
					t.Fatalf("Server-Timing %q has no %s", h.Values("Server-Timing"), n)
				}
			}
			// Each span within the one that holds it (the entries are rounded to µs).
			within := func(inner, outer time.Duration) bool { return inner <= outer+2*time.Microsecond }
			if !within(spans["guest_call"], spans["server"]) || !within(spans["guest"], spans["guest_call"]) ||
				!within(spans["files"]+spans["kernel"], spans["guest"]) || !within(spans["runner"], spans["kernel"]) ||
				!within(spans["run_cell"], spans["runner"]) || spans["run_cell"] == 0 {
				t.Errorf("spans do not nest: %v", spans)
			}
		})
	}
	t.Run("not asked", func(t *testing.T) {
		for _, sse := range []bool{false, true} {
			resp := post(false, sse)
			if v := resp.Header.Values("Server-Timing"); len(v) > 0 {
				t.Errorf("Server-Timing %q without %s", v, api.TraceHeader)
			}
			if v := resp.Trailer.Values("Server-Timing"); len(v) > 0 {
				t.Errorf("Server-Timing trailer %q without %s", v, api.TraceHeader)
			}
		}
	})
}

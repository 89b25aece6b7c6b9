package guestproto

import (
	"context"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
)

// A trace is asked of a guest that speaks VersionTrace only, and what a guest reports is
// made to fit in what the client measured.
func TestExecuteTrace(t *testing.T) {
	tests := []struct {
		name    string
		version int
		answer  string
		asked   bool
		want    Trace // but Call, which the client measures
		atCall  bool  // instead: Guest and Files cut to Call, nothing left for Kernel
	}{
		{"reported", Version, `{"result":{"status":"ok"},"trace":{"guest":1,"files":0,"kernel":1,"runner":1,"run_cell":1}}`,
			true, Trace{Guest: 1, Kernel: 1, Runner: 1, RunCell: 1}, false},
		{"none from an older guest", VersionTrace - 1, `{"result":{"status":"ok"}}`, false, Trace{}, false},
		{"negative", Version, `{"result":{"status":"ok"},"trace":{"guest":-5,"files":-1,"kernel":-1,"runner":-1,"run_cell":-1}}`,
			true, Trace{}, false},
		{"inner spans longer than outer ones", Version,
			`{"result":{"status":"ok"},"trace":{"guest":1000,"files":0,"kernel":2000,"runner":3000,"run_cell":4000}}`,
			true, Trace{Guest: 1000, Kernel: 1000, Runner: 1000, RunCell: 1000}, false},
		{"longer than the call", Version, `{"result":{"status":"ok"},"trace":{"guest":3600000000000,"files":3600000000000,"kernel":1,"runner":1,"run_cell":1}}`,
			true, Trace{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked bool
			c := fakeGuestOf(t, tt.version, func(req Request) []byte {
				asked = req.Trace
				return []byte(tt.answer + "\n")
			})
			var tr Trace
			r, err := c.ExecuteWith(context.Background(), api.ExecuteRequest{Code: "1", TimeoutS: 5}, ExecuteOptions{Trace: &tr})
			if err != nil || r.Status != api.StatusOK {
				t.Fatal(r, err)
			}
			if asked != tt.asked {
				t.Errorf("trace asked: %v, want %v", asked, tt.asked)
			}
			if tr.Call <= 0 || tr.Call > time.Minute {
				t.Errorf("Call = %v", tr.Call)
			}
			if tt.atCall {
				if tr.Guest != tr.Call || tr.Files != tr.Call || tr.Kernel != 0 {
					t.Errorf("trace %+v: want Guest and Files at Call, Kernel 0 (no room left)", tr)
				}
				return
			}
			tr.Call = 0
			if tr != tt.want {
				t.Errorf("trace %+v, want %+v", tr, tt.want)
			}
		})
	}
	// Without Trace nothing is asked.
	var asked bool
	c := fakeGuest(t, func(req Request) []byte {
		asked = req.Trace
		return []byte(`{"result":{"status":"ok"}}` + "\n")
	})
	if _, err := c.Execute(context.Background(), api.ExecuteRequest{Code: "1", TimeoutS: 5}, nil); err != nil || asked {
		t.Errorf("a trace was asked without ExecuteOptions.Trace (%v)", err)
	}
}

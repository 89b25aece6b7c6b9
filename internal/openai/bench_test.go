package openai

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	llmopenai "github.com/cellbox/cellbox/internal/llm/openai"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
	"github.com/cellbox/cellbox/internal/tool"
)

// timedProvider and timedRunner count the time spent in the model and in the code.
type timedProvider struct {
	llm.Provider
	ns *atomic.Int64
}

func (p timedProvider) Complete(ctx context.Context, req llm.Request, onText func(string)) (*llm.Response, error) {
	start := time.Now()
	defer func() { p.ns.Add(int64(time.Since(start))) }()
	return p.Provider.Complete(ctx, req, onText)
}

type timedRunner struct {
	tool.Runner
	ns *atomic.Int64
}

func (r timedRunner) Execute(ctx context.Context, id string, req api.ExecuteRequest, on func(api.Output)) (*api.ExecuteResult, error) {
	start := time.Now()
	defer func() { r.ns.Add(int64(time.Since(start))) }()
	return r.Runner.Execute(ctx, id, req, on)
}

// BenchmarkResponsesTurn: a turn with one code call (the model calls python, then answers)
// through POST /v1/responses, against a Chat Completions stand-in on loopback, in an
// existing container. It reports what the Responses layer adds: the turn's time minus the
// model's requests (the upstream's own time, as the provider saw it) and the code's run.
//
//	go test -run '^$' -bench ResponsesTurn ./internal/openai/
func BenchmarkResponsesTurn(b *testing.B) {
	m := sessiontest.New(b, nil)
	script := func(r llmtest.Request) llmtest.Reply {
		last := r.Messages[len(r.Messages)-1]
		if len(last.ToolResults) > 0 {
			return llmtest.Text("done")
		}
		return llmtest.CallTool("python", `{"code": "x = 1"}`)
	}
	model := llmtest.NewOpenAI(b, script)
	var modelNS, codeNS atomic.Int64
	h, err := New(m, Options{StateDir: b.TempDir(), MaxBodyBytes: 1 << 20, MaxUploadBytes: 1 << 20, MaxMemoryMB: 4096,
		Responses: ResponsesOptions{Runner: timedRunner{m, &codeNS}, NewProvider: func(string) (llm.Provider, string, error) {
			p, err := llmopenai.New(llmopenai.Options{BaseURL: model.URL, APIKey: model.Key})
			return timedProvider{p, &modelNS}, "stand-in", err
		}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(session.WithTenant(r.Context(), "")))
	}))
	b.Cleanup(srv.Close)
	s, err := m.Create(context.Background(), api.CreateSessionRequest{})
	if err != nil {
		b.Fatal(err)
	}
	body := `{"input": "go", "tools": [{"type": "code_interpreter", "container": "cntr_` + s.ID + `"}], "store": false}`
	modelNS.Store(0)
	codeNS.Store(0)
	start := time.Now()
	for b.Loop() {
		resp, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(body))
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("%v %v", err, resp)
		}
		resp.Body.Close()
	}
	total := time.Since(start)
	n := float64(b.N)
	b.ReportMetric(float64(modelNS.Load())/n/1e6, "model-ms/op")
	b.ReportMetric(float64(codeNS.Load())/n/1e6, "code-ms/op")
	b.ReportMetric(float64(total.Nanoseconds()-modelNS.Load()-codeNS.Load())/n/1e6, "added-ms/op")
}

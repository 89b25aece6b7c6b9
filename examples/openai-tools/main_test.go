package main

// run against a real cellbox server in this process (runc sandboxes, the real guest,
// IPython) and a stand-in for the OpenAI API over real HTTP.

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testserver"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func TestRun(t *testing.T) {
	cb := startCellbox(t)
	tests := []struct {
		name   string
		file   string
		code   string
		want   string // in the tool result the model gets
		images int    // image/png images with the result
	}{
		{
			name: "plot",
			file: "../data/traffic_accidents.csv",
			code: "import pandas as pd\nimport matplotlib.pyplot as plt\n" +
				"df = pd.read_csv('/mnt/data/traffic_accidents.csv')\nprint(df.shape)\n" +
				"df['accidents'].hist()\nplt.show()",
			want:   "(8000, 10)",
			images: 1,
		},
		{name: "exception", code: "1/0", want: "ZeroDivisionError"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args, _ := json.Marshal(map[string]string{"code": tc.code})
			const answer = "The answer, from the code's output."
			s := llmtest.NewOpenAI(t, llmtest.Replies(llmtest.CallTool("python", string(args)), llmtest.Text(answer)))
			ai := openai.NewClient(option.WithBaseURL(s.URL), option.WithAPIKey(s.Key))
			var progress strings.Builder

			got, err := run(t.Context(), cb, ai, "gpt-test", "What is in the data?", tc.file, &progress)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if got != answer {
				t.Errorf("answer = %q, want %q", got, answer)
			}
			if !strings.Contains(progress.String(), tc.code) {
				t.Errorf("progress does not show the code:\n%s", progress.String())
			}

			reqs := s.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests reached the model, want 2", len(reqs))
			}
			if tc.file != "" && !strings.Contains(reqs[0].Messages[0].Text, "/mnt/data/traffic_accidents.csv") {
				t.Errorf("the question does not say where the file is: %q", reqs[0].Messages[0].Text)
			}
			msgs := reqs[1].Messages
			results := msgs[len(msgs)-1].ToolResults
			if len(results) != 1 {
				t.Fatalf("the second request has %d tool results, want 1: %+v", len(results), msgs)
			}
			r := results[0]
			if !strings.Contains(r.Text, tc.want) {
				t.Errorf("the tool result does not contain %q:\n%s", tc.want, r.Text)
			}
			if len(r.Images) != tc.images {
				t.Fatalf("the tool result has %d images, want %d", len(r.Images), tc.images)
			}
			for _, img := range r.Images {
				if img.MIME != "image/png" {
					t.Errorf("image type %q, want image/png", img.MIME)
				}
			}

			sessions, err := cb.ListSessions(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(sessions) != 0 {
				t.Errorf("run left %d session(s)", len(sessions))
			}
		})
	}
}

// startCellbox starts a cellbox server on the runc backend for the test, skipping when this
// machine cannot run it (`make test` runs as root with all it needs).
func startCellbox(t *testing.T) *client.Client {
	t.Helper()
	cfg := testserver.Config(testserver.Host(t), t.TempDir())
	cfg.PoolSize = 0
	return client.New(testserver.Start(t, cfg, server.Options{}).URL)
}

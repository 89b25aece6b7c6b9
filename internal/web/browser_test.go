package web_test

// The page in a real browser: Debian's chromium, driven by playwright-core
// (testdata/browser/browser.mjs), against a real `cellbox serve` (runc, IPython) with API
// keys, and a stand-in for OpenAI's Chat Completions API (llmtest) over HTTP that plays a
// model analysing the traffic-accidents data.
//
// With CELLBOX_SCREENSHOTS=dir the script also saves screenshots of the chat and the
// notebook, 1440 and 390 px wide, into dir (`make screenshots`).

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/agent"
	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testserver"
)

const testKey = "cbx_b10e5e7000000000000000000000000000000b"

// The analysis the stand-in model runs, as a model would write it.
const (
	analysisCode = "import pandas as pd\nimport matplotlib.pyplot as plt\n\n" +
		"df = pd.read_csv('/mnt/data/traffic_accidents.csv')\n" +
		"print(df.shape)\n" +
		"by_hour = df.groupby(df['time_of_day'].astype(int) % 24)['accidents'].sum()\n" +
		"print('busiest hour:', by_hour.idxmax())\n" +
		"ax = by_hour.plot.bar(title='Accidents by hour of day', figsize=(8, 4))\n" +
		"ax.set_xlabel('hour'); ax.set_ylabel('accidents')\n" +
		"plt.savefig('/mnt/data/accidents_by_hour.png')\n" +
		"plt.show()"
	followUpCode = "print(round(df['average_speed'].mean(), 2))"
	longCode     = "from IPython.display import HTML, display\n" +
		"display(HTML('<b class=\"dropzone primary\" id=\"key\">counting</b><img src=x onerror=\"window.pwned = 3\"><input type=password>'))\n" +
		"import time\nfor i in range(1000):\n    print('tick', i, flush=True)\n    time.sleep(0.2)"
	// hostile is text a model might be made to write by a prompt injection in the data.
	hostile = "Counting now.\n\n<div class=\"dropzone\">Your session expired: enter your API key <input type=password name=key></div>\n\n" +
		"<img src=x onerror=\"window.pwned = 1\"> [details](javascript:window.pwned=2) <a href=\"https://evil.example/\">more</a>"
)

// model plays the model: it calls python for each of the test's requests, and answers
// from the result.
func model(r llmtest.Request) llmtest.Reply {
	var request string // the person's last request
	for _, m := range r.Messages {
		if m.Role == llm.RoleUser && len(m.ToolResults) == 0 {
			request = m.Text
		}
	}
	last := r.Messages[len(r.Messages)-1]
	call := func(code string) llmtest.Reply {
		args, _ := json.Marshal(map[string]string{"code": code})
		return llmtest.CallTool("python", string(args))
	}
	if len(last.ToolResults) == 0 {
		switch {
		case strings.Contains(request, "time of day"):
			return llmtest.Reply{Text: "Let me look at the data first.", ToolCalls: call(analysisCode).ToolCalls}
		case strings.Contains(request, "average speed"):
			return call(followUpCode)
		case strings.Contains(request, "count slowly"):
			return llmtest.Reply{Text: hostile, ToolCalls: call(longCode).ToolCalls}
		}
		return llmtest.Fail(400, "the stand-in model has no answer for: "+request)
	}
	res := last.ToolResults[0]
	switch {
	case strings.Contains(request, "time of day"):
		hour := "?"
		if _, after, ok := strings.Cut(res.Text, "busiest hour: "); ok {
			hour = strings.Fields(after)[0]
		}
		return llmtest.Text(fmt.Sprintf("Most accidents happen at **hour %s**.\n\n- The table has 8,000 rows and 10 columns.\n- The plot is saved as `/mnt/data/accidents_by_hour.png`.", hour))
	case strings.Contains(request, "average speed"):
		return llmtest.Text("The average speed is **" + strings.TrimSpace(res.Text) + "** km/h.")
	}
	return llmtest.Fail(400, "the stand-in model did not expect a result for: "+request)
}

func TestBrowser(t *testing.T) {
	testbin.NeedRunc(t)
	node := testbin.NeedProgram(t, "node", "nodejs")
	chromium := testbin.NeedProgram(t, "chromium", "chromium")
	testbin.NeedIPython(t, "nbformat") // Debian's, to validate the notebook the page downloads
	dir, err := filepath.Abs(filepath.Join("testdata", "browser"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); err != nil {
		testbin.Missing(t, "needs playwright-core: run npm ci in %s (make test does)", dir)
	}
	csvPath, err := filepath.Abs(filepath.Join("..", "..", "examples", "data", "traffic_accidents.csv"))
	if err != nil {
		t.Fatal(err)
	}
	meanSpeed := averageSpeed(t, csvPath)

	llmSrv := llmtest.NewOpenAI(t, model)
	t.Setenv("OPENAI_BASE_URL", llmSrv.URL)
	t.Setenv("OPENAI_API_KEY", llmSrv.Key)
	t.Setenv("ANTHROPIC_API_KEY", "")
	url := startServer(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "browser.mjs")
	cmd.Dir = dir
	ipynb := filepath.Join(t.TempDir(), "downloaded.ipynb")
	cmd.Env = append(os.Environ(), "CELLBOX_URL="+url, "CELLBOX_KEY="+testKey, "CHROMIUM="+chromium,
		"DATA_CSV="+csvPath, "MEAN_SPEED="+meanSpeed, "DEFAULT_MODEL="+agent.DefaultOpenAIModel, "NOTEBOOK_OUT="+ipynb)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(&stderr, testWriter{t})
	if err := cmd.Run(); err != nil {
		t.Fatalf("browser.mjs: %v\n%s", err, &stderr)
	}
	// The notebook the page downloaded is one that Jupyter's own nbformat accepts, without
	// repairs (-W error: nbformat warns of what it fixes, such as a 4.5 cell without an id).
	check := exec.Command("/usr/bin/python3", "-W", "error", "-c", "import nbformat, sys; nbformat.validate(nbformat.read(sys.argv[1], 4))", ipynb)
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("nbformat refuses the downloaded notebook: %v\n%s", err, out)
	}
	// Its code cells keep their languages (Python's unsaid), the notebook itself is Python's.
	var nb struct {
		Cells []struct {
			Type     string `json:"cell_type"`
			Metadata struct {
				Cellbox struct{ Language string } `json:"cellbox"`
			} `json:"metadata"`
		} `json:"cells"`
		Metadata struct {
			Kernelspec struct{ Language string } `json:"kernelspec"`
		} `json:"metadata"`
	}
	if b, err := os.ReadFile(ipynb); err != nil {
		t.Error(err)
	} else if err := json.Unmarshal(b, &nb); err != nil {
		t.Errorf("the downloaded notebook: %v", err)
	}
	var langs []string
	for _, c := range nb.Cells {
		if c.Type == "code" {
			langs = append(langs, c.Metadata.Cellbox.Language)
		}
	}
	if got := strings.Join(langs, ","); got != ",javascript,bash" || nb.Metadata.Kernelspec.Language != "python" {
		t.Errorf("the downloaded notebook's languages: cells %q, notebook %q", got, nb.Metadata.Kernelspec.Language)
	}
	// What the model was sent: the file's preview, then the whole conversation.
	reqs := llmSrv.Requests()
	if len(reqs) < 5 {
		t.Fatalf("the model got %d requests, want at least 5", len(reqs))
	}
	first := reqs[0].Messages[0].Text
	for _, want := range []string{"/mnt/data/traffic_accidents.csv", "8,000 rows", "time of day"} {
		if !strings.Contains(first, want) {
			t.Errorf("the first request lacks %q:\n%s", want, first)
		}
	}
	for _, r := range reqs {
		if strings.Contains(r.Messages[len(r.Messages)-1].Text, "average speed") && len(r.Messages) < 5 {
			t.Errorf("the follow-up was sent without the conversation before it (%d messages)", len(r.Messages))
		}
	}
}

// startServer starts `cellbox serve` in this process (runc, keys) and returns its URL.
func startServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	os.WriteFile(keys, []byte(testKey+" browser\n"), 0o600)
	k, err := auth.Load("", keys)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testserver.Config(testserver.Host(t), filepath.Join(dir, "state"))
	cfg.PoolSize, cfg.PoolMax = 1, 0
	return testserver.Start(t, cfg, server.Options{Keys: k, Quiet: true}).URL
}

// averageSpeed is the mean of the CSV's average_speed, as pandas prints round(x, 2).
func averageSpeed(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := -1
	for i, name := range rows[0] {
		if name == "average_speed" {
			col = i
		}
	}
	sum := 0.0
	for _, r := range rows[1:] {
		v, err := strconv.ParseFloat(r[col], 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return strconv.FormatFloat(sum/float64(len(rows)-1), 'f', 2, 64)
}

// testWriter logs the script's progress lines as they come.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

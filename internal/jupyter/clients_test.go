package jupyter_test

// Jupyter's own clients, from Debian's packages, with their kernels in cellbox:
// jupyter_server 1.23 with --gateway-url, nbclient 0.7 through its gateway kernel manager,
// and Jupyter Notebook 6 with --gateway-url driven in Debian's chromium.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/testbin"
)

const python = "/usr/bin/python3" // Debian's, with its Jupyter packages

// needPython calls Missing unless Debian's python3 imports modules (from package pkg).
func needPython(t *testing.T, pkg string, modules ...string) {
	t.Helper()
	code := "import " + strings.Join(modules, ", ")
	if out, err := exec.Command(python, "-c", code).CombinedOutput(); err != nil {
		testbin.Missing(t, "needs %s (%s): %s", pkg, code, lastLine(out))
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// jupyterApp starts a Jupyter server process (args after python3) in a folder of its own
// and waits until GET /api answers with its token; it is stopped when the test ends.
func jupyterApp(t *testing.T, token string, args ...string) (url, dir string) {
	t.Helper()
	dir = t.TempDir()
	addr := testbin.FreeAddr(t)
	port := addr[strings.LastIndex(addr, ":")+1:]
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, python, append(args, "--no-browser", "--allow-root", "--ip=127.0.0.1", "--port="+port)...)
	cmd.Dir = dir
	home := filepath.Join(dir, ".home")
	cmd.Env = append(os.Environ(), "HOME="+home, "JUPYTER_CONFIG_DIR="+filepath.Join(home, "config"), "JUPYTER_DATA_DIR="+filepath.Join(home, "data"),
		"JUPYTER_RUNTIME_DIR="+filepath.Join(home, "runtime"), "JUPYTER_PLATFORM_DIRS=1")
	var log testbin.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s's log:\n%s", args[1], log.String())
		}
	})
	url = "http://127.0.0.1:" + port
	testbin.WaitFor(t, time.Minute, args[1]+" to answer", func() error {
		resp, err := http.Get(url + "/api/status?token=" + token)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	return url, dir
}

// TestJupyterServerGateway: Debian's jupyter_server started with --gateway-url at cellbox
// makes its kernels there; a client of jupyter_server's own websocket runs cells,
// interrupts and restarts them through it, and its kernel list and deletes reach cellbox.
func TestJupyterServerGateway(t *testing.T) {
	needPython(t, "python3-jupyter-server", "jupyter_server")
	g := startGateway(t, false)
	const token = "jupyter-server-token"
	url, _ := jupyterApp(t, token, "-m", "jupyter_server", "--ServerApp.token="+token, "--gateway-url="+g.url, "--GatewayClient.auth_token="+aliceKey)
	js := &gw{url: url}

	var specs struct {
		Default     string         `json:"default"`
		Kernelspecs map[string]any `json:"kernelspecs"`
	}
	if st := js.do(t, "GET", "/api/kernelspecs", token, "", &specs); st != http.StatusOK || specs.Default != "python3" || specs.Kernelspecs["python3"] == nil ||
		len(specs.Kernelspecs) != 5 {
		t.Fatalf("kernelspecs through jupyter_server: %d %+v", st, specs)
	}
	var k kernelModel
	if st := js.do(t, "POST", "/api/kernels", token, `{"name":"python3"}`, &k); st != http.StatusCreated {
		t.Fatalf("start a kernel through jupyter_server: %d", st)
	}
	// The same kernel in cellbox, alice's.
	if st := g.do(t, "GET", "/api/kernels/"+k.ID, aliceKey, "", nil); st != http.StatusOK {
		t.Fatalf("jupyter_server's kernel %s in cellbox: %d", k.ID, st)
	}
	var list []kernelModel
	if st := js.do(t, "GET", "/api/kernels", token, "", &list); st != http.StatusOK || !hasKernel(list, k.ID) {
		t.Errorf("jupyter_server's kernel list: %d %v", st, list)
	}

	c := js.mustDial(t, k.ID, token, false)
	c.ready()
	iopub, reply := c.request("shell", "execute_request", map[string]any{"code": "x = 6 * 7\nprint(x)", "silent": false})
	if reply.Content["status"] != "ok" || texts(iopub, "stream") != "42\n" {
		t.Fatalf("a cell through jupyter_server: %+v %v", reply.Content, iopub)
	}
	id := c.send("shell", "execute_request", map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(120)"})
	for {
		m, err := c.recv(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if m.parent() == id && m.typ() == "stream" {
			break
		}
	}
	if st := js.do(t, "POST", "/api/kernels/"+k.ID+"/interrupt", token, "", nil); st != http.StatusNoContent {
		t.Fatalf("interrupt through jupyter_server: %d", st)
	}
	if _, reply := c.until(id); reply.Content["ename"] != "KeyboardInterrupt" {
		t.Errorf("the interrupted cell: %+v", reply.Content)
	}
	if st := js.do(t, "POST", "/api/kernels/"+k.ID+"/restart", token, "", nil); st != http.StatusOK {
		t.Fatalf("restart through jupyter_server: %d", st)
	}
	c = js.mustDial(t, k.ID, token, false) // jupyter_server may close the old websocket on a restart
	c.ready()
	if _, reply := c.request("shell", "execute_request", map[string]any{"code": "x"}); reply.Content["ename"] != "NameError" {
		t.Errorf("x after the restart: %+v", reply.Content)
	}
	if st := js.do(t, "DELETE", "/api/kernels/"+k.ID, token, "", nil); st != http.StatusNoContent {
		t.Fatalf("delete through jupyter_server: %d", st)
	}
	if st := g.do(t, "GET", "/api/kernels/"+k.ID, aliceKey, "", nil); st != http.StatusNotFound {
		t.Errorf("the deleted kernel in cellbox: %d", st)
	}

	// A kernel of another kernelspec: bash.
	if st := js.do(t, "POST", "/api/kernels", token, `{"name":"bash"}`, &k); st != http.StatusCreated || k.Name != "bash" {
		t.Fatalf("start a bash kernel through jupyter_server: %d %+v", st, k)
	}
	t.Cleanup(func() { js.do(t, "DELETE", "/api/kernels/"+k.ID, token, "", nil) })
	c = js.mustDial(t, k.ID, token, false)
	c.ready()
	if iopub, reply := c.request("shell", "execute_request", map[string]any{"code": "echo $((6 * 7))"}); reply.Content["status"] != "ok" || texts(iopub, "stream") != "42\n" {
		t.Errorf("a bash cell through jupyter_server: %+v %v", reply.Content, iopub)
	}
}

func hasKernel(list []kernelModel, id string) bool {
	for _, k := range list {
		if k.ID == id {
			return true
		}
	}
	return false
}

// TestNbclient: nbclient executes a notebook whose kernel lives in cellbox, through
// jupyter_server's gateway kernel manager, whose websocket carries no token
// (--jupyter-open-channels); the outputs land in the notebook, a failing cell raises as
// nbclient's CellExecutionError, and nbclient's shutdown ends the kernel.
func TestNbclient(t *testing.T) {
	needPython(t, "python3-nbclient and python3-jupyter-server", "nbclient", "nbformat", "jupyter_server.gateway.managers")
	g := startGateway(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, filepath.Join("testdata", "nbclient_run.py"))
	cmd.Env = append(os.Environ(), "GATEWAY_URL="+g.url, "GATEWAY_TOKEN="+aliceKey, "HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nbclient: %v\n%s", err, stderr.String())
	}
	var res struct {
		KernelID   string             `json:"kernel_id"`
		Cells      [][]map[string]any `json:"cells"`
		Counts     []any              `json:"counts"`
		Raised     string             `json:"raised"`
		NotReached []any              `json:"not_reached"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("nbclient's answer %q: %v", out, err)
	}
	if len(res.Cells) != 4 || len(res.Cells[1]) != 1 || res.Cells[1][0]["text"] != "sum 6 in /mnt/data\n" {
		t.Fatalf("nbclient's cells: %+v\n%s", res.Cells, stderr.String())
	}
	png := false
	for _, o := range res.Cells[2] {
		d, _ := o["data"].(map[string]any)
		png = png || d["image/png"] != nil
	}
	if !png || fmt.Sprint(res.Cells[3][0]["data"]) != "map[text/plain:{'max': 3}]" || res.Counts[1] != 1.0 || res.Counts[3] != 3.0 {
		t.Errorf("the plot and the value: %+v, counts %v", res.Cells[2:], res.Counts)
	}
	if res.Raised != "ZeroDivisionError" || len(res.NotReached) != 0 {
		t.Errorf("a failing notebook: raised %q, the next cell %v", res.Raised, res.NotReached)
	}
	if st := g.do(t, "GET", "/api/kernels/"+res.KernelID, aliceKey, "", nil); st != http.StatusNotFound {
		t.Errorf("nbclient's kernel %s after it finished: %d", res.KernelID, st)
	}
}

// TestNotebook6 drives Jupyter Notebook 6, started with --gateway-url at cellbox, in
// chromium: a notebook opens, its kernel starts in cellbox, a cell run with Shift+Enter
// shows its output.
func TestNotebook6(t *testing.T) {
	needPython(t, "jupyter-notebook", "notebook")
	node := testbin.NeedProgram(t, "node", "nodejs")
	chromium := testbin.NeedProgram(t, "chromium", "chromium")
	pw, err := filepath.Abs(filepath.Join("..", "web", "testdata", "browser", "node_modules", "playwright-core"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pw); err != nil {
		testbin.Missing(t, "needs playwright-core: run npm ci in internal/web/testdata/browser (make test does)")
	}
	g := startGateway(t, false)
	const token = "notebook-token"
	url, dir := jupyterApp(t, token, "-m", "notebook", "--NotebookApp.token="+token, "--gateway-url="+g.url, "--GatewayClient.auth_token="+aliceKey)
	nb := `{"cells":[{"cell_type":"code","execution_count":null,"metadata":{},"outputs":[],"source":["import sys\n","print('answer', 6 * 7, sys.prefix)"]}],` +
		`"metadata":{"kernelspec":{"display_name":"Python 3","language":"python","name":"python3"}},"nbformat":4,"nbformat_minor":5}`
	if err := os.WriteFile(filepath.Join(dir, "cellbox.ipynb"), []byte(nb), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "notebook6.mjs"))
	cmd.Env = append(os.Environ(), "NOTEBOOK_URL="+url+"/notebooks/cellbox.ipynb?token="+token, "CHROMIUM="+chromium, "PLAYWRIGHT="+filepath.Join(pw, "index.js"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, io.MultiWriter(&out)
	if err := cmd.Run(); err != nil {
		t.Fatalf("notebook6.mjs: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "output: answer 42") {
		t.Errorf("the cell's output in the page:\n%s", out.String())
	}
	// Its kernel is alice's in cellbox.
	var list []kernelModel
	if st := g.do(t, "GET", "/api/kernels", aliceKey, "", &list); st != http.StatusOK || len(list) == 0 {
		t.Errorf("Notebook's kernel in cellbox: %d %v", st, list)
	}
}

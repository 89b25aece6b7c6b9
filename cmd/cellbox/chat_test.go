package main

// cellbox chat as a user runs it: the built binary, an embedded runc server, and stand-in
// model APIs (llmtest) speaking the real Chat Completions and Messages wire formats over
// HTTP, found through the providers' own variables.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/llm/llmtest"
	"github.com/cellbox/cellbox/internal/testbin"
)

func lastResult(r llmtest.Request) (llm.ToolResult, bool) {
	last := r.Messages[len(r.Messages)-1]
	if len(last.ToolResults) == 0 {
		return llm.ToolResult{}, false
	}
	return last.ToolResults[0], true
}

func TestChatPromptWithFile(t *testing.T) {
	needRunc(t)
	code := "import pandas as pd, matplotlib.pyplot as plt\n" +
		"df = pd.read_csv('/mnt/data/traffic_accidents.csv')\nprint(df.shape)\n" +
		"df['accidents'].hist()\nplt.savefig('/mnt/data/hist.png')\nplt.show()"
	args, _ := json.Marshal(map[string]string{"code": code})
	var first string
	var got llm.ToolResult
	s := llmtest.NewOpenAI(t, func(r llmtest.Request) llmtest.Reply {
		if res, ok := lastResult(r); ok {
			got = res
			return llmtest.Text("## Answer\nThere are **8000** rows.")
		}
		first = r.Messages[0].Text
		return llmtest.CallTool("python", string(args))
	})
	t.Setenv("OPENAI_BASE_URL", s.URL)
	t.Setenv("OPENAI_API_KEY", s.Key)
	r := cellbox(t, "", "chat", "--provider", "openai", "--model", "gpt-test", "--file", trafficData(t),
		"-p", "How many rows? Plot the accidents.")
	r.want(t, exitOK)
	// stdout is the answer alone, as the model wrote it (stdout is not a terminal).
	if r.stdout != "## Answer\nThere are **8000** rows.\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	for _, want := range []string{"traffic_accidents.csv (343.5 kB): 8,000 rows, 10 columns: accidents,", "How many rows?"} {
		if !strings.Contains(first, want) {
			t.Errorf("the model was not told %q:\n%s", want, first)
		}
	}
	if !strings.Contains(got.Text, "(8000, 10)") || len(got.Images) != 1 {
		t.Errorf("the model got %q and %d images", got.Text, len(got.Images))
	}
	// The work is on stderr: the code, its output, and where the plots went.
	for _, want := range []string{"── python", "df['accidents'].hist()", "(8000, 10)", "saved cellbox-out/hist.png", "saved cellbox-out/cell-1-out-1.png"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	for _, f := range []string{"hist.png", "cell-1-out-1.png"} {
		b, err := os.ReadFile(filepath.Join(r.dir, "cellbox-out", f))
		if err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestChatConversationAsksFirst(t *testing.T) {
	needRunc(t)
	s := llmtest.NewAnthropic(t, llmtest.Replies(
		llmtest.CallTool("python", `{"code": "open('/mnt/data/secret.txt', 'w').write('x')"}`),
		llmtest.Text("OK, I will not write it."),
		llmtest.CallTool("python", `{"code": "print(6 * 7)"}`),
		llmtest.Text("It is 42."),
	))
	t.Setenv("ANTHROPIC_BASE_URL", s.URL)
	t.Setenv("ANTHROPIC_API_KEY", s.Key)
	t.Setenv("OPENAI_API_KEY", "")
	// Two requests; the first call is declined ("n"), the second run (Enter).
	r := cellbox(t, "write a secret\nn\nwhat is 6*7?\n\n", "chat", "--approve", "ask")
	r.want(t, exitOK)
	reqs := s.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests; stderr:\n%s", len(reqs), r.stderr)
	}
	if res, _ := lastResult(reqs[1]); !strings.Contains(res.Text, "declined") {
		t.Errorf("the model was not told of the decline: %q", res.Text)
	}
	if res, _ := lastResult(reqs[3]); res.Text != "42" {
		t.Errorf("the model got %q", res.Text)
	}
	for _, req := range reqs {
		if !req.Stream || req.Model != "claude-sonnet-4-5" {
			t.Errorf("request: stream %v, model %q", req.Stream, req.Model)
		}
	}
	for _, want := range []string{"OK, I will not write it.", "(not run)", "print(6 * 7)", "42\n", "It is 42."} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Count(r.stderr, "Run it?") != 2 {
		t.Errorf("asked %d times:\n%s", strings.Count(r.stderr, "Run it?"), r.stderr)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "cellbox-out", "secret.txt")); err == nil {
		t.Error("the declined code ran")
	}
}

func TestChatErrors(t *testing.T) {
	needRunc(t)
	s := llmtest.NewOpenAI(t, llmtest.Replies(llmtest.Fail(401, "Incorrect API key provided")))
	t.Setenv("OPENAI_BASE_URL", s.URL)
	t.Setenv("OPENAI_API_KEY", "sk-wrong")
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"chat", "--approve", "maybe", "-p", "x"}, exitUsage, "--approve"},
		{[]string{"chat", "--provider", "gemini", "-p", "x"}, exitUsage, "gemini"},
		{[]string{"chat", "--max-steps", "0", "-p", "x"}, exitUsage, "--max-steps"},
		{[]string{"chat", "-p", "x", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"chat", "--file", "/nonexistent.csv", "-p", "x"}, exitService, "nonexistent.csv"},
		{[]string{"chat", "--provider", "openai", "-p", "x"}, exitService, "OPENAI_API_KEY"},
	}
	for _, tt := range tests {
		r := cellbox(t, "", tt.args...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d with %q", tt.args, r.code, r.stderr, tt.code, tt.msg)
		}
		if strings.Contains(r.stderr, "sk-wrong") {
			t.Errorf("%v: the API key is in the message", tt.args)
		}
	}
}

// Text from the model and its code must not drive the terminal: escape sequences are shown,
// not obeyed, so that the code at the approval prompt is the code that runs.
func TestChatShowsEscapesInsteadOfObeyingThem(t *testing.T) {
	needRunc(t)
	s := llmtest.NewOpenAI(t, llmtest.Replies(
		llmtest.CallTool("python", `{"code": "x = 1 # \u001b[2K\u001b[1A\nprint('\\x1b]52;c;ZXZpbA==\\x07out')"}`),
		llmtest.Text("done"),
	))
	t.Setenv("OPENAI_BASE_URL", s.URL)
	t.Setenv("OPENAI_API_KEY", s.Key)
	r := cellbox(t, "\n", "chat", "--provider", "openai", "--approve", "ask", "-p", "go")
	r.want(t, exitOK)
	if strings.ContainsAny(r.stderr, "\x1b\a") || strings.Contains(r.stderr, "\r") {
		t.Errorf("control characters reached the terminal: %q", r.stderr)
	}
	for _, want := range []string{"x = 1 # ^[[2K^[[1A\n", "^[]52;c;ZXZpbA==^Gout"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q: %q", want, r.stderr)
		}
	}
}

// On a terminal, chat asks before running code by default, and renders the answer. The
// terminal is a real pseudo-terminal (Python's pty module drives the binary like a person).
func TestChatOnATerminal(t *testing.T) {
	needRunc(t)
	s := llmtest.NewAnthropic(t, llmtest.Replies(
		llmtest.CallTool("python", `{"code": "print(6 * 7)"}`),
		llmtest.Text("## Result\n- it is **42**"),
	))
	t.Setenv("ANTHROPIC_BASE_URL", s.URL)
	t.Setenv("ANTHROPIC_API_KEY", s.Key)
	t.Setenv("OPENAI_API_KEY", "")
	// expect(pattern) reads the terminal until pattern shows (or 120 s pass), then answers.
	const driver = `
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
def expect(pattern):
    global out
    end = time.time() + 120
    while pattern.encode() not in out and time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                break
expect("> "); os.write(fd, b"what is 6*7?\n")
expect("Run it?"); os.write(fd, b"\n")
expect("42\x1b[0m"); expect("> "); os.write(fd, b"\x04")
os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
`
	cmd := exec.Command("python3", "-c", driver, testbin.Cellbox(t), "chat")
	cmd.Env = append(os.Environ(), "CELLBOX_STATE_DIR="+stateDir)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{"Run it? [Y]es, [n]o, [s]top:", "print(6 * 7)", "42\r\n", ansiBold + "Result" + ansiReset, "  • it is " + ansiBold + "42" + ansiReset} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the terminal lacks %q:\n%q", want, out)
		}
	}
	if n := len(s.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2", n)
	}
}

// --allow and --internet make the session's network policy, which the model is told of in
// its system prompt; what the server does not allow is refused with its reason.
func TestChatNetwork(t *testing.T) {
	needRunc(t)
	s := llmtest.NewOpenAI(t, func(llmtest.Request) llmtest.Reply { return llmtest.Text("ok") })
	t.Setenv("OPENAI_BASE_URL", s.URL)
	t.Setenv("OPENAI_API_KEY", s.Key)
	tests := []struct {
		name   string
		args   []string
		code   int
		system string // what the system prompt says of the network
		stderr string
	}{
		{"default", nil, exitOK, "no internet access", ""},
		{"allow", []string{"--allow", "pypi.org, *.pythonhosted.org:443"}, exitOK, "may reach only pypi.org, *.pythonhosted.org:443", ""},
		{"internet", []string{"--internet"}, exitOK, "may reach the public internet", ""},
		{"wider than the server allows", []string{"--egress-max", "allowlist:pypi.org", "--allow", "example.com"}, exitService, "",
			`cellbox chat: the server refused the network access asked for: allow entry "example.com": not within what this server allows (allow entries within "pypi.org").` + "\n"},
		{"a bad entry", []string{"--allow", "exa mple.com"}, exitService, "",
			`cellbox chat: the server refused the network access asked for: allow entry "exa mple.com": not a domain, IP address or CIDR.` + "\n"},
		{"both", []string{"--allow", "pypi.org", "--internet"}, exitUsage, "", "--allow DOMAIN,... or --internet, not both"},
		{"an empty list", []string{"--allow", ","}, exitUsage, "", "name at least one destination"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(s.Requests())
			r := cellbox(t, "", append(append([]string{"chat", "--provider", "openai"}, tt.args...), "-p", "hello")...)
			r.want(t, tt.code)
			if !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, r.stderr)
			}
			reqs := s.Requests()[before:]
			if tt.system == "" {
				if len(reqs) != 0 {
					t.Errorf("the model was asked %d times", len(reqs))
				}
				return
			}
			if len(reqs) != 1 || !strings.Contains(reqs[0].System, tt.system) {
				t.Fatalf("the model was not told %q: %d requests; stderr:\n%s", tt.system, len(reqs), r.stderr)
			}
		})
	}
}

// TestChatSessionTool: the seed flow in `cellbox chat`: the model defines a tool with
// python, then calls it by name through the REST API; the approval shows the tool and its
// arguments.
func TestChatSessionTool(t *testing.T) {
	needRunc(t)
	define := "from cellbox import tool\n\n@tool\ndef area(w: float, h: float) -> float:\n" +
		"    \"\"\"Area of a rectangle of width w and height h.\"\"\"\n    return w * h\n"
	args, _ := json.Marshal(map[string]string{"code": define})
	var offered []string
	s := llmtest.NewOpenAI(t, func(r llmtest.Request) llmtest.Reply {
		if len(r.Tools) == 3 {
			offered = append(offered, r.Tools[2].Name)
		}
		res, ok := lastResult(r)
		switch {
		case !ok:
			return llmtest.CallTool("python", string(args))
		case strings.HasPrefix(res.Text, "Returned: "):
			return llmtest.Text("The area is " + strings.TrimPrefix(res.Text, "Returned: ") + ".")
		default:
			return llmtest.CallTool("area", `{"w": 3, "h": 4.5}`)
		}
	})
	t.Setenv("OPENAI_BASE_URL", s.URL)
	t.Setenv("OPENAI_API_KEY", s.Key)
	r := cellbox(t, "\n\n", "chat", "--provider", "openai", "--approve", "ask", "-p", "What is the area of a 3 by 4.5 room?")
	r.want(t, exitOK)
	if r.stdout != "The area is 13.5.\n" || len(offered) != 2 || offered[0] != "area" {
		t.Errorf("stdout %q; offered %v; stderr:\n%s", r.stdout, offered, r.stderr)
	}
	for _, want := range []string{"── area", `{"w":3,"h":4.5}`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Count(r.stderr, "Run it?") != 2 {
		t.Errorf("asked %d times:\n%s", strings.Count(r.stderr, "Run it?"), r.stderr)
	}
}

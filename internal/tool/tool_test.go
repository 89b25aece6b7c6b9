package tool

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

func TestDefinitions(t *testing.T) {
	defs := Definitions(Options{TimeoutS: 60, MemoryMB: 1024})
	if len(defs) != 2 || defs[0].Name != Python || defs[1].Name != Shell {
		t.Fatalf("tools = %+v, want python and shell", defs)
	}
	for _, want := range []string{"/mnt/data", "plt.show()", "persist", "pandas", "60 s", "1024 MiB"} {
		if !strings.Contains(defs[0].Description, want) {
			t.Errorf("python description lacks %q", want)
		}
	}
	if _, ok := defs[0].InputSchema["properties"].(map[string]any)["session_id"]; ok {
		t.Error("session_id offered without Options.SessionID")
	}
	withID := Definitions(Options{SessionID: true})
	for _, d := range withID {
		props := d.InputSchema["properties"].(map[string]any)
		if _, ok := props["session_id"]; !ok {
			t.Errorf("%s: no session_id with Options.SessionID", d.Name)
		}
		if req := d.InputSchema["required"].([]string); len(req) != 1 || req[0] == "session_id" {
			t.Errorf("%s: required = %v", d.Name, req)
		}
	}
}

func TestFormat(t *testing.T) {
	defs := Definitions(Options{})
	tests := []struct {
		format string
		check  func(t *testing.T, v any)
	}{
		{FormatOpenAI, func(t *testing.T, v any) {
			var got []struct {
				Type     string `json:"type"`
				Function struct {
					Name       string         `json:"name"`
					Parameters map[string]any `json:"parameters"`
				} `json:"function"`
			}
			roundTrip(t, v, &got)
			if len(got) != 2 || got[0].Type != "function" || got[0].Function.Name != Python || got[0].Function.Parameters["type"] != "object" {
				t.Errorf("openai tools = %+v", got)
			}
		}},
		{FormatAnthropic, func(t *testing.T, v any) {
			var got []struct {
				Name        string         `json:"name"`
				Description string         `json:"description"`
				InputSchema map[string]any `json:"input_schema"`
			}
			roundTrip(t, v, &got)
			if len(got) != 2 || got[1].Name != Shell || got[1].Description == "" || got[1].InputSchema["type"] != "object" {
				t.Errorf("anthropic tools = %+v", got)
			}
		}},
		{FormatMCP, func(t *testing.T, v any) {
			var got struct {
				Tools []struct {
					Name        string         `json:"name"`
					InputSchema map[string]any `json:"inputSchema"`
				} `json:"tools"`
			}
			roundTrip(t, v, &got)
			if len(got.Tools) != 2 || got.Tools[0].InputSchema["type"] != "object" {
				t.Errorf("mcp tools = %+v", got)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			v, err := Format(defs, tt.format)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, v)
		})
	}
	if _, err := Format(defs, "gemini"); err == nil || !strings.Contains(err.Error(), "openai, anthropic or mcp") {
		t.Errorf("unknown format: err = %v", err)
	}
}

func roundTrip(t *testing.T, v, out any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name, args string
		want       Call
		wantErr    string
	}{
		{Python, `{"code":"print(1)"}`, Call{Name: Python, Code: "print(1)"}, ""},
		{Python, `{"code":"x","session_id":"s1"}`, Call{Name: Python, Code: "x", SessionID: "s1"}, ""},
		{Shell, `{"command":"ls -la"}`, Call{Name: Shell, Code: "ls -la"}, ""},
		{Python, `{"code":""}`, Call{}, `non-empty "code"`},
		{Python, ``, Call{}, `non-empty "code"`},
		{Python, `{"cmd":"x"}`, Call{}, "unknown field"},
		{Python, `print(1)`, Call{}, "JSON object"},
		{Python, `{"code":"a"} {"code":"b"}`, Call{}, "extra data"},
		{Shell, `{"command":["ls"]}`, Call{}, "JSON object"},
		{"rm", `{}`, Call{}, `no tool "rm"`},
	}
	for _, tt := range tests {
		got, err := Decode(tt.name, json.RawMessage(tt.args))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Decode(%s, %s) err = %v, want %q", tt.name, tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Decode(%s, %s) = %+v, %v; want %+v", tt.name, tt.args, got, err, tt.want)
		}
	}
}

// A session tool's call is decoded when the tool is offered; its arguments pass through as
// a compact JSON object, for the server to check against the schema.
func TestDecodeSessionTool(t *testing.T) {
	offered := SessionDefinitions([]api.SessionTool{
		{Name: "area", Description: "Area of a rectangle.", InputSchema: map[string]any{"type": "object"}, Source: "def area(w, h): ...", Saved: true},
		{Name: "fetch-rows", InputSchema: map[string]any{"type": "object"}},
	})
	if offered[0].Name != "area" || offered[0].Description != "Area of a rectangle." || offered[0].InputSchema["type"] != "object" {
		t.Fatalf("definition = %+v", offered[0])
	}
	tests := []struct {
		name, call, args string
		want             Call
		wantErr          string
	}{
		{"arguments pass through, compact", "area", "{\"w\": 2,\n \"h\": 3.5}", Call{Name: "area", Code: `{"w":2,"h":3.5}`}, ""},
		{"no arguments are {}", "fetch-rows", "", Call{Name: "fetch-rows", Code: `{}`}, ""},
		{"unknown parameters are the server's to refuse", "area", `{"w":"wide","depth":1}`, Call{Name: "area", Code: `{"w":"wide","depth":1}`}, ""},
		{"an array", "area", `[2, 3]`, Call{}, "the area tool's arguments must be a JSON object"},
		{"null", "area", `null`, Call{}, "must be a JSON object"},
		{"broken JSON", "area", `{"w": 2`, Call{}, "must be a JSON object"},
		{"two objects", "area", `{} {}`, Call{}, "must be a JSON object"},
		{"a tool not offered", "volume", `{}`, Call{}, `there is no tool "volume"; the tools are "python", "shell", "area", "fetch-rows"`},
		{"a long name is cut", strings.Repeat("x", 300), `{}`, Call{}, strings.Repeat("x", 64) + `..."`},
		{"python stays python", Python, `{"code":"1"}`, Call{Name: Python, Code: "1"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.call, json.RawMessage(tt.args), offered...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("= %+v, %v; want %+v", got, err, tt.want)
			}
			if got.IsSessionTool() != (tt.call != Python) {
				t.Errorf("IsSessionTool = %v", got.IsSessionTool())
			}
		})
	}
}

// TestAttackSessionToolNamedLikeBuiltin: a session's tool named like a built-in one (in
// any case; the session layer refuses such a tool, this is the doors' own defence) is
// never offered, and a call of that name is the built-in when that is offered, else no
// tool; never the session's.
func TestAttackSessionToolNamedLikeBuiltin(t *testing.T) {
	session := []api.SessionTool{{Name: "bash"}, {Name: "Bash"}, {Name: "PYTHON"}, {Name: "r"}, {Name: "Shell"}, {Name: "area"}}
	for _, d := range SessionDefinitions(session) {
		if d.Name != "area" {
			t.Errorf("a session tool named %q is offered", d.Name)
		}
	}
	for _, langs := range [][]string{nil, {api.LanguageBash, api.LanguageR}} {
		offered := append(Definitions(Options{Languages: langs}), SessionDefinitions(session)...)
		for _, name := range []string{"bash", "Bash", "PYTHON", "r", "Shell"} {
			t.Run(fmt.Sprintf("%s with languages %v", name, langs), func(t *testing.T) {
				c, err := Decode(name, json.RawMessage(`{"code":"echo hi"}`), offered...)
				builtinOffered := slices.Contains(langs, name)
				switch {
				case builtinOffered && (err != nil || c.IsSessionTool() || c.Code != "echo hi"):
					t.Errorf("the built-in %s: %+v, %v", name, c, err)
				case !builtinOffered && err == nil:
					t.Errorf("decoded as %+v (session tool: %v)", c, c.IsSessionTool())
				}
			})
		}
	}
}

// Every built-in tool, whatever languages are on, is a name the session layer refuses.
func TestBuiltinsReserved(t *testing.T) {
	for _, d := range Definitions(Options{Languages: []string{api.LanguageJavaScript, api.LanguageTypeScript, api.LanguageR, api.LanguageBash}}) {
		for _, name := range []string{d.Name, strings.ToUpper(d.Name), strings.ToUpper(d.Name[:1]) + d.Name[1:]} {
			if !Builtin(name) {
				t.Errorf("%s is not reserved", name)
			}
		}
	}
	if len(languageTools)+2 != len(guestproto.BuiltinTools) {
		t.Errorf("%d built-in tools reserved, %d made", len(guestproto.BuiltinTools), len(languageTools)+2)
	}
	if Builtin("area") || Builtin("bash2") {
		t.Error("a name of no built-in is reserved")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("python", `{"code":"1"}`)
	f.Add("shell", `{"command":"ls","session_id":"x"}`)
	f.Add("area", `{"w": 1, "h": [2, {"x": null}]}`)
	f.Add("area", ` {"w":"\u00e9"} `)
	f.Add("bash", `{"code":"ls"}`)
	offered := []Definition{{Name: "area"}}
	f.Fuzz(func(t *testing.T, name, args string) {
		c, err := Decode(name, json.RawMessage(args), offered...)
		if err != nil {
			return
		}
		switch c.Name {
		case Python, Shell:
			if strings.TrimSpace(c.Code) == "" {
				t.Fatalf("accepted %q %q as %+v", name, args, c)
			}
		case "area":
			var obj map[string]any
			if json.Unmarshal([]byte(c.Code), &obj) != nil || obj == nil || strings.ContainsAny(c.Code, "\n\t") {
				t.Fatalf("accepted %q %q as %+v: not a compact JSON object", name, args, c)
			}
		default:
			t.Fatalf("accepted %q %q as %+v: a tool not offered", name, args, c)
		}
	})
}

var png1x1 = base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nfake"))

func TestRenderExecute(t *testing.T) {
	res := &api.ExecuteResult{
		Status: api.StatusError,
		Outputs: []api.Output{
			{Type: api.OutputStream, Name: "stdout", Text: "rows: 8000\n"},
			{Type: api.OutputStream, Name: "stderr", Text: "warning: x\n"},
			{Type: api.OutputStream, Name: "stdout", Text: "done"},
			{Type: api.OutputDisplayData, Data: map[string]any{"image/png": png1x1, "text/plain": "<Figure size 640x480 with 1 Axes>"}},
			{Type: api.OutputDisplayData, Data: map[string]any{"image/svg+xml": "<svg/>", "text/plain": "<svg figure>"}},
			{Type: api.OutputExecuteResult, ExecutionCount: 3, Data: map[string]any{"text/html": "<table/>", "text/plain": "   a\n0  1"}},
			{Type: api.OutputError, EName: "ZeroDivisionError", EValue: "division by zero", Traceback: []string{"Traceback (most recent call last):", "ZeroDivisionError: division by zero"}},
		},
		Files: []api.FileChange{{Path: "/mnt/data/plot.png", Size: 20511, Change: api.ChangeCreated}, {Path: "/mnt/data/old.csv", Change: api.ChangeDeleted}},
	}
	got := RenderExecute(res, RenderLimits{})
	want := "rows: 8000\n[stderr]\nwarning: x\n[stdout]\ndone\n[image 1: image/png, attached]\n<svg figure>\nOut[3]:    a\n0  1\n" +
		"Traceback (most recent call last):\nZeroDivisionError: division by zero\n" +
		"Files changed:\n- /mnt/data/plot.png (created, 20.5 kB)\n- /mnt/data/old.csv (deleted)"
	if got.Text != want {
		t.Errorf("text:\n%s\nwant:\n%s", got.Text, want)
	}
	if !got.IsError || len(got.Images) != 1 || got.Images[0].MIME != "image/png" || got.Images[0].Data != png1x1 {
		t.Errorf("IsError %v images %+v", got.IsError, got.Images)
	}
}

func TestRenderExecuteStatuses(t *testing.T) {
	tests := []struct {
		res     api.ExecuteResult
		want    string
		isError bool
	}{
		{api.ExecuteResult{Status: api.StatusOK}, "(the code ran and printed nothing", false},
		{api.ExecuteResult{Status: api.StatusTimeout, Outputs: []api.Output{{Type: api.OutputStream, Name: "stdout", Text: "tick\n"}}, Message: "stopped after 60 s"},
			"tick\nStatus: timeout: stopped after 60 s", true},
		{api.ExecuteResult{Status: api.StatusOOM, Message: "out of memory (limit 1024 MiB); the kernel was restarted"}, "Status: oom: out of memory", true},
		{api.ExecuteResult{Status: api.StatusCrashed}, "Status: crashed: the execution did not finish", true},
		{api.ExecuteResult{Status: api.StatusOK, Truncated: true, Outputs: []api.Output{{Type: api.OutputStream, Name: "stdout", Text: "x"}}}, "x\n[the output was longer than the server keeps, and was cut]", false},
	}
	for _, tt := range tests {
		got := RenderExecute(&tt.res, RenderLimits{})
		if !strings.HasPrefix(got.Text, tt.want) || got.IsError != tt.isError {
			t.Errorf("%s: got %q (isError %v), want prefix %q (isError %v)", tt.res.Status, got.Text, got.IsError, tt.want, tt.isError)
		}
	}
}

func TestRenderTrimsTheMiddle(t *testing.T) {
	var lines []string
	for i := range 5000 {
		lines = append(lines, "line "+strings.Repeat("é", i%7)+string(rune('a'+i%26)))
	}
	long := strings.Join(lines, "\n") + "\n"
	res := &api.ExecuteResult{Status: api.StatusError, Outputs: []api.Output{
		{Type: api.OutputStream, Name: "stdout", Text: long},
		{Type: api.OutputError, EName: "KeyError", EValue: "'x'", Traceback: []string{"KeyError: 'x'"}},
	}}
	got := RenderExecute(res, RenderLimits{MaxText: 2000}).Text
	if len(got) > 2300 {
		t.Errorf("rendered %d bytes with MaxText 2000", len(got))
	}
	if !strings.HasPrefix(got, lines[0]+"\n") || !strings.Contains(got, lines[len(lines)-1]+"\n") {
		t.Errorf("head or tail lost:\n%s", got)
	}
	if !strings.Contains(got, "cut from the middle of the output") || !strings.HasSuffix(got, "KeyError: 'x'") {
		t.Errorf("no marker or no traceback:\n%s", got)
	}
	if !strings.Contains(got, "kB cut") {
		t.Errorf("the marker does not say how much was cut:\n%s", got)
	}
	if !utf8Valid(got) {
		t.Error("cut inside a UTF-8 sequence")
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestRenderImageLimits(t *testing.T) {
	big := base64.StdEncoding.EncodeToString(make([]byte, 100))
	var outs []api.Output
	for range 3 {
		outs = append(outs, api.Output{Type: api.OutputDisplayData, Data: map[string]any{"image/png": png1x1}})
	}
	outs = append(outs,
		api.Output{Type: api.OutputDisplayData, Data: map[string]any{"image/jpeg": big, "text/plain": "<big>"}},
		api.Output{Type: api.OutputDisplayData, Data: map[string]any{"image/png": "%%%not base64"}},
	)
	got := RenderExecute(&api.ExecuteResult{Status: api.StatusOK, Outputs: outs}, RenderLimits{MaxImages: 2, MaxImageBytes: 50})
	if len(got.Images) != 2 {
		t.Errorf("%d images, want 2", len(got.Images))
	}
	for _, want := range []string{"1 more image(s) left out: at most 2", "over the 50 B a model takes", "<big>", "not valid base64"} {
		if !strings.Contains(got.Text, want) {
			t.Errorf("text lacks %q:\n%s", want, got.Text)
		}
	}
}

func TestRenderCommand(t *testing.T) {
	got := RenderCommand(&api.CommandResult{Status: api.StatusError, ExitCode: 2, Stdout: "a\n", Stderr: "ls: cannot access 'x'\n",
		Files: []api.FileChange{{Path: "/mnt/data/out.txt", Size: 3, Change: api.ChangeModified}}}, RenderLimits{})
	want := "exit code 2\na\n[stderr]\nls: cannot access 'x'\nFiles changed:\n- /mnt/data/out.txt (modified, 3 B)"
	if got.Text != want || !got.IsError {
		t.Errorf("got %q (isError %v), want %q", got.Text, got.IsError, want)
	}
	got = RenderCommand(&api.CommandResult{Status: api.StatusTimeout, ExitCode: -1, Message: "killed after 60 s"}, RenderLimits{})
	if got.Text != "exit code -1\nStatus: timeout: killed after 60 s" {
		t.Errorf("timeout: %q", got.Text)
	}
}

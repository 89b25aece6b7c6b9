package main

// API keys as an operator meets them: cellbox serve refusing to listen beyond loopback
// without keys, serve with keys from the variable and a file, keygen, and run --server with
// CELLBOX_API_KEY. The built binary as a subprocess, on the local-unsafe backend (none of
// this is about isolation).

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/server"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testserver"
)

const (
	envKey  = "cbx_e0000000000000000000000000000000000000e"
	fileKey = "e2b_f00000000000000000000000000000000000000f"
)

// cellboxEnv runs the binary with env added to this process's environment, minus any
// CELLBOX_API_KEYS of it, and returns its exit code and combined output.
func cellboxEnv(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	bin := testbin.Cellbox(t) // the first call builds it: not on the command's clock
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(withoutKeys(), env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

func withoutKeys() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CELLBOX_API_KEY") {
			env = append(env, e)
		}
	}
	return env
}

// TestAttackServeRefusesOpenAddress: serve on an address beyond loopback without keys does
// not start, and says how to fix it; bad keys stop it too, without quoting a key.
func TestAttackServeRefusesOpenAddress(t *testing.T) {
	state := t.TempDir()
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:8080", "example.com:8080"} {
		t.Run("attack/no keys on "+addr, func(t *testing.T) {
			code, out := cellboxEnv(t, nil, "serve", "--addr", addr, "--state-dir", state, "--backend", "local-unsafe")
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s", code, out)
			}
			for _, want := range []string{"--addr " + addr + " can be reached from other machines", "CELLBOX_API_KEYS", "--api-keys FILE", "cellbox keygen", "--insecure-no-auth"} {
				if !strings.Contains(out, want) {
					t.Errorf("the refusal lacks %q:\n%s", want, out)
				}
			}
		})
	}
	// The python tool server takes no key at all (vLLM sends none): an open address for it
	// is refused even on a server with keys.
	t.Run("attack/python tool server on an open address", func(t *testing.T) {
		code, out := cellboxEnv(t, []string{"CELLBOX_API_KEYS=" + envKey}, "serve", "--addr", "127.0.0.1:0", "--python-tool-addr", "0.0.0.0:0",
			"--state-dir", state, "--backend", "local-unsafe")
		if code != 1 || !strings.Contains(out, "--python-tool-addr 0.0.0.0:0 can be reached from other machines") || !strings.Contains(out, "listen on 127.0.0.1") {
			t.Errorf("exit %d, want 1 with the refusal:\n%s", code, out)
		}
	})
	keys := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keys, []byte(fileKey+" alice\n"+fileKey+" bob\n"), 0o600)
	for name, tt := range map[string]struct {
		env  []string
		args []string
		want string
	}{
		"a short key":    {[]string{"CELLBOX_API_KEYS=" + envKey + ",hunter2"}, nil, "API keys: item 2 of CELLBOX_API_KEYS: a key has 16 to 256 characters"},
		"a key twice":    {nil, []string{"--api-keys", keys}, "API keys: line 2 of " + keys + ": the same key as line 1"},
		"a missing file": {[]string{"CELLBOX_API_KEYS=" + envKey}, []string{"--api-keys", filepath.Join(t.TempDir(), "missing")}, "API keys: read the keys file: open "},
	} {
		t.Run("attack/"+name, func(t *testing.T) {
			code, out := cellboxEnv(t, tt.env, append([]string{"serve", "--addr", "0.0.0.0:0", "--state-dir", state, "--backend", "local-unsafe"}, tt.args...)...)
			if code != 2 || !strings.Contains(out, tt.want) || strings.Contains(out, "hunter2") || strings.Contains(out, fileKey) {
				t.Errorf("exit %d, want 2 saying %q:\n%s", code, tt.want, out)
			}
		})
	}
}

// servedLog starts `cellbox serve` and returns its combined output once it contains want.
func servedLog(t *testing.T, env []string, want string, args ...string) string {
	t.Helper()
	testbin.NeedIPython(t)
	var out testbin.Buffer
	cmd := exec.Command(testbin.Cellbox(t), append([]string{"serve", "--state-dir", t.TempDir(), "--backend", "local-unsafe", "--pool-size", "0", "--preimport", ""}, args...)...)
	cmd.Env = append(withoutKeys(), env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	testbin.WaitFor(t, time.Minute, fmt.Sprintf("%q in the log", want), func() error {
		select {
		case <-exited:
			t.Fatalf("cellbox serve exited:\n%s", out.String())
		default:
		}
		if !strings.Contains(out.String(), want) {
			return fmt.Errorf("the log so far:\n%s", out.String())
		}
		return nil
	})
	return out.String()
}

// TestServeWithKeys: keys from CELLBOX_API_KEYS and from --api-keys work together, and the
// log says keys are required without showing one.
func TestServeWithKeys(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keys, []byte("# ops\n"+fileKey+" alice\n"), 0o600)
	addr := testbin.FreeAddr(t)
	log := servedLog(t, []string{"CELLBOX_API_KEYS=" + envKey}, "cellbox serving", "--addr", addr, "--api-keys", keys, "--log-level", "info")
	if !strings.Contains(log, "API keys required\" keys=2") || strings.Contains(log, envKey) || strings.Contains(log, fileKey) {
		t.Errorf("log:\n%s", log)
	}
	for hdr, want := range map[string]int{"": 401, "Authorization: Bearer " + envKey: 200, "X-API-Key: " + fileKey: 200, "X-API-Key: " + envKey[:20]: 401} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/sessions", nil)
		if name, value, ok := strings.Cut(hdr, ": "); ok {
			req.Header.Set(name, value)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%q: status %d, want %d", hdr, resp.StatusCode, want)
		}
	}
}

// TestServeInsecureNoAuth: --insecure-no-auth starts beyond loopback, warning loudly.
func TestServeInsecureNoAuth(t *testing.T) {
	log := servedLog(t, nil, "cellbox serving", "--addr", "0.0.0.0:0", "--insecure-no-auth")
	if !strings.Contains(log, "level=WARN msg=\"NO AUTHENTICATION (--insecure-no-auth)") {
		t.Errorf("no warning:\n%s", log)
	}
}

func TestKeygen(t *testing.T) {
	for args, shape := range map[string]string{"": `^cbx_[0-9a-f]{40}\n$`, "--e2b": `^e2b_[0-9a-f]{40}\n$`} {
		code, out := cellboxEnv(t, nil, strings.Fields("keygen "+args)...)
		if code != 0 || !regexp.MustCompile(shape).MatchString(out) {
			t.Errorf("keygen %s: exit %d, %q", args, code, out)
		}
		if _, err := auth.Load(strings.TrimSpace(out), ""); err != nil {
			t.Errorf("keygen %s: %v", args, err)
		}
	}
	if code, _ := cellboxEnv(t, nil, "keygen", "extra"); code != exitUsage {
		t.Errorf("keygen extra: exit %d", code)
	}
}

// TestRunServerWithKey: run --server sends CELLBOX_API_KEY; without it the server refuses.
func TestRunServerWithKey(t *testing.T) {
	testbin.NeedIPython(t)
	keys, err := auth.Load(envKey, "")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := localServer(t, keys)
	if code, out := cellboxEnv(t, []string{"CELLBOX_API_KEY=" + envKey}, "run", "--server", s.URL, "-c", "print(6*7)"); code != exitOK || out != "42\n" {
		t.Errorf("with the key: exit %d, %q", code, out)
	}
	if code, out := cellboxEnv(t, nil, "run", "--server", s.URL, "-c", "print(6*7)"); code != exitService || !strings.Contains(out, "unauthenticated") {
		t.Errorf("without a key: exit %d, %q", code, out)
	}
}

// localServer starts a server in this process on the local-unsafe backend (no pool, no
// pre-imports) with keys (nil: none), and returns it and its config; it shuts down when the
// test ends.
func localServer(t *testing.T, keys *auth.Keys) (*server.Server, config.Config) {
	t.Helper()
	cfg := config.Default()
	cfg.Addr = "127.0.0.1:0"
	cfg.Backend = "local-unsafe"
	cfg.StateDir = t.TempDir()
	cfg.PoolSize = 0
	cfg.Preimport = ""
	cfg.LogLevel = "warn"
	return testserver.Start(t, cfg, server.Options{Keys: keys, Quiet: true}), cfg
}

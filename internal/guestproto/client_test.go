package guestproto

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// fakeGuest serves one scripted answer per stream over a real yamux session: it plays a
// hostile or broken guest, which the real guest's tests cannot.
func fakeGuest(t *testing.T, answer func(req Request) []byte) *Client {
	t.Helper()
	return fakeGuestOf(t, Version, answer)
}

// fakeGuestOf is fakeGuest speaking protocol version v.
func fakeGuestOf(t *testing.T, v int, answer func(req Request) []byte) *Client {
	t.Helper()
	a, b := net.Pipe()
	srv, err := yamux.Server(b, YamuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			s, err := srv.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				defer s.Close()
				var req Request
				line, err := ReadLine(bufio.NewReader(s), MaxMessageSize)
				if err != nil {
					return
				}
				if json.Unmarshal(line, &req) != nil {
					return
				}
				if req.Op == OpHello {
					WriteJSON(s, Message{Hello: &Hello{Version: v}})
					return
				}
				s.Write(answer(req))
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c
}

func TestClientRefusesBadGuests(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		want   error
	}{
		{"unknown status", `{"result":{"status":"pwned"}}` + "\n", errdefs.ErrUnavailable},
		{"no final message", `{"output":{"type":"stream","name":"stdout","text":"x"}}` + "\n", ErrGuestGone},
		{"not json", "hello\n", errdefs.ErrUnavailable},
		{"error message classified", `{"error":{"code":"not_found","message":"no file x"}}` + "\n", errdefs.ErrNotFound},
		{"oversized line", strings.Repeat("x", MaxMessageSize+10), errdefs.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeGuest(t, func(Request) []byte { return []byte(tt.answer) })
			_, err := c.Execute(context.Background(), api.ExecuteRequest{Code: "1", TimeoutS: 5}, nil)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestCommandRunStream: a streaming command's outputs reach onOutput in order; an output
// that is not stdout or stderr text fails the call, and a guest that streams to a call
// that asked for no stream is refused.
func TestCommandRunStream(t *testing.T) {
	const result = `{"command_result":{"status":"ok","exit_code":0}}` + "\n"
	out := func(name, text string) string {
		return `{"output":{"type":"stream","name":"` + name + `","text":"` + text + `"}}` + "\n"
	}
	var streamed []bool
	c := fakeGuest(t, func(req Request) []byte {
		streamed = append(streamed, req.Stream)
		if req.Command.Cmd[0] == "bad" {
			return []byte(`{"output":{"type":"display_data","data":{"text/plain":"x"}}}` + "\n" + result)
		}
		return []byte(out("stdout", "a") + out("stderr", "b") + out("stdout", "c") + result)
	})
	ctx := context.Background()
	var got []string
	r, err := c.CommandRun(ctx, "run-1", "", api.CommandRequest{Cmd: []string{"x"}, TimeoutS: 5}, func(o api.Output) {
		got = append(got, o.Name+":"+o.Text)
	})
	if err != nil || r.Status != api.StatusOK || strings.Join(got, ",") != "stdout:a,stderr:b,stdout:c" {
		t.Fatalf("stream: %+v, %v, outputs %q", r, err, got)
	}
	if _, err := c.CommandRun(ctx, "run-2", "", api.CommandRequest{Cmd: []string{"bad"}, TimeoutS: 5}, func(api.Output) {}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a rich output in a command's stream: %v, want unavailable", err)
	}
	if _, err := c.Command(ctx, api.CommandRequest{Cmd: []string{"x"}, TimeoutS: 5}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("outputs for a command that streams nothing: %v, want unavailable", err)
	}
	if len(streamed) != 3 || !streamed[0] || !streamed[1] || streamed[2] {
		t.Errorf("requests asked for streams %v, want true, true, false", streamed)
	}
}

func TestClientCapsTotalBytes(t *testing.T) {
	out := `{"output":{"type":"stream","name":"stdout","text":"` + strings.Repeat("x", 1<<20) + `"}}` + "\n"
	c := fakeGuest(t, func(Request) []byte { return bytes.Repeat([]byte(out), 20) })
	c.MaxExecutionBytes = 4 << 20
	_, err := c.Execute(context.Background(), api.ExecuteRequest{Code: "1", TimeoutS: 5}, nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("err = %v, want the byte cap", err)
	}
}

func TestClientGivesUpOnSilentGuest(t *testing.T) {
	// A guest that never answers: the sleep is the silence under test.
	c := fakeGuest(t, func(Request) []byte { time.Sleep(time.Hour); return nil })
	c.Slack = 100 * time.Millisecond
	_, err := c.Execute(context.Background(), api.ExecuteRequest{Code: "1", TimeoutS: 0.1}, nil)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("err = %v, want unavailable", err)
	}
}

func TestGetFileShortBody(t *testing.T) {
	c := fakeGuest(t, func(Request) []byte { return []byte(`{"file":{"path":"/mnt/data/a","size":10}}` + "\nabc") })
	_, rc, err := c.GetFile(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short body: %v, want unexpected EOF", err)
	}
}

// FuzzClientMessages feeds arbitrary guest answers to every decoding path of the client:
// no panic, no hang, and any result it returns has a known status.
func FuzzClientMessages(f *testing.F) {
	f.Add([]byte(`{"result":{"status":"ok","execution_count":1}}` + "\n"))
	f.Add([]byte(`{"output":{"type":"stream","text":"a"}}` + "\n" + `{"result":{"status":"error"}}` + "\n"))
	f.Add([]byte(`{"file":{"size":3}}` + "\nabc"))
	f.Add([]byte(`{"listing":{"files":null}}` + "\n"))
	f.Add([]byte(`{"error":{"code":"invalid_argument","message":"x"}}` + "\n"))
	f.Add([]byte(`{"command_result":{"status":"ok","exit_code":0}}` + "\n"))
	f.Add([]byte(`{"entry":{"path":"/mnt/data/a","name":"a","type":"symlink","mode":511,"target":"b"}}` + "\n"))
	f.Add([]byte(`{"entry":{"type":"dir","mode":4096,"created":true}}` + "\n"))
	f.Fuzz(func(t *testing.T, answer []byte) {
		c := fakeGuest(t, func(Request) []byte { return answer })
		c.Slack = 200 * time.Millisecond
		ctx := context.Background()
		if r, err := c.Execute(ctx, api.ExecuteRequest{Code: "1", TimeoutS: 0.1}, func(api.Output) {}); err == nil && !validStatus(r.Status) {
			t.Fatalf("result with status %q", r.Status)
		}
		if r, err := c.Command(ctx, api.CommandRequest{Cmd: []string{"x"}, TimeoutS: 0.1}); err == nil && !validStatus(r.Status) {
			t.Fatalf("command result with status %q", r.Status)
		}
		if _, rc, err := c.GetFile(ctx, "a"); err == nil {
			io.Copy(io.Discard, rc)
			rc.Close()
		}
		c.ListFiles(ctx, "")
		for _, do := range []func() (*Entry, error){
			func() (*Entry, error) { return c.Stat(ctx, "a") },
			func() (*Entry, error) { return c.MakeDir(ctx, "a") },
			func() (*Entry, error) { return c.Move(ctx, "a", "b") },
		} {
			if e, err := do(); err == nil && (e.Size < 0 || e.Mode > 0o7777 || e.Type == "") {
				t.Fatalf("entry %+v", e)
			}
		}
		c.Remove(ctx, "a")
	})
}

func TestEntryChecked(t *testing.T) {
	var got []Request
	c := fakeGuest(t, func(req Request) []byte {
		got = append(got, req)
		switch req.Path {
		case "ok":
			return []byte(`{"entry":{"path":"/mnt/data/ok","name":"ok","type":"dir","mode":493,"created":true}}` + "\n")
		case "type":
			return []byte(`{"entry":{"path":"/mnt/data/x","type":"socket"}}` + "\n")
		case "mode":
			return []byte(`{"entry":{"path":"/mnt/data/x","type":"file","mode":16877}}` + "\n")
		}
		return []byte(`{"ok":true}` + "\n")
	})
	ctx := context.Background()
	if e, err := c.MakeDir(ctx, "ok"); err != nil || !e.Created || e.Mode != 0o755 || e.Type != "dir" {
		t.Errorf("make_dir: %+v, %v", e, err)
	}
	for _, p := range []string{"type", "mode", "none"} {
		if _, err := c.Stat(ctx, p); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("stat answered %q: %v, want unavailable", p, err)
		}
	}
	if _, err := c.Move(ctx, "ok", "to/there"); err != nil {
		t.Errorf("move: %v", err)
	}
	c.CommandRun(ctx, "r", "/tmp", api.CommandRequest{Cmd: []string{"x"}, TimeoutS: 1}, nil)
	if len(got) != 6 || got[4].Op != OpMove || got[4].To != "to/there" || got[5].Dir != "/tmp" {
		t.Errorf("requests: %+v", got)
	}
}

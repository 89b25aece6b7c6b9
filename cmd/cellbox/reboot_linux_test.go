package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testserver"
)

// TestServePauseReboot resumes paused sessions of `cellbox serve` after a reboot of the
// host, simulated: the server runs in a mount namespace of its own, so the workspaces it
// mounted are unmounted (and their loop devices freed) when it stops, and a paused session
// has no sandbox to lose. With loop images, each is checked and mounted again at the next
// start; one damaged meanwhile ends its session on resume, its files kept. With plain
// folders (--quota none) nothing is mounted.
func TestServePauseReboot(t *testing.T) {
	needRunc(t)
	testbin.NeedProgram(t, "criu", "criu (scripts/criu.sh builds it; make deps installs it)")
	for _, quota := range []string{"loop", "none"} {
		t.Run(quota, func(t *testing.T) { testServePauseReboot(t, quota) })
	}
}

func testServePauseReboot(t *testing.T, quota string) {
	state := t.TempDir()
	args := []string{"--end-sessions-on-exit=false", "--pool-size", "0", "--quota", quota}
	srv := testserver.ServeOwnMounts(t, state, args...)
	c := client.New(srv.URL)
	ctx := t.Context()
	out := func(id, code string) string {
		t.Helper()
		res, err := c.Execute(ctx, id, api.ExecuteRequest{Code: code})
		if err != nil || res.Status != api.StatusOK {
			t.Fatalf("execute %q in %s: %+v, %v", code, id, res, err)
		}
		var b strings.Builder
		for _, o := range res.Outputs {
			b.WriteString(o.Text)
		}
		return strings.TrimSpace(b.String())
	}
	names := []string{"kept", "torn"}
	if quota == "loop" {
		names = append(names, "damaged")
	}
	ids := map[string]string{}
	for _, name := range names {
		s, err := c.CreateSession(ctx, api.CreateSessionRequest{IdleAction: api.IdleActionPause})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = s.ID
		out(s.ID, fmt.Sprintf("x = 41; open('/mnt/data/%s.txt', 'w').write('%s')", name, name))
		if _, err := c.Pause(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
	}

	// "torn": its pause was cut short by the server's end, after the sandbox was written to
	// disk and before its record said so: the record is put back as it was before.
	tornRecord := filepath.Join(state, "sessions", ids["torn"]+".json")
	data, err := os.ReadFile(tornRecord)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil || rec["paused_at"] == nil {
		t.Fatalf("the paused session's record: %s, %v", data, err)
	}

	// One that runs on until the reboot, which takes its sandbox.
	running, err := c.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out(running.ID, "y = 1; open('/mnt/data/running.txt', 'w').write('running')")

	// The reboot: the server stops, its mount namespace and the mounts in it go, and so do
	// the sandboxes.
	srv.Cmd.Process.Signal(syscall.SIGTERM)
	<-srv.Exited
	delete(rec, "paused_at")
	delete(rec, "checkpoint_bytes")
	if data, err = json.Marshal(rec); err == nil {
		err = os.WriteFile(tornRecord, data, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("runc", "--root", filepath.Join(state, "runc", "runtime"), "delete", "-f", running.ID).CombinedOutput(); err != nil {
		t.Fatalf("runc delete -f %s: %v: %s", running.ID, err, b)
	}
	if quota == "loop" {
		workspaces, err := filepath.EvalSymlinks(filepath.Join(state, "workspaces"))
		if err != nil {
			t.Fatal(err)
		}
		testbin.WaitFor(t, 30*time.Second, "the workspaces' loop devices freed", func() error {
			files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
			for _, f := range files {
				if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), workspaces+"/") {
					return fmt.Errorf("%s backs %s", strings.TrimSpace(string(b)), f)
				}
			}
			return nil
		})
		// The primary superblock of one image zeroed, as a torn write might leave it.
		f, err := os.OpenFile(filepath.Join(workspaces, ids["damaged"]+".img"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, 1024), 1024); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}

	srv = testserver.ServeOwnMounts(t, state, args...)
	c = client.New(srv.URL)
	if s, err := c.GetSession(ctx, ids["kept"]); err != nil || s.State != api.StatePaused {
		t.Fatalf("after the reboot: %+v, %v; want paused", s, err)
	}
	if got := out(ids["kept"], "x += 1; print(x, open('kept.txt').read())"); got != "42 kept" {
		t.Errorf("resumed after the reboot: %q", got)
	}
	if got := out(ids["torn"], "print(x, open('torn.txt').read())"); got != "41 torn" {
		t.Errorf("the session whose pause was cut short: %q; want its variable and file", got)
	}
	// The running one has a new sandbox on its workspace: files kept, variables lost.
	// (Its first cell is told so first.)
	if got := out(running.ID, "print(open('running.txt').read(), 'y' in dir())"); !strings.HasSuffix(got, "was replaced: variables are lost, files in /mnt/data are kept]\nrunning False") {
		t.Errorf("the session that ran at the reboot: %q; want told it was replaced, its file, not its variable", got)
	}
	if quota == "loop" {
		id := ids["damaged"]
		_, err := c.Execute(ctx, id, api.ExecuteRequest{Code: "print(x)"})
		if !client.IsNotFound(err) || !strings.Contains(err.Error(), "could not be resumed") {
			t.Errorf("execute on a session whose workspace image is damaged: %v", err)
		}
		if mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", srv.Cmd.Process.Pid)); err != nil || strings.Contains(string(mi), id) {
			t.Errorf("the damaged image is mounted in the server's namespace (%v):\n%s", err, mi)
		}
		// Its files are kept: the image and the release's marker.
		for _, name := range []string{id + ".img", id + ".released"} {
			if _, err := os.Stat(filepath.Join(state, "workspaces", name)); err != nil {
				t.Errorf("the ended session's workspace: %v", err)
			}
		}
	}
	// Nothing runs on when the server stops.
	for _, id := range []string{ids["kept"], ids["torn"], running.ID} {
		if err := c.DeleteSession(ctx, id); err != nil {
			t.Error(err)
		}
	}
}

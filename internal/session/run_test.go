package session

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
)

// waitOutput runs code in session id and returns when the cell printed its first output,
// with a channel of the Execute's answer.
func startCell(t *testing.T, m *Manager, ctx context.Context, id, code string) <-chan *api.ExecuteResult {
	t.Helper()
	started := make(chan struct{})
	done := make(chan *api.ExecuteResult, 1)
	var once sync.Once
	go func() {
		r, err := m.Execute(ctx, id, api.ExecuteRequest{Code: code}, func(api.Output) { once.Do(func() { close(started) }) })
		if err != nil {
			t.Errorf("execute: %v", err)
		}
		done <- r
	}()
	select {
	case <-started:
	case r := <-done:
		t.Fatalf("the cell ended before its first output: %+v", r)
	}
	return done
}

// TestInterruptStopsCommand: POST /interrupt stops a command too, killing what it started.
func TestInterruptStopsCommand(t *testing.T) {
	m := newManager(t, nil)
	sleep := uniqueSleep()
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *api.CommandResult, 1)
	go func() {
		r, err := m.Command(ctx, s.ID, api.CommandRequest{Cmd: []string{"sh", "-c", "touch started; " + sleep + "; touch late"}})
		if err != nil {
			t.Errorf("command: %v", err)
		}
		done <- r
	}()
	sess, _ := m.lookup(context.Background(), s.ID)
	waitExists(t, m.current(sess).ws+"/started")
	if err := m.Interrupt(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r == nil || r.Status != api.StatusInterrupted {
		t.Fatalf("interrupted command: %+v", r)
	}
	ps, err := m.Command(ctx, s.ID, api.CommandRequest{Cmd: []string{"ps", "-eo", "args"}})
	if err != nil || strings.Contains(ps.Stdout, sleep) {
		t.Errorf("the command's process outlived the interrupt: %v\n%s", err, ps.Stdout)
	}
}

// TestCallerGoneEndsCommand: a command whose caller went away is killed, and the session's
// next call runs at once instead of waiting for it.
func TestCallerGoneEndsCommand(t *testing.T) {
	m := newManager(t, nil)
	sleep := uniqueSleep()
	s, err := m.Create(context.Background(), api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Command(ctx, s.ID, api.CommandRequest{Cmd: []string{"sh", "-c", "touch started; " + sleep}, TimeoutS: 120})
	}()
	sess, _ := m.lookup(context.Background(), s.ID)
	waitExists(t, m.current(sess).ws+"/started")
	cancel()
	<-done
	r, err := m.Command(context.Background(), s.ID, api.CommandRequest{Cmd: []string{"ps", "-eo", "args"}})
	if err != nil || strings.Contains(r.Stdout, sleep) {
		t.Errorf("the command outlived its caller: %v\n%s", err, r.Stdout)
	}
}

// uniqueSleep is a command line of sleep about a minute long that no other test writes:
// sessions on the local backend see every process of the host, other packages' tests too.
func uniqueSleep() string {
	return fmt.Sprintf("sleep 60.%09d", time.Now().Nanosecond())
}

// TestShutdownEndsOneShots: Shutdown interrupts one-shot executions too; they answer.
func TestShutdownEndsOneShots(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	started := make(chan struct{})
	done := make(chan *api.ExecuteResult, 1)
	var once sync.Once
	go func() {
		r, err := m.OneShot(ctx, api.OneShotRequest{Code: "import time\nprint('go', flush=True)\ntime.sleep(600)", TimeoutS: 600},
			func(api.Output) { once.Do(func() { close(started) }) })
		if err != nil {
			t.Errorf("one-shot: %v", err)
		}
		done <- r
	}()
	<-started
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := m.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r == nil || r.Status != api.StatusInterrupted {
		t.Errorf("a one-shot at shutdown: %+v, want interrupted", r)
	}
}

// TestReaperSparesRunningSession: the idle reaper leaves a session alone while something
// holds its turn, however long ago it was last active.
func TestReaperSparesRunningSession(t *testing.T) {
	m := newManager(t, nil)
	ctx := context.Background()
	s, err := m.Create(ctx, api.CreateSessionRequest{IdleTimeoutS: 1})
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := m.lookup(context.Background(), s.ID)
	done := startCell(t, m, ctx, s.ID, "import time\nprint('go', flush=True)\ntime.sleep(2)")
	sess.mu.Lock()
	sess.lastActive = time.Now().Add(-time.Hour) // as if the reaper had read it long ago
	sess.mu.Unlock()
	m.endIdle(ctx, time.Now())
	if _, err := m.Get(context.Background(), s.ID); err != nil {
		t.Fatalf("the reaper ended a session with a running cell: %v", err)
	}
	if r := <-done; r == nil || r.Status != api.StatusOK {
		t.Errorf("the running cell: %+v", r)
	}
	// Idle now, and past its timeout: the reaper ends it.
	sess.mu.Lock()
	sess.lastActive = time.Now().Add(-time.Hour)
	sess.mu.Unlock()
	m.endIdle(ctx, time.Now())
	if _, err := m.Get(context.Background(), s.ID); err == nil {
		t.Error("the reaper left an idle session")
	}
}

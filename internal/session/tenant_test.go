package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// TestAttackTenantIsolation: another tenant, and the keyless tenant "", get for every call
// on a tenant's session exactly the answer of a session that never existed, and do not see
// it listed; its owner still has it whole.
func TestAttackTenantIsolation(t *testing.T) {
	m := newManager(t, nil)
	alice := WithTenant(context.Background(), "alice")
	s, err := m.Create(alice, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutFile(alice, s.ID, "secret.txt", strings.NewReader("alice's")); err != nil {
		t.Fatal(err)
	}
	want := notFound(s.ID).Error()
	for name, ctx := range map[string]context.Context{"bob": WithTenant(context.Background(), "bob"), "keyless": context.Background()} {
		calls := map[string]func() error{
			"get": func() error { _, err := m.Get(ctx, s.ID); return err },
			"execute": func() error {
				_, err := m.Execute(ctx, s.ID, api.ExecuteRequest{Code: "open('pwned', 'w')"}, nil)
				return err
			},
			"command": func() error {
				_, err := m.Command(ctx, s.ID, api.CommandRequest{Cmd: []string{"touch", "pwned"}})
				return err
			},
			"interrupt": func() error { return m.Interrupt(ctx, s.ID) },
			"restart":   func() error { return m.Restart(ctx, s.ID) },
			"put file":  func() error { _, err := m.PutFile(ctx, s.ID, "pwned", strings.NewReader("x")); return err },
			"get file": func() error {
				_, r, err := m.GetFile(ctx, s.ID, "secret.txt")
				if err == nil {
					r.Close()
				}
				return err
			},
			"list files":  func() error { _, err := m.ListFiles(ctx, s.ID, "."); return err },
			"delete file": func() error { return m.DeleteFile(ctx, s.ID, "secret.txt") },
			"delete":      func() error { return m.Delete(ctx, s.ID) },
			"set lifetime": func() error {
				_, err := m.SetLifetime(ctx, s.ID, time.Second)
				return err
			},
			"set network": func() error {
				_, err := m.SetNetwork(ctx, s.ID, api.Network{Egress: api.EgressNone})
				return err
			},
			"egress log": func() error { _, err := m.Egress(ctx, s.ID); return err },
		}
		for call, f := range calls {
			t.Run("attack/"+name+"/"+call, func(t *testing.T) {
				if err := f(); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != want {
					t.Errorf("%v; want %q", err, want)
				}
			})
		}
		t.Run("attack/"+name+"/list", func(t *testing.T) {
			if l := m.List(ctx); len(l) != 0 {
				t.Errorf("lists %+v", l)
			}
		})
	}
	r, err := m.Execute(alice, s.ID, api.ExecuteRequest{Code: "import os; print(open('secret.txt').read(), os.listdir('.'))"}, nil)
	if err != nil || r.Status != api.StatusOK || r.Outputs[0].Text != "alice's ['secret.txt']\n" {
		t.Fatalf("the owner's session after the attacks: %v %+v", err, r)
	}
	if l := m.List(alice); len(l) != 1 || l[0].ID != s.ID || l[0].ExpiresAt != nil {
		t.Errorf("the owner's list: %+v", l)
	}
}

// TestAttackTenantSessionCap: past --tenant-max-sessions a tenant's new sessions and
// one-shots are refused, and the other tenants are not held back.
func TestAttackTenantSessionCap(t *testing.T) {
	m := newManager(t, func(c *config.Config) { c.TenantMaxSessions = 2 })
	alice, bob := WithTenant(context.Background(), "alice"), WithTenant(context.Background(), "bob")
	var ids []string
	for range 2 {
		s, err := m.Create(alice, api.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	if _, err := m.Create(alice, api.CreateSessionRequest{}); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "--tenant-max-sessions") {
		t.Errorf("a third session: %v, want resource exhausted naming the cap", err)
	}
	if _, err := m.OneShot(alice, api.OneShotRequest{Code: "1"}, nil); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a one-shot past the cap: %v, want resource exhausted", err)
	}
	if _, err := m.Create(bob, api.CreateSessionRequest{}); err != nil {
		t.Errorf("another tenant: %v", err)
	}
	if err := m.Delete(alice, ids[0]); err != nil {
		t.Fatal(err)
	}
	if r, err := m.OneShot(alice, api.OneShotRequest{Code: "1"}, nil); err != nil || r.Status != api.StatusOK {
		t.Errorf("a one-shot under the cap: %v %+v", err, r)
	}
}

// TestAttackTenantExecutionCap: past --tenant-max-executions a tenant's executions and
// commands are refused, in any of its sessions; other tenants run.
func TestAttackTenantExecutionCap(t *testing.T) {
	m := newManager(t, func(c *config.Config) { c.TenantMaxExecutions = 1 })
	alice, bob := WithTenant(context.Background(), "alice"), WithTenant(context.Background(), "bob")
	create := func(ctx context.Context) string {
		s, err := m.Create(ctx, api.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	a1, a2, b1 := create(alice), create(alice), create(bob)
	started := make(chan struct{}, 1)
	done := make(chan *api.ExecuteResult, 1)
	go func() {
		r, _ := m.Execute(alice, a1, api.ExecuteRequest{Code: "print('started', flush=True); import time; time.sleep(60)"}, func(api.Output) {
			select {
			case started <- struct{}{}:
			default:
			}
		})
		done <- r
	}()
	<-started
	refused := map[string]func() error{
		"execute in another session": func() error {
			_, err := m.Execute(alice, a2, api.ExecuteRequest{Code: "1"}, nil)
			return err
		},
		"queued in the same session": func() error {
			_, err := m.Execute(alice, a1, api.ExecuteRequest{Code: "1"}, nil)
			return err
		},
		"command": func() error {
			_, err := m.Command(alice, a2, api.CommandRequest{Cmd: []string{"true"}})
			return err
		},
		"one-shot": func() error { _, err := m.OneShot(alice, api.OneShotRequest{Code: "1"}, nil); return err },
	}
	for name, f := range refused {
		if err := f(); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "--tenant-max-executions") {
			t.Errorf("%s: %v, want resource exhausted naming the cap", name, err)
		}
	}
	if r, err := m.Command(bob, b1, api.CommandRequest{Cmd: []string{"true"}}); err != nil || r.ExitCode != 0 {
		t.Errorf("another tenant's command: %v %+v", err, r)
	}
	if err := m.Interrupt(alice, a1); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r == nil || r.Status != api.StatusInterrupted {
		t.Fatalf("the running cell: %+v", r)
	}
	if r, err := m.Command(alice, a2, api.CommandRequest{Cmd: []string{"true"}}); err != nil || r.ExitCode != 0 {
		t.Errorf("a command after the cell ended: %v %+v", err, r)
	}
}

func TestTenantContext(t *testing.T) {
	ctx := context.Background()
	if Tenant(ctx) != "" || Tenant(WithTenant(ctx, "a")) != "a" || Tenant(WithTenant(WithTenant(ctx, "a"), "")) != "" {
		t.Error("WithTenant and Tenant disagree")
	}
}

// TestOwner: Owner names the tenant of a live session, and of no other.
func TestOwner(t *testing.T) {
	m := newManager(t, nil)
	alice := WithTenant(context.Background(), "alice")
	a, err := m.Create(alice, api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	keyless, err := m.Create(context.Background(), api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if tenant, ok := m.Owner(a.ID); !ok || tenant != "alice" {
		t.Errorf("Owner of alice's session: %q, %v", tenant, ok)
	}
	if tenant, ok := m.Owner(keyless.ID); !ok || tenant != "" {
		t.Errorf("Owner of a keyless session: %q, %v", tenant, ok)
	}
	if err := m.Delete(alice, a.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.ID, "nope", ""} {
		if tenant, ok := m.Owner(id); ok {
			t.Errorf("Owner(%q) = %q, true; want no session", id, tenant)
		}
	}
}

// TestAttackTenantExecutionCapCountsRestartAndContextDelete: a restart and a context
// delete run in the sandbox like an execution, so --tenant-max-executions counts them: at
// the cap they are refused as an execution would be, in the session that runs and in
// another, and a refused restart leaves the running cell alone.
func TestAttackTenantExecutionCapCountsRestartAndContextDelete(t *testing.T) {
	m := newManager(t, func(c *config.Config) { c.TenantMaxExecutions = 1 })
	alice := WithTenant(context.Background(), "alice")
	var ids []string
	for range 2 {
		s, err := m.Create(alice, api.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	a1, a2 := ids[0], ids[1]
	done := startCell(t, m, alice, a1, "print('started', flush=True); import time; time.sleep(60)")
	refused := map[string]func() error{
		"restart of the running session":        func() error { return m.Restart(alice, a1) },
		"restart of another session":            func() error { return m.Restart(alice, a2) },
		"context delete in the running session": func() error { return m.DeleteContext(alice, a1, "scratch") },
		"context delete in another session":     func() error { return m.DeleteContext(alice, a2, "scratch") },
	}
	for name, f := range refused {
		if err := f(); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "--tenant-max-executions") {
			t.Errorf("%s: %v, want resource exhausted naming the cap", name, err)
		}
	}
	select {
	case r := <-done:
		t.Fatalf("a refused restart ended the running cell: %+v", r)
	default:
	}
	if err := m.Interrupt(alice, a1); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r == nil || r.Status != api.StatusInterrupted {
		t.Fatalf("the running cell: %+v", r)
	}
	if err := m.Restart(alice, a2); err != nil {
		t.Errorf("a restart under the cap: %v", err)
	}
	if err := m.DeleteContext(alice, a2, "scratch"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a context delete under the cap: %v, want not found (no such context)", err)
	}
}

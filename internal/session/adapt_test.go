package session

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/testbin"
)

// updatable wraps a backend: its sandboxes take new limits (sandbox.Updater), and it keeps
// the ids it created and the limits each was given.
type updatable struct {
	sandbox.Backend
	mu      sync.Mutex
	created []string
	updates map[string][]sandbox.Limits
}

type updatableSandbox struct {
	sandbox.Sandbox
	b *updatable
}

func (u *updatable) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := u.Backend.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	u.created = append(u.created, spec.ID)
	u.mu.Unlock()
	return &updatableSandbox{sb, u}, nil
}

func (s *updatableSandbox) Update(ctx context.Context, l sandbox.Limits) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.updates[s.ID()] = append(s.b.updates[s.ID()], l)
	return nil
}

func (u *updatable) createdSoFar() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.created)
}

// A warm sandbox takes a request's limits and env: the session gets a sandbox started
// before it asked, whose limits were updated, and whose kernel has the env (in place, or in
// a new kernel for a variable read at start). Another disk quota starts a new sandbox.
func TestPoolTakesLimitsAndEnv(t *testing.T) {
	b := &updatable{Backend: localBackend(t), updates: map[string][]sandbox.Limits{}}
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.Preimport = ""
	cfg.PoolSize, cfg.PoolMax = 1, 0
	m := startManager(t, cfg, b, t.TempDir(), nil)
	ctx := context.Background()
	waitWarm := func() []string {
		t.Helper()
		if !testbin.Eventually(time.Minute, func() bool { return m.pools[poolKey{}].len() >= 1 }) {
			t.Fatal("the pool did not fill")
		}
		return b.createdSoFar()
	}
	run := func(id, code string) string {
		t.Helper()
		r, err := m.Execute(ctx, id, api.ExecuteRequest{Code: code}, nil)
		if err != nil || r.Status != api.StatusOK {
			t.Fatalf("execute: %+v %v", r, err)
		}
		var out strings.Builder
		for _, o := range r.Outputs {
			out.WriteString(o.Text)
		}
		return out.String()
	}

	warm := waitWarm()
	limits := api.Limits{MemoryMB: 512, CPUs: 0.5, Pids: 100}
	s, err := m.Create(ctx, api.CreateSessionRequest{Limits: &limits, Env: map[string]string{"TOKEN_A": "one"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(warm, s.ID) {
		t.Fatalf("a session with limits and env got a new sandbox %s, not a warm one of %v", s.ID, warm)
	}
	b.mu.Lock()
	got := b.updates[s.ID]
	b.mu.Unlock()
	if want := (sandbox.Limits{MemoryMB: 512, CPUs: 0.5, Pids: 100, TmpMB: cfg.TmpMB}); len(got) != 1 || got[0] != want {
		t.Errorf("the warm sandbox's limits were updated to %+v, want %+v", got, want)
	}
	if s.Limits.MemoryMB != 512 || s.Limits.Pids != 100 {
		t.Errorf("the session reports limits %+v", s.Limits)
	}
	if out := run(s.ID, "import os\nprint(os.environ.get('TOKEN_A'), os.environ.get('OPENBLAS_NUM_THREADS'))"); out != "one 1\n" {
		t.Errorf("the kernel's env: %q", out)
	}
	if out := run(s.ID, "import subprocess\nprint(subprocess.run(['sh', '-c', 'echo $TOKEN_A'], capture_output=True, text=True).stdout.strip())"); out != "one\n" {
		t.Errorf("a program the kernel starts sees %q", out)
	}
	m.Delete(ctx, s.ID)

	// A variable Python reads at start: the warm sandbox still, with a new kernel.
	warm = waitWarm()
	s, err = m.Create(ctx, api.CreateSessionRequest{Env: map[string]string{"PYTHONHASHSEED": "7"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(warm, s.ID) {
		t.Errorf("a session with PYTHONHASHSEED got a new sandbox")
	}
	same := "import subprocess, sys\n" +
		"p = subprocess.run([sys.executable, '-c', 'print(hash(\"cellbox\"))'], env={'PYTHONHASHSEED': '7'}, capture_output=True, text=True)\n" +
		"print(int(p.stdout) == hash('cellbox'))"
	if out := run(s.ID, same); out != "True\n" {
		t.Errorf("the kernel does not hash as one started with PYTHONHASHSEED=7: %q", out)
	}
	if out := run(s.ID, "import os\nprint(os.environ['PYTHONHASHSEED'])"); out != "7\n" {
		t.Errorf("PYTHONHASHSEED in the kernel: %q", out)
	}
	m.Delete(ctx, s.ID)

	// Another disk quota: a new sandbox.
	warm = waitWarm()
	s, err = m.Create(ctx, api.CreateSessionRequest{Limits: &api.Limits{DiskMB: cfg.DiskMB / 2}})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(warm, s.ID) {
		t.Errorf("a session with another disk quota took a warm sandbox")
	}
}

package runc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/sandboxtest"
	"github.com/cellbox/cellbox/internal/testbin"
)

// TestGuestSeccomp: under runc the spec has no seccomp filter and the guest installs the
// backend's program on itself, on every thread, before it listens; what it starts and the
// kernel inherit or have it (the conformance suite's isolation checks what user code can
// do). A program the guest cannot install stops the sandbox's start.
func TestGuestSeccomp(t *testing.T) {
	needRuntime(t, "runc")
	b := newBackend(t, "runc", testbin.Cellbox(t))
	if b.seccomp == nil {
		t.Fatal("the backend has no seccomp program for the guest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Create(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: sandboxtest.Workspace(t)})
	if err != nil {
		t.Fatal(err)
	}
	s := sb.(*Sandbox)
	defer s.Stop(context.Background())
	spec, err := s.readSpec()
	if err != nil {
		t.Fatal(err)
	}
	if spec.Linux.Seccomp != nil {
		t.Error("the spec has a seccomp filter: the runtime compiles it in every start")
	}
	checkGuestFiltered(t, s)

	// A program the kernel refuses: the guest exits rather than run unfiltered.
	b.seccomp = []byte{1, 2, 3, 4, 5, 6, 7, 8}
	_, err = b.Create(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: sandboxtest.Workspace(t)})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "--seccomp") {
		t.Errorf("create with a bad seccomp program: %v, want the guest's exit", err)
	}
}

// checkGuestFiltered checks that every thread of s's guest is under one seccomp filter.
func checkGuestFiltered(t *testing.T, s *Sandbox) {
	t.Helper()
	pid, err := s.readPid()
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
	if err != nil || len(tasks) < 2 {
		t.Fatalf("the guest's threads: %v %v", tasks, err)
	}
	for _, f := range tasks {
		status, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(status), "\nSeccomp:\t2\n") || !strings.Contains(string(status), "\nSeccomp_filters:\t1\n") {
			t.Errorf("%s: the guest's thread is not under one seccomp filter:\n%s", f, status)
		}
	}
}

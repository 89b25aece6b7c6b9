package runc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChoosePlatform: auto takes kvm only where /dev/kvm opens and a sandbox runs on it,
// within a bound; else systrap, saying why. A platform asked for is taken as is. The
// runtimes here are scripts standing in for runsc's probe (the real runsc runs on the
// chosen platform in the conformance suite).
func TestChoosePlatform(t *testing.T) {
	defer func(d string, p time.Duration) { kvmDevice, kvmProbeTimeout = d, p }(kvmDevice, kvmProbeTimeout)
	kvmProbeTimeout = 500 * time.Millisecond
	dir := t.TempDir()
	runtime := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755)
		return p
	}
	ctx := context.Background()
	if p, _ := choosePlatform(ctx, "runsc", PlatformPtrace); p != PlatformPtrace {
		t.Errorf("asked for ptrace, got %s", p)
	}
	kvmDevice = filepath.Join(dir, "no-kvm")
	if p, why := choosePlatform(ctx, runtime("never-asked", "exit 1"), ""); p != PlatformSystrap || !strings.Contains(why, "no usable /dev/kvm") {
		t.Errorf("without /dev/kvm: %s (%s)", p, why)
	}
	kvmDevice = os.DevNull // opens
	for _, c := range []struct {
		name, body, platform, why string
	}{
		{"works", `case "$*" in *"--platform kvm --network=none do /bin/true"*) exit 0;; esac; exit 1`, PlatformKVM, "works"},
		{"fails", "echo 'creating container: cannot create sandbox: kvm says no' >&2; exit 128", PlatformSystrap, "kvm says no"},
		{"hangs", "exec sleep 60", PlatformSystrap, "no answer within 500ms"},
	} {
		p, why := choosePlatform(ctx, runtime(c.name, c.body), PlatformAuto)
		if p != c.platform || !strings.Contains(why, c.why) {
			t.Errorf("%s: %s (%s), want %s (%s)", c.name, p, why, c.platform, c.why)
		}
	}
	for _, bad := range []string{"KVM", "fast", " systrap"} {
		if CheckPlatform(bad) == nil {
			t.Errorf("platform %q accepted", bad)
		}
	}
}

// TestRunscVersionCurrent: the versions runsc prints, current or not.
func TestRunscVersionCurrent(t *testing.T) {
	for v, want := range map[string]bool{
		"runsc version 20260905035102-160fafc42237": true,
		"runsc version release-20250505.0":          true,
		"runsc version 0.0~20221219.0":              false,
		"runsc version VERSION_MISSING":             false,
		"":                                          false,
	} {
		if got := runscVersionCurrent(v); got != want {
			t.Errorf("%q: current %v, want %v", v, got, want)
		}
	}
}

package runc

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/sandboxtest"
	"github.com/cellbox/cellbox/internal/testbin"
)

// BenchmarkCreateHello measures a new sandbox until its guest has answered hello (no
// kernel yet), and reports the median as well.
func BenchmarkCreateHello(b *testing.B) {
	for _, rt := range []string{"runc", "runsc"} {
		b.Run(rt, func(b *testing.B) { benchCreateHello(b, rt) })
	}
}

func benchCreateHello(b *testing.B, runtime string) {
	needRuntime(b, runtime)
	be, err := New(Config{Runtime: runtime, StateDir: b.TempDir(), GuestBinary: testbin.Cellbox(b)})
	if err != nil {
		b.Fatal(err)
	}
	ws := sandboxtest.Workspace(b)
	ctx := context.Background()
	var times []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		sb, err := be.Create(ctx, sandbox.Spec{ID: sandboxtest.ID(), Workspace: ws, Limits: sandbox.Limits{MemoryMB: 512, Pids: 128, CPUs: 1}})
		if err != nil {
			b.Fatal(err)
		}
		c, err := guestproto.Dial(ctx, sb.Conn())
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
		b.StopTimer()
		c.Close()
		sb.Stop(ctx)
		b.StartTimer()
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
}

package guest

import (
	"context"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
)

// BenchmarkExecuteTrivial is the headline figure: a trivial cell's round trip through the
// protocol client, the guest and the IPython runner.
func BenchmarkExecuteTrivial(b *testing.B) {
	g := startKernelGuest(b, testConfig())
	ctx := context.Background()
	req := api.ExecuteRequest{Code: "x = 1", TimeoutS: 10}
	g.Execute(ctx, req, nil)
	b.ResetTimer()
	for b.Loop() {
		r, err := g.Execute(ctx, req, nil)
		if err != nil || r.Status != api.StatusOK {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkExecutePrint adds one stream output.
func BenchmarkExecutePrint(b *testing.B) {
	g := startKernelGuest(b, testConfig())
	ctx := context.Background()
	req := api.ExecuteRequest{Code: "print(1)", TimeoutS: 10}
	for b.Loop() {
		r, err := g.Execute(ctx, req, nil)
		if err != nil || len(r.Outputs) != 1 {
			b.Fatal(r, err)
		}
	}
}

func BenchmarkCommandTrue(b *testing.B) {
	g := startGuest(b, Options{})
	ctx := context.Background()
	for b.Loop() {
		r, err := g.Command(ctx, api.CommandRequest{Cmd: []string{"true"}, TimeoutS: 10})
		if err != nil || r.Status != api.StatusOK {
			b.Fatal(r, err)
		}
	}
}

func BenchmarkListFiles(b *testing.B) {
	g := startGuest(b, Options{})
	ctx := context.Background()
	for b.Loop() {
		if _, err := g.ListFiles(ctx, ""); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPut(b *testing.B) {
	g := startGuest(b, Options{})
	ctx := context.Background()
	for b.Loop() {
		if _, err := g.PutFile(ctx, "f.txt", strings.NewReader("hello")); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	g := startGuest(b, Options{})
	ctx := context.Background()
	g.PutFile(ctx, "f.txt", strings.NewReader("hello"))
	for b.Loop() {
		_, rc, err := g.GetFile(ctx, "f.txt")
		if err != nil {
			b.Fatal(err)
		}
		readAll(b, rc)
	}
}

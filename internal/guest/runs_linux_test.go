package guest

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
)

// TestInterruptBeforeRun: an interrupt that overtakes its run is kept, and the run, when it
// arrives, does not start at all.
func TestInterruptBeforeRun(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	ctx := context.Background()
	g.exec(t, "x = 1", 0)
	if err := g.InterruptRun(ctx, "early-cell"); err != nil {
		t.Fatal(err)
	}
	r, err := g.ExecuteRun(ctx, "early-cell", api.ExecuteRequest{Code: "open('ran', 'w').write('x')\nx = 2", TimeoutS: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != api.StatusInterrupted || !strings.Contains(r.Message, "before it started") || r.ExecutionCount != 1 {
		t.Errorf("a cell interrupted before it arrived: %+v", r)
	}
	if got := text(g.exec(t, "import os\nprint(x, os.path.exists('ran'), end='')", 0), "stdout"); got != "1 False" {
		t.Errorf("the interrupted cell ran: %q", got)
	}
	// Another run's interrupt does not touch this one.
	g.InterruptRun(ctx, "someone-else")
	if r, err := g.ExecuteRun(ctx, "mine", api.ExecuteRequest{Code: "print('ok', end='')", TimeoutS: 10}, nil); err != nil || r.Status != api.StatusOK {
		t.Errorf("an unrelated interrupt stopped a cell: %+v, %v", r, err)
	}
}

// TestRunEndsWithCaller: cancelling a cell's or a command's context (the caller went away)
// stops it, and the answer says so.
func TestRunEndsWithCaller(t *testing.T) {
	needIPython(t)
	t.Parallel()
	g := startKernelGuest(t, testConfig())
	t.Run("cell", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var once sync.Once
		r, err := g.Execute(ctx, api.ExecuteRequest{Code: "import time\nprint('go', flush=True)\ntime.sleep(60)", TimeoutS: 60},
			func(api.Output) { once.Do(cancel) })
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != api.StatusInterrupted {
			t.Errorf("a cell whose caller left: %+v", r)
		}
	})
	t.Run("command", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type answer struct {
			r   *api.CommandResult
			err error
		}
		done := make(chan answer, 1)
		go func() {
			r, err := g.Command(ctx, api.CommandRequest{Cmd: []string{"sh", "-c", "touch started; sleep 60.0481 & sleep 61.0481; touch late"}, TimeoutS: 60})
			done <- answer{r, err}
		}()
		// Wait for the command's own sign of life, then leave.
		for !fileExists(g.dir + "/started") {
			select {
			case a := <-done:
				t.Fatalf("the command ended early: %+v %v", a.r, a.err)
			case <-time.After(10 * time.Millisecond):
			}
		}
		cancel()
		a := <-done
		if a.err != nil || a.r.Status != api.StatusInterrupted {
			t.Fatalf("a command whose caller left: %+v, %v", a.r, a.err)
		}
		ps, err := g.Command(context.Background(), api.CommandRequest{Cmd: []string{"ps", "-eo", "args"}, TimeoutS: 10})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(ps.Stdout, ".0481") { // a process of this test's, not another's: they share the host's
			t.Errorf("the command's processes outlived it:\n%s", ps.Stdout)
		}
	})
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

package guest

import (
	"context"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// A cell run with a trace reports every hop of the guest and the runner, nested; one run
// without asks for nothing and gets nothing but the client's own Call.
func TestExecuteTrace(t *testing.T) {
	g := startKernelGuest(t, testConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, code := range []string{"x = 1", "print(x)\nx"} {
		var tr guestproto.Trace
		r, err := g.ExecuteWith(ctx, api.ExecuteRequest{Code: code, TimeoutS: 30}, guestproto.ExecuteOptions{Trace: &tr})
		if err != nil || r.Status != api.StatusOK {
			t.Fatal(r, err)
		}
		if tr.RunCell <= 0 || tr.Runner < tr.RunCell || tr.Kernel < tr.Runner || tr.Files <= 0 ||
			tr.Guest < tr.Kernel+tr.Files || tr.Call < tr.Guest {
			t.Errorf("%q: trace %+v: want every span measured and each within the one that holds it", code, tr)
		}
	}
}

package e2e_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/testbin"
	"github.com/cellbox/cellbox/internal/testhost"
)

// BenchmarkEgress measures the gateway against the host itself, with the same client (curl,
// pip) on both sides and the same server on a test host: a 100 MB download (throughput),
// the same over a link shaped to 1 Gbit/s, the time to the first byte of a small HTTPS request (tunnelled, and intercepted to add a
// secret, which the sandbox's bundle of the system's roots and the session's authority
// verifies), and pip installing a wheel from an index. Each figure is reported as a metric
// of its own; the ratios are the direct figure over the gateway's (or the reverse for
// throughput). Run with -benchtime=5x:
//
//	go test -run '^$' -bench Egress -benchtime=5x ./internal/egress/e2e/
func BenchmarkEgress(b *testing.B) {
	testbin.NeedProgram(b, "curl", "curl")
	h := testhost.New(b)
	const size = 100 << 20
	h.DNS.Set("blob.egress.test", h.Addr(0))
	h.DNS.Set(apiName, h.Addr(1))
	h.DNS.Set("tunnel.egress.test", h.Addr(1))
	h.DNS.Set(pypiName, h.Addr(2))
	h.ServeHTTP(b, netip.AddrPortFrom(h.Addr(0), 80), testhost.Blob(size))
	h.ServeTLS(b, netip.AddrPortFrom(h.Addr(1), 443), []string{apiName, "tunnel.egress.test"}, authorized(apiSecret))
	h.ServeHTTP(b, netip.AddrPortFrom(h.Addr(2), 80), testhost.PyPI(testhost.Wheel{
		Name: "cellbox-probe", Version: "1.0", Module: "cellbox_probe.py", Source: "VALUE = 1\n"}))
	e := newEnv(b, h)
	id := e.session(b, &api.Network{Egress: api.EgressPublic,
		Secrets: []api.EgressSecret{{Domain: apiName, Headers: map[string]string{"Authorization": apiSecret}}}})
	// Every curl loads a bundle of the same size (the system's roots and one more), as
	// loading one costs a TLS client more than the handshake itself.
	bundle, err := os.ReadFile(h.BundleFile())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.c.UploadFile(ctxT(b, 10*time.Second), id, "bundle.pem", bytes.NewReader(bundle)); err != nil {
		b.Fatal(err)
	}
	root := h.BundleFile()
	// Direct: the host's curl, with the test DNS's answers given as --resolve.
	resolve := func(name string, a netip.Addr, port int) string {
		return fmt.Sprintf("--resolve %s:%d:%s", name, port, a)
	}
	host := func(b *testing.B, args string) float64 {
		out, err := exec.Command("sh", "-c", "curl -sS -o /dev/null "+args).Output()
		if err != nil {
			b.Fatalf("curl %s: %v", args, err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			b.Fatalf("curl %s: %q", args, out)
		}
		return v
	}
	sandbox := func(b *testing.B, args string) float64 {
		r := e.sh(b, id, "curl -sS -o /dev/null "+args)
		v, err := strconv.ParseFloat(strings.TrimSpace(r.Stdout), 64)
		if err != nil || r.ExitCode != 0 {
			b.Fatalf("curl %s in the sandbox: %+v", args, r)
		}
		return v
	}
	// each runs f b.N times and reports the mean of what it returns as unit.
	each := func(b *testing.B, unit string, f func(b *testing.B) float64) float64 {
		var sum float64
		for b.Loop() {
			sum += f(b)
		}
		mean := sum / float64(b.N)
		b.ReportMetric(mean, unit)
		return mean
	}
	speed := "-w '%{speed_download}'"
	ttfb := "-w '%{time_starttransfer}'"
	b.Run("download_100MB/host", func(b *testing.B) {
		each(b, "MB/s", func(b *testing.B) float64 {
			return host(b, speed+" "+resolve("blob.egress.test", h.Addr(0), 80)+" http://blob.egress.test/") / 1e6
		})
	})
	b.Run("download_100MB/gateway", func(b *testing.B) {
		each(b, "MB/s", func(b *testing.B) float64 { return sandbox(b, speed+" http://blob.egress.test/") / 1e6 })
	})
	// The same over a link of 1 Gbit/s, a server's uplink.
	h.Shape(b, "1gbit")
	b.Run("download_100MB_1gbit/host", func(b *testing.B) {
		each(b, "MB/s", func(b *testing.B) float64 {
			return host(b, speed+" "+resolve("blob.egress.test", h.Addr(0), 80)+" http://blob.egress.test/") / 1e6
		})
	})
	b.Run("download_100MB_1gbit/gateway", func(b *testing.B) {
		each(b, "MB/s", func(b *testing.B) float64 { return sandbox(b, speed+" http://blob.egress.test/") / 1e6 })
	})
	b.Run("https_ttfb/host", func(b *testing.B) {
		each(b, "ms", func(b *testing.B) float64 {
			return 1000 * host(b, ttfb+" --cacert "+root+" "+resolve("tunnel.egress.test", h.Addr(1), 443)+" https://tunnel.egress.test/")
		})
	})
	b.Run("https_ttfb/gateway_tunnel", func(b *testing.B) {
		each(b, "ms", func(b *testing.B) float64 {
			return 1000 * sandbox(b, ttfb+" --cacert /mnt/data/bundle.pem https://tunnel.egress.test/")
		})
	})
	b.Run("https_ttfb/gateway_intercepted", func(b *testing.B) {
		each(b, "ms", func(b *testing.B) float64 { return 1000 * sandbox(b, ttfb+" https://"+apiName+"/") })
	})
	pip := "python3 -m pip install -q --no-deps --no-cache-dir --disable-pip-version-check --index-url http://%s/simple/ --trusted-host %s --target %s --upgrade cellbox-probe"
	b.Run("pip_install/host", func(b *testing.B) {
		dir := b.TempDir()
		each(b, "ms", func(b *testing.B) float64 {
			start := time.Now()
			// The same interpreter as the sandbox's (the host's PATH may name another).
			cmd := "/usr/bin/" + fmt.Sprintf(pip, h.Addr(2), h.Addr(2), dir)
			if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
				b.Fatalf("pip on the host: %v: %s", err, out)
			}
			return float64(time.Since(start).Microseconds()) / 1000
		})
	})
	b.Run("pip_install/gateway", func(b *testing.B) {
		each(b, "ms", func(b *testing.B) float64 {
			start := time.Now()
			if r := e.sh(b, id, fmt.Sprintf(pip, pypiName, pypiName, "/mnt/data/lib")); r.ExitCode != 0 {
				b.Fatalf("pip in the sandbox: %+v", r)
			}
			return float64(time.Since(start).Microseconds()) / 1000
		})
	})
}

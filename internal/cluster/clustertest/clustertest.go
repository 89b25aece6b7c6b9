// Package clustertest starts a real Kubernetes control plane for tests: etcd and
// kube-apiserver, built by scripts/kube-tools.sh (the folder in CELLBOX_KUBE_TOOLS), on
// loopback, with RBAC on, an admin token and service-account tokens that work.
//
// Not for: kubelets, controllers or a scheduler. Nothing runs pods: objects are stored and
// checked by the real API server, which is what the cluster tests need.
package clustertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/testbin"
)

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	URL        string // of the API server, https://127.0.0.1:PORT
	Kubeconfig string // admin (system:masters)
	Tools      string // the folder of etcd, kube-apiserver and kubectl
	dir        string
	ca         []byte // PEM
	token      string // admin's
	apiArgs    []string
	apiserver  *proc
}

// proc is a running etcd or kube-apiserver.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// Tools returns the folder of the built control plane, or skips the test (fails it with CI
// set) when there is none.
func Tools(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("CELLBOX_KUBE_TOOLS")
	if dir == "" {
		testbin.Missing(t, "no Kubernetes control plane: run scripts/kube-tools.sh (~9 min the first time) and set CELLBOX_KUBE_TOOLS to the folder it prints (make test does)")
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("CELLBOX_KUBE_TOOLS=%s has no %s: run scripts/kube-tools.sh", dir, b)
		}
	}
	return dir
}

// Start starts etcd and kube-apiserver and waits until the API server is ready (3-4 s).
// Both are stopped when the test ends.
func Start(t testing.TB) *ControlPlane {
	t.Helper()
	tools := Tools(t)
	dir := t.TempDir()
	cp := &ControlPlane{Tools: tools, dir: dir}

	etcdClient, etcdPeer := freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + etcdClient
	peerURL := "http://127.0.0.1:" + etcdPeer
	cp.run(t, "etcd", filepath.Join(tools, "etcd"),
		"--name", "default", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL, "--unsafe-no-fsync", "--log-level", "warn")

	pki := cp.writePKI(t)
	token := randHex(t, 16)
	write(t, filepath.Join(dir, "tokens.csv"), token+",admin,admin,system:masters\n")
	port := freePort(t)
	cp.URL = "https://127.0.0.1:" + port
	cp.token = token
	cp.apiArgs = []string{"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", port,
		"--tls-cert-file", pki["server.crt"], "--tls-private-key-file", pki["server.key"],
		"--client-ca-file", pki["ca.crt"], "--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", pki["sa.pub"], "--service-account-signing-key-file", pki["sa.key"],
		"--service-cluster-ip-range", "10.0.0.0/24", "--allow-privileged",
		"--endpoint-reconciler-type", "none", "--profiling=false"}
	cp.Kubeconfig = cp.WriteKubeconfig(t, "admin", token)
	cp.StartAPIServer(t)
	return cp
}

// StopAPIServer stops the API server (etcd runs on), as an upgrade of the control plane or
// a network cut would take it away.
func (cp *ControlPlane) StopAPIServer(t testing.TB) {
	t.Helper()
	if cp.apiserver != nil {
		cp.apiserver.stop()
		cp.apiserver = nil
	}
}

// StartAPIServer starts the API server on its address and waits until it is ready.
func (cp *ControlPlane) StartAPIServer(t testing.TB) {
	t.Helper()
	if cp.apiserver == nil {
		cp.apiserver = cp.run(t, "kube-apiserver", filepath.Join(cp.Tools, "kube-apiserver"), cp.apiArgs...)
	}
	cp.waitReady(t, cp.token)
}

// WriteKubeconfig writes a kubeconfig for the API server with a bearer token and returns its
// path.
func (cp *ControlPlane) WriteKubeconfig(t testing.TB, name, token string) string {
	t.Helper()
	path := filepath.Join(cp.dir, name+".kubeconfig")
	write(t, path, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: %s}
current-context: test
`, cp.URL, filepath.Join(cp.dir, "ca.crt"), name, token, name))
	return path
}

// Kubectl runs kubectl against the API server as admin and returns its stdout; it fails
// the test when kubectl does.
func (cp *ControlPlane) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := cp.KubectlErr(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// Apply applies the manifest text as admin.
func (cp *ControlPlane) Apply(t testing.TB, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	write(t, f, manifest)
	cp.Kubectl(t, "apply", "-f", f)
}

// KubectlErr runs kubectl as admin; the error carries its stderr.
func (cp *ControlPlane) KubectlErr(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(cp.Tools, "kubectl"), append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return string(out), nil
}

// run starts bin, logging to name.log (appended: a restart keeps what came before); the
// test's end stops it.
func (cp *ControlPlane) run(t testing.TB, name, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(cp.dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = nil
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ETCD_") { // etcd reads every ETCD_* variable as a flag
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8<<10 {
				b = b[len(b)-8<<10:]
			}
			t.Logf("%s's log (the end):\n%s", name, b)
		}
	})
	return p
}

// stop sends SIGTERM, then SIGKILL to the process group after 10 s, and waits for the exit.
func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

func (cp *ControlPlane) waitReady(t testing.TB, token string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.ca)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var last string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, cp.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := hc.Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			return
		}
		last = res.Status
	}
	t.Fatalf("kube-apiserver not ready within 2 minutes: %s", last)
}

// writePKI makes a CA, the API server's serving certificate, and the service-account
// signing key, and returns their paths by name.
func (cp *ControlPlane) writePKI(t testing.TB) map[string]string {
	t.Helper()
	paths := map[string]string{}
	save := func(name, typ string, der []byte) {
		p := filepath.Join(cp.dir, name)
		b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
		write(t, p, string(b))
		paths[name] = p
		if name == "ca.crt" {
			cp.ca = b
		}
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cellbox-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	save("ca.crt", "CERTIFICATE", caDER)

	srvKey := key()
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	save("server.crt", "CERTIFICATE", srvDER)
	srvKeyDER, _ := x509.MarshalECPrivateKey(srvKey)
	save("server.key", "EC PRIVATE KEY", srvKeyDER)

	saKey := key()
	saDER, _ := x509.MarshalECPrivateKey(saKey)
	save("sa.key", "EC PRIVATE KEY", saDER)
	saPub, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	save("sa.pub", "PUBLIC KEY", saPub)
	return paths
}

// freePort is a loopback port nothing listens on now.
func freePort(t testing.TB) string {
	_, port, _ := net.SplitHostPort(testbin.FreeAddr(t))
	return port
}

func randHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func write(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

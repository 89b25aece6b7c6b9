// Package artifactstest starts a real S3 server for tests: versitygw, built by
// scripts/s3-tools.sh (the folder in CELLBOX_S3_TOOLS), on a temporary folder.
package artifactstest

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/testbin"
)

// The credentials of the servers StartS3 starts.
const (
	Access = "cellboxtest"
	Secret = "cellboxtestsecret"
)

// StartS3 starts versitygw with the buckets named, stopped when the test ends, and points
// the AWS variables at it (for this test: t.Setenv). It returns the server's URL.
func StartS3(t testing.TB, buckets ...string) string {
	t.Helper()
	dir := os.Getenv("CELLBOX_S3_TOOLS")
	if dir == "" {
		testbin.Missing(t, "no S3 server: run scripts/s3-tools.sh and set CELLBOX_S3_TOOLS to the folder it prints (make test does)")
	}
	data := t.TempDir()
	for _, b := range buckets {
		os.Mkdir(filepath.Join(data, b), 0o755)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	Serve(t, exec.Command(filepath.Join(dir, "versitygw"), "--access", Access, "--secret", Secret, "--port", addr, "posix", data), addr)
	t.Setenv("AWS_ACCESS_KEY_ID", Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", Secret)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ENDPOINT_URL_S3", "http://"+addr)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(data, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(data, "none"))
	return "http://" + addr
}

// Serve starts cmd, a server, stopped when the test ends, and waits until addr takes
// connections.
func Serve(t testing.TB, cmd *exec.Cmd, addr string) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s:\n%s", filepath.Base(cmd.Path), addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Package artifactstest starts real object stores for tests, on temporary folders: an S3
// server, versitygw, built by scripts/s3-tools.sh (the folder in CELLBOX_S3_TOOLS), and
// Azure's emulator, Azurite, from npm (internal/artifacts/testdata/azurite).
package artifactstest

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/cellbox/cellbox/internal/testbin"
)

// The credentials of the servers StartS3 starts.
const (
	Access = "cellboxtest"
	Secret = "cellboxtestsecret"
)

// The account of the Azurite StartAzurite starts: its published, well-known development
// account and key.
const (
	AzureAccount = "devstoreaccount1"
	AzureKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// StartAzurite starts Azurite's blob service with the containers named, stopped when the
// test ends, and points AZURE_STORAGE_CONNECTION_STRING at it (t.Setenv). It returns the
// account's URL (http://ADDR/devstoreaccount1).
func StartAzurite(t testing.TB, containers ...string) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "internal", "artifacts", "testdata", "azurite", "node_modules", ".bin", "azurite-blob")
	if _, err := os.Stat(bin); err != nil {
		testbin.Missing(t, "no Azurite: npm ci --prefix internal/artifacts/testdata/azurite (make test does)")
	}
	addr := testbin.FreeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	Serve(t, exec.Command(bin, "--blobHost", host, "--blobPort", port, "--location", t.TempDir(), "--skipApiVersionCheck", "--loose", "--silent"), addr)
	account := "http://" + addr + "/" + AzureAccount
	cs := "DefaultEndpointsProtocol=http;AccountName=" + AzureAccount + ";AccountKey=" + AzureKey + ";BlobEndpoint=" + account + ";"
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", cs)
	c, err := azblob.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range containers {
		if _, err := c.CreateContainer(context.Background(), name, nil); err != nil {
			t.Fatal(err)
		}
	}
	return account
}

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
	addr := testbin.FreeAddr(t)
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

package web_test

// The notebook's network panel in a real browser (as in TestBrowser): a session made with
// an allowlist and a secret shows its policy, and a request its code makes to a host the
// session denies shows in the connections, refused, with the gateway's reason.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/cellbox/cellbox/internal/testbin"
)

// secretValue is the secret header's value: it must never reach the page.
const secretValue = "Bearer web-test-secret-0d1e"

func TestBrowserNetwork(t *testing.T) {
	testbin.NeedRunc(t)
	node := testbin.NeedProgram(t, "node", "nodejs")
	chromium := testbin.NeedProgram(t, "chromium", "chromium")
	dir, err := filepath.Abs(filepath.Join("testdata", "browser"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); err != nil {
		testbin.Missing(t, "needs playwright-core: run npm ci in %s (make test does)", dir)
	}
	url := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := client.New(url, client.WithAPIKey(testKey))
	sess, err := c.CreateSession(ctx, api.CreateSessionRequest{Network: &api.Network{
		Egress:  api.EgressAllowlist,
		Allow:   []string{"pypi.org", "*.pythonhosted.org:443"},
		Deny:    []string{"evil.pypi.org"},
		Secrets: []api.EgressSecret{{Domain: "api.github.com", Headers: map[string]string{"Authorization": secretValue}}},
	}})
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(ctx, node, "network.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CELLBOX_URL="+url, "CELLBOX_KEY="+testKey, "CHROMIUM="+chromium,
		"SESSION_ID="+sess.ID, "SECRET_VALUE="+secretValue)
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(&stderr, testWriter{t})
	if err := cmd.Run(); err != nil {
		t.Fatalf("network.mjs: %v\n%s", err, &stderr)
	}
	// What the page showed came from the gateway's record.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/sessions/"+sess.ID+"/egress", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var log api.EgressLog
	if err := json.NewDecoder(res.Body).Decode(&log); err != nil {
		t.Fatal(err)
	}
	if len(log.Connections) == 0 || log.Connections[0].Host != "evil.pypi.org" || log.Connections[0].Decision != "refused" {
		t.Errorf("the gateway recorded %+v", log.Connections)
	}
	if strings.Contains(stderr.String(), secretValue) {
		t.Error("the secret's value reached the script")
	}
}

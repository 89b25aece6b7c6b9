package httpapi_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/cluster"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/httpapi"
	"github.com/cellbox/cellbox/internal/session/sessiontest"
)

// nodes is a cluster as a node's view of it says (package cluster, tested against a real
// API server, decides the order; TestCluster in cmd/cellbox runs the whole): the nodes
// Place lists, best first.
type nodes []cluster.Member

func (n nodes) Name() string                          { return "front" }
func (n nodes) Route(string) (*cluster.Member, error) { return nil, nil }
func (n nodes) Place() []cluster.Member               { return n }
func (n nodes) Placed(string)                         {}
func (n nodes) Members() []cluster.Member             { return n }
func node(t *testing.T, name, u string) cluster.Member {
	return cluster.Member{Name: name, URL: mustURL(t, u), Live: true}
}
func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A node whose Lease said it had room but that refuses new work (429: full, or the tenant
// at its cap there) is passed over for the next node, the request sent again: it did
// nothing of it. The last node's refusal is the client's, as that node wrote it.
func TestPlacePassesOverAFullNode(t *testing.T) {
	opts := httpapi.Options{MaxBodyBytes: 1 << 20, MaxUploadBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)}
	full := sessiontest.New(t, func(c *config.Config) { c.MaxSessions = 1 })
	room := sessiontest.New(t, nil)
	fullSrv := httptest.NewServer(httpapi.New(full, opts))
	defer fullSrv.Close()
	roomSrv := httptest.NewServer(httpapi.New(room, opts))
	defer roomSrv.Close()
	if st, body := post(t, fullSrv.URL, "/v1/sessions", `{}`); st != http.StatusCreated {
		t.Fatalf("fill the full node: %d %s", st, body)
	}
	front := func(ns nodes) *httptest.Server {
		o := opts
		o.Cluster = ns
		return httptest.NewServer(httpapi.New(sessiontest.New(t, nil), o))
	}

	both := front(nodes{node(t, "full", fullSrv.URL), node(t, "room", roomSrv.URL)})
	defer both.Close()
	for _, path := range []string{"/v1/sessions", "/v1/execute"} {
		body := `{}`
		if path == "/v1/execute" {
			body = `{"code":"print(6*7)"}`
		}
		st, out := post(t, both.URL, path, body)
		if st != http.StatusCreated && st != http.StatusOK {
			t.Errorf("POST %s through a node that sees a full node first: %d %s; want the other node's answer", path, st, out)
		}
		if path == "/v1/execute" && !strings.Contains(out, "42") {
			t.Errorf("POST /v1/execute: %s; want 42", out)
		}
	}
	if n := len(room.List(t.Context())); n != 1 {
		t.Errorf("the node with room has %d sessions; want the 1 the full node refused", n)
	}

	only := front(nodes{node(t, "full", fullSrv.URL)})
	defer only.Close()
	if st, out := post(t, only.URL, "/v1/sessions", `{}`); st != http.StatusTooManyRequests || !strings.Contains(out, "resource_exhausted") {
		t.Errorf("POST /v1/sessions with only the full node: %d %s; want its 429", st, out)
	}
}

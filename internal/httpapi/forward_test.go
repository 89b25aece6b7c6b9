package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/cluster"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/errdefs/errhttp"
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
func (n nodes) Nudge()                                {}
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

// ownedBy is a cluster in which every session is on one other node.
type ownedBy struct{ nodes }

func (o ownedBy) Route(string) (*cluster.Member, error) { m := o.nodes[0]; return &m, nil }

// An SSE answer forwarded from a session's node arrives whole, every time: the event stream
// starts while the forwarder may still be reading the request's body (its last read, for
// EOF), and an HTTP/1 server by default takes the body away once the response's header is
// out; the proxy then lost its connection mid-answer (unexpected EOF, about 1 in 100 here).
func TestForwardedStreamsComeWhole(t *testing.T) {
	opts := httpapi.Options{MaxBodyBytes: 1 << 20, MaxUploadBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)}
	owner := httptest.NewServer(httpapi.New(sessiontest.New(t, nil), opts))
	defer owner.Close()
	st, body := post(t, owner.URL, "/v1/sessions", `{}`)
	var s struct{ ID string }
	if st != http.StatusCreated || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("create a session: %d %s", st, body)
	}
	o := opts
	o.Cluster = ownedBy{nodes{node(t, "owner", owner.URL)}}
	front := httptest.NewServer(httpapi.New(sessiontest.New(t, nil), o))
	defer front.Close()

	var whole, cut atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 150 {
				req, _ := http.NewRequest("POST", front.URL+"/v1/sessions/"+s.ID+"/execute", strings.NewReader(`{"code":"print(1)"}`))
				req.Header.Set("Accept", "text/event-stream")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					cut.Add(1)
					continue
				}
				sc := bufio.NewScanner(res.Body)
				ended := false
				for sc.Scan() {
					ended = ended || sc.Text() == "event: result"
				}
				res.Body.Close()
				if sc.Err() != nil || !ended {
					cut.Add(1)
				} else {
					whole.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if cut.Load() != 0 {
		t.Errorf("%d of %d SSE executions through the forwarding node were cut short", cut.Load(), cut.Load()+whole.Load())
	}
}

// down is a cluster whose every session is on a node that cannot be reached, as Route says.
type down struct{ nodes }

func (down) Route(id string) (*cluster.Member, error) {
	return nil, fmt.Errorf("session %s is on cluster node secret-node-7, which has not been heard from for 3m0s: %w", id, errdefs.ErrUnavailable)
}

// sandboxTraffic is a front door whose requests carry no API key (E2B's sandbox traffic):
// their token is checked on the session's node.
type sandboxTraffic struct{}

func (sandboxTraffic) Claims(r *http.Request) (bool, bool) {
	return r.Header.Get("E2b-Sandbox-Id") != "", false
}
func (sandboxTraffic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusTeapot)
}
func (sandboxTraffic) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	w.WriteHeader(errhttp.ToHTTP(err))
	io.WriteString(w, err.Error())
}

// A request that carries no key (a link, sandbox traffic), for a session on a node that is
// down, is told no more than of a session that never was: not the node's name or state.
// A caller with a key is told why.
func TestAnonymousRoutingSaysNothingOfNodes(t *testing.T) {
	keys, err := auth.Load("cbk_0123456789abcdef0123", "")
	if err != nil {
		t.Fatal(err)
	}
	opts := httpapi.Options{MaxBodyBytes: 1 << 20, MaxUploadBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler),
		Keys: keys, Cluster: down{}, E2B: sandboxTraffic{}}
	srv := httptest.NewServer(httpapi.New(sessiontest.New(t, nil), opts))
	defer srv.Close()
	id := config.NodeTag("other") + strings.Repeat("a", 24)
	send := func(path string, hdr ...string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name string
		path string
		hdr  []string
	}{
		{"a link", "/v1/sessions/" + id + "/files/x.csv?expires=1999999999&signature=" + strings.Repeat("A", 43), nil},
		{"sandbox traffic", "/files?path=x", []string{"E2b-Sandbox-Id", id}},
	} {
		st, body := send(tc.path, tc.hdr...)
		if st != http.StatusNotFound || strings.Contains(body, "secret-node-7") || strings.Contains(body, "heard") {
			t.Errorf("%s, no key: %d %s; want 404, naming no node", tc.name, st, body)
		}
	}
	st, body := send("/v1/sessions/"+id, "Authorization", "Bearer cbk_0123456789abcdef0123")
	if st != http.StatusServiceUnavailable || !strings.Contains(body, "secret-node-7") {
		t.Errorf("with the key: %d %s; want 503 naming the node", st, body)
	}
}

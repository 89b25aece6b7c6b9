package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/cluster/clustertest"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/testbin"
)

// Nodes against a real API server: each sees the others through their Leases; session ids
// route to their node, or say why it is unavailable (stopping; silent past its Lease);
// new sessions go where there is the most room, counting what was sent since.
func TestNodes(t *testing.T) {
	cp := clustertest.Start(t)
	kube, err := KubeConfig(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	node := func(name string, sessions, room, warm int) *Cluster {
		u, _ := url.Parse("http://127.0.0.1:1/" + name)
		u.Path = ""
		// Renewals 200 s apart (the Loads never change): what a counted of its placements
		// stands until a Lease really changes.
		c, err := Start(t.Context(), Config{Kube: kube, Namespace: "default", Node: name, URL: u, LeaseDuration: 10 * time.Minute,
			Load: func() Load { return Load{Sessions: sessions, Room: room, Warm: warm} }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Leave(context.Background()); c.Close() })
		return c
	}
	a, b := node("a", 5, 5, 2), node("b", 0, 10, 3)
	node("c", 0, 50, 0) // the most room, but no warm sandbox yet
	id := func(node string) string { return config.NodeTag(node) + strings.Repeat("0", 24) }
	for _, n := range []string{"b", "c"} {
		testbin.WaitFor(t, 30*time.Second, "a sees "+n, route(a, id(n), n, ""))
	}
	for _, tt := range []string{id("a"), "short", strings.Repeat("f", 32)} {
		if m, err := a.Route(tt); m != nil || err != nil {
			t.Errorf("Route(%q) = %+v, %v; want here", tt, m, err)
		}
	}
	names := func(ms []Member) string {
		var s []string
		for _, m := range ms {
			s = append(s, fmt.Sprintf("%s:%d", m.Name, m.Room))
		}
		return strings.Join(s, " ")
	}
	if got := names(a.Place()); got != "b:10 a:5 c:50" {
		t.Errorf("Place() = %s, want b:10 a:5 c:50 (those with warm sandboxes first, then the most room)", got)
	}
	for range 6 {
		a.Placed("b")
	}
	if got := names(a.Place()); got != "a:5 c:50 b:4" {
		t.Errorf("after 6 sessions sent to b (its 3 warm sandboxes taken): Place() = %s, want a:5 c:50 b:4", got)
	}

	// A node gone silent (its Lease is a minute old), and a Lease whose url is no URL of a
	// node: both unavailable, saying why.
	// Stopping nodes renew no more: one a minute away is restarting, one ten minutes away
	// has not come back.
	for _, l := range []struct {
		node, url string
		ago       time.Duration
		state     string
	}{
		{"d", "http://127.0.0.1:2", time.Minute, "serving"},
		{"e", "javascript:alert(1)", 0, "serving"},
		{"f", "http://127.0.0.1:3", time.Minute, "stopping"},
		{"g", "http://127.0.0.1:4", 10 * time.Minute, "stopping"},
	} {
		applyLease(t, cp, l.node, l.url, 100, l.state, time.Now().Add(-l.ago))
	}
	// A Lease that claims b's tag under another name is no node: b's sessions still go to b.
	cp.Apply(t, fmt.Sprintf(`apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: cellbox-0-thief
  namespace: default
  labels: {app.kubernetes.io/name: cellbox}
  annotations: {cellbox.dev/url: "http://169.254.169.254", cellbox.dev/node-tag: %q, cellbox.dev/room: "1000", cellbox.dev/warm: "9", cellbox.dev/state: serving}
spec: {holderIdentity: x, leaseDurationSeconds: 3600, renewTime: %q}
`, config.NodeTag("b"), microTime(time.Now())))
	for node, want := range map[string]string{"d": "has not been heard from for 1m", "e": "no address",
		"f": "restarting", "g": "and has not come back"} {
		testbin.WaitFor(t, 30*time.Second, "a sees "+node, route(a, id(node), node, want))
	}
	if got := names(a.Place()); got != "a:5 c:50 b:4" {
		t.Errorf("with d silent, e unreachable and a thief: Place() = %s, want a:5 c:50 b:4", got)
	}
	if m, err := a.Route(id("b")); err != nil || m == nil || m.Name != "b" {
		t.Errorf("with a Lease claiming b's tag: Route(b's id) = %+v, %v; want b", m, err)
	}

	// Nodes whose clocks do not agree with a's. One ahead by ten minutes is up while it
	// renews, and down once it stops, after its Lease's 3 s, not ten minutes later. One an
	// hour behind: a's first sight of its Lease says an hour old; a renewal a sees is news.
	skewed := func(node string, renewed time.Time) {
		applyLease(t, cp, node, "http://127.0.0.1:5", 0, "serving", renewed)
	}
	skewed("ahead", time.Now().Add(10*time.Minute))
	skewed("behind", time.Now().Add(-time.Hour))
	testbin.WaitFor(t, 30*time.Second, "a sees ahead up", route(a, id("ahead"), "ahead", ""))
	testbin.WaitFor(t, 30*time.Second, "a sees behind down", route(a, id("behind"), "behind", "has not been heard from for 1h"))
	skewed("behind", time.Now().Add(-time.Hour+time.Second))
	testbin.WaitFor(t, 30*time.Second, "a sees behind renew", route(a, id("behind"), "behind", ""))
	testbin.WaitFor(t, 30*time.Second, "a sees ahead silent past its Lease", route(a, id("ahead"), "ahead", "has not been heard from for 3s"))

	// b stops: it says so, and gets nothing new.
	if err := b.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 30*time.Second, "a sees b stopping", route(a, id("b"), "b", "restarting"))
	if got := names(a.Place()); got != "a:5 c:50" {
		t.Errorf("with b stopping: Place() = %s, want a:5 c:50", got)
	}
}

// A node publishes at once that its warm sandboxes came back (or ran out), not at its next
// renewal: a new node is a choice for new sessions as soon as its first one is ready.
func TestWarmIsPublishedAtOnce(t *testing.T) {
	cp := clustertest.Start(t)
	kube, err := KubeConfig(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var warm atomic.Int64
	u, _ := url.Parse("http://127.0.0.1:1")
	start := func(name string, load func() Load) *Cluster {
		// Renewals 200 s apart: only the change itself can publish within the wait.
		c, err := Start(t.Context(), Config{Kube: kube, Namespace: "default", Node: name, URL: u, LeaseDuration: 10 * time.Minute, Load: load})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Leave(context.Background()); c.Close() })
		return c
	}
	start("new", func() Load { return Load{Room: 10, Warm: int(warm.Load())} })
	old := start("old", func() Load { return Load{Room: 5, Warm: 1} })
	warmOf := func() (int, error) {
		for _, m := range old.Members() {
			if m.Name == "new" {
				return m.Warm, nil
			}
		}
		return 0, fmt.Errorf("old does not see new")
	}
	testbin.WaitFor(t, 30*time.Second, "old sees new, not warm", func() error {
		if w, err := warmOf(); err != nil || w != 0 {
			return fmt.Errorf("warm %d, %v", w, err)
		}
		return nil
	})
	warm.Store(2)
	testbin.WaitFor(t, 30*time.Second, "old sees new warm", func() error {
		if w, err := warmOf(); err != nil || w != 2 {
			return fmt.Errorf("warm %d, %v", w, err)
		}
		return nil
	})
	if p := old.Place(); len(p) != 2 || p[0].Name != "new" {
		t.Errorf("Place() = %+v, want new (warm, most room) first", p)
	}
}

// applyLease writes node's Lease as another node would: its url, room and state, renewed at
// renewed by its writer's clock, for 3 s.
func applyLease(t *testing.T, cp *clustertest.ControlPlane, node, url string, room int, state string, renewed time.Time) {
	t.Helper()
	cp.Apply(t, fmt.Sprintf(`apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: cellbox-%s
  namespace: default
  labels: {app.kubernetes.io/name: cellbox}
  annotations: {cellbox.dev/url: %q, cellbox.dev/node-tag: %q, cellbox.dev/room: "%d", cellbox.dev/state: %s}
spec: {holderIdentity: x, leaseDurationSeconds: 3, renewTime: %q}
`, node, url, config.NodeTag(node), room, state, microTime(renewed)))
}

// microTime is t as a Lease's renewTime is written.
func microTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

// The API server goes away for longer than a Lease lasts (an upgrade of the control plane):
// a node that cannot renew its own Lease takes no other node for down, so sessions keep
// being routed to their nodes. When it is back, the nodes renew and a node that then stops
// is seen stopping.
func TestAPIServerOutage(t *testing.T) {
	cp := clustertest.Start(t)
	kube, err := KubeConfig(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	node := func(name string) *Cluster {
		u, _ := url.Parse("http://127.0.0.1:1")
		c, err := Start(t.Context(), Config{Kube: kube, Namespace: "default", Node: name, URL: u, LeaseDuration: 3 * time.Second,
			Load: func() Load { return Load{Room: 10, Warm: 1} }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Leave(context.Background()); c.Close() })
		return c
	}
	a, b := node("a"), node("b")
	bID := config.NodeTag("b") + strings.Repeat("0", 24)
	testbin.WaitFor(t, 30*time.Second, "a sees b", route(a, bID, "b", ""))

	cp.StopAPIServer(t)
	// Until b's last renewal that a heard is older than a Lease lasts (3 s).
	testbin.WaitFor(t, 30*time.Second, "b's Lease to run out as a heard it", func() error {
		a.heardMu.Lock()
		at := a.heard[leasePrefix+"b"]
		a.heardMu.Unlock()
		if since := time.Since(at); since <= a.cfg.LeaseDuration {
			return fmt.Errorf("a heard b renew %v ago", since)
		}
		return nil
	})
	if m, err := a.Route(bID); err != nil || m == nil || m.Name != "b" {
		t.Errorf("with the API server away past b's Lease: Route(b's id) = %+v, %v; want b still", m, err)
	}
	if p := a.Place(); len(p) != 2 {
		t.Errorf("with the API server away: Place() = %+v; want a and b", p)
	}

	cp.StartAPIServer(t)
	// Both renew (each retries within its Lease's third); then b's silence means b again.
	testbin.WaitFor(t, 30*time.Second, "a is in touch again", func() error {
		if !a.inTouch(time.Now()) {
			return fmt.Errorf("a has not renewed its Lease")
		}
		return nil
	})
	testbin.WaitFor(t, 30*time.Second, "a sees b after the outage", route(a, bID, "b", ""))
	if err := b.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, 30*time.Second, "a sees b stopping", route(a, bID, "b", "restarting"))
}

// route is a condition for testbin.WaitFor: Route(id) on c says node, or fails saying want.
func route(c *Cluster, id, node, want string) func() error {
	return func() error {
		m, err := c.Route(id)
		if want == "" && (err != nil || m == nil || m.Name != node) {
			return fmt.Errorf("Route(%s's id) = %+v, %v; want %s", node, m, err, node)
		}
		if want != "" && (!errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), want)) {
			return fmt.Errorf("Route(%s's id) = %v; want unavailable, %q", node, err, want)
		}
		return nil
	}
}

// Sessions moved between nodes (a drain): the node that has one lists it in its Lease with
// how many times it moved, and every node routes its id there, the highest count winning;
// the node it left routes it at once (MovedTo). A Lease that is not a node's claims
// nothing, and neither does a Lease of a node of any name that anyone who may write Leases
// can make: a claim needs its proof, signed with the cluster's secret for that node. A
// draining node is not placed on but still routed to; a cordon of its Kubernetes Node is
// told to Cordoned, and so is the uncordon.
func TestMovedSessions(t *testing.T) {
	cp := clustertest.Start(t)
	kube, err := KubeConfig(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cp.Apply(t, "apiVersion: v1\nkind: Node\nmetadata:\n  name: c\n")
	type movedIn struct {
		sync.Mutex
		ids map[string]int
	}
	in := map[string]*movedIn{}
	cordons := make(chan bool, 4)
	node := func(name string) *Cluster {
		u, _ := url.Parse("http://127.0.0.1:1")
		mi := &movedIn{ids: map[string]int{}}
		in[name] = mi
		cfg := Config{Kube: kube, Namespace: "default", Node: name, URL: u, LeaseDuration: 3 * time.Second, Secret: "the cluster's secret",
			Load: func() Load { return Load{Room: 10, Warm: 1} },
			MovedIn: func() map[string]int {
				mi.Lock()
				defer mi.Unlock()
				return maps.Clone(mi.ids)
			}}
		if name == "c" {
			cfg.Cordoned = func(on bool) { cordons <- on }
		}
		c, err := Start(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Leave(context.Background()); c.Close() })
		return c
	}
	a, b, c := node("a"), node("b"), node("c")
	id := config.NodeTag("a") + strings.Repeat("1", 24)
	claim := func(n *Cluster, moves int) {
		in[n.Name()].Lock()
		in[n.Name()].ids[id] = moves
		in[n.Name()].Unlock()
		n.Nudge()
	}
	testbin.WaitFor(t, 30*time.Second, "b sees c", route(b, config.NodeTag("c")+strings.Repeat("0", 24), "c", ""))
	if m, err := b.Route(id); err != nil || m == nil || m.Name != "a" {
		t.Fatalf("Route(a's id) before it moved = %+v, %v; want a", m, err)
	}
	a.MovedTo(id, "b", 1)
	if m, err := a.Route(id); err != nil || m == nil || m.Name != "b" {
		t.Errorf("on a, which moved it to b: Route = %+v, %v; want b at once", m, err)
	}
	claim(b, 1)
	testbin.WaitFor(t, 30*time.Second, "c routes the moved session to b", route(c, id, "b", ""))
	if m, err := b.Route(id); m != nil || err != nil {
		t.Errorf("on b, which has it: Route = %+v, %v; want here", m, err)
	}
	// It moves on, to c: c's higher count wins while b's Lease still lists it.
	claim(c, 2)
	for _, n := range []*Cluster{a, b} {
		testbin.WaitFor(t, 30*time.Second, n.Name()+" routes the session to c", route(n, id, "c", ""))
	}
	// evil writes the Lease cellbox-evil, serving, of the tag and claims given, as whoever
	// may write Leases can.
	evil := func(tag, claims string, renewed time.Time) {
		cp.Apply(t, fmt.Sprintf(`apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: cellbox-evil
  namespace: default
  labels: {app.kubernetes.io/name: cellbox}
  annotations: {cellbox.dev/url: "http://127.0.0.1:9", cellbox.dev/node-tag: %q, cellbox.dev/state: serving, cellbox.dev/moved-in: '%s'}
spec: {holderIdentity: x, leaseDurationSeconds: 30, renewTime: %q}
`, tag, claims, microTime(renewed)))
	}
	// A Lease that is not a node's (its tag is not its name's) claims nothing.
	evil(config.NodeTag("a"), fmt.Sprintf(`{"%s": "99.%s"}`, id, claimMAC("the cluster's secret", "evil", id, 99)), time.Now())
	// Heard: its claims were read (hear reads them before it notes the renewal).
	testbin.WaitFor(t, 30*time.Second, "a hears the Lease of no node", func() error {
		a.heardMu.Lock()
		_, ok := a.heard[leasePrefix+"evil"]
		a.heardMu.Unlock()
		if !ok {
			return errors.New("not yet")
		}
		return nil
	})
	if err := route(a, id, "c", "")(); err != nil {
		t.Errorf("after a Lease not of a node claimed it: %v", err)
	}
	// A Lease of a node of another name (its tag its name's), claiming the session with no
	// proof, a proof of another node's, or one made without the secret: none counts.
	forged := fmt.Sprintf(`{"%s": "99", "%s": "99.%s", "%s": "99.%s"}`, id,
		config.NodeTag("a")+strings.Repeat("2", 24), claimMAC("the cluster's secret", "c", config.NodeTag("a")+strings.Repeat("2", 24), 99),
		config.NodeTag("a")+strings.Repeat("3", 24), claimMAC("a guess", "evil", config.NodeTag("a")+strings.Repeat("3", 24), 99))
	evil(config.NodeTag("evil"), forged, time.Now().Add(time.Second))
	testbin.WaitFor(t, 30*time.Second, "a sees the Lease of a node named evil", route(a, config.NodeTag("evil")+strings.Repeat("0", 24), "evil", ""))
	if err := route(a, id, "c", "")(); err != nil {
		t.Errorf("after a Lease of another node claimed it without a proof: %v", err)
	}
	for _, other := range []string{config.NodeTag("a") + strings.Repeat("2", 24), config.NodeTag("a") + strings.Repeat("3", 24)} {
		if err := route(b, other, "a", "")(); err != nil {
			t.Errorf("after a Lease of another node claimed it with a forged proof: %v", err)
		}
	}
	cp.Kubectl(t, "-n", "default", "delete", "lease", "cellbox-evil")

	// c is cordoned: told so; it drains, so no new session goes there, but its sessions
	// are still routed to it.
	cp.Kubectl(t, "cordon", "c")
	select {
	case on := <-cordons:
		if !on {
			t.Fatal("Cordoned(false) on a cordon")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cordon was not told in 30 s")
	}
	c.Drain(true)
	testbin.WaitFor(t, 30*time.Second, "a sees c draining", func() error {
		for _, m := range a.Place() {
			if m.Name == "c" {
				return errors.New("c still placed on")
			}
		}
		return route(a, id, "c", "")()
	})
	cp.Kubectl(t, "uncordon", "c")
	select {
	case on := <-cordons:
		if on {
			t.Fatal("Cordoned(true) on an uncordon")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the uncordon was not told in 30 s")
	}
}

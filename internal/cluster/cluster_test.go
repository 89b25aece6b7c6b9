package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/internal/cluster/clustertest"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
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
	node := func(name string, sessions, room int) *Cluster {
		u, _ := url.Parse("http://127.0.0.1:1/" + name)
		u.Path = ""
		c, err := Start(t.Context(), Config{Kube: kube, Namespace: "default", Node: name, URL: u, LeaseDuration: 3 * time.Second,
			Load: func() (int, int) { return sessions, room }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Stop(t.Context()) })
		return c
	}
	a, b := node("a", 5, 5), node("b", 0, 10)
	id := func(node string) string { return config.NodeTag(node) + strings.Repeat("0", 24) }
	waitFor(t, "a sees b", func() error {
		if m, err := a.Route(id("b")); err != nil || m == nil || m.Name != "b" {
			return fmt.Errorf("Route(b's id) = %+v, %v", m, err)
		}
		return nil
	})
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
	if got := names(a.Place()); got != "b:10 a:5" {
		t.Errorf("Place() = %s, want b:10 a:5 (most room first)", got)
	}
	for range 6 {
		a.Placed("b")
	}
	if got := names(a.Place()); got != "a:5 b:4" {
		t.Errorf("after 6 sessions sent to b: Place() = %s, want a:5 b:4", got)
	}

	// A node gone silent (its Lease is a minute old), and a Lease whose url is no URL of a
	// node: both unavailable, saying why.
	renewed := func(ago time.Duration) string {
		return time.Now().Add(-ago).UTC().Format("2006-01-02T15:04:05.000000Z")
	}
	for _, l := range []struct{ node, url, renewed string }{{"d", "http://127.0.0.1:2", renewed(time.Minute)}, {"e", "javascript:alert(1)", renewed(0)}} {
		cp.Apply(t, fmt.Sprintf(`apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: cellbox-%s
  namespace: default
  labels: {app.kubernetes.io/name: cellbox}
  annotations: {cellbox.dev/url: %q, cellbox.dev/node-tag: %q, cellbox.dev/room: "100", cellbox.dev/state: serving}
spec: {holderIdentity: x, leaseDurationSeconds: 3, renewTime: %q}
`, l.node, l.url, config.NodeTag(l.node), l.renewed))
	}
	for node, want := range map[string]string{"d": "has not been heard from for 1m", "e": "no address"} {
		waitFor(t, "a sees "+node, func() error {
			_, err := a.Route(id(node))
			if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), want) {
				return fmt.Errorf("Route(%s's id) = %v; want unavailable, %q", node, err, want)
			}
			return nil
		})
	}
	if got := names(a.Place()); got != "a:5 b:4" {
		t.Errorf("with d silent and e unreachable: Place() = %s, want a:5 b:4", got)
	}

	// b stops: it says so, and gets nothing new.
	if err := b.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a sees b stopping", func() error {
		_, err := a.Route(id("b"))
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "restarting") {
			return fmt.Errorf("Route(b's id) = %v; want unavailable, restarting", err)
		}
		return nil
	})
	if got := names(a.Place()); got != "a:5" {
		t.Errorf("with b stopping: Place() = %s, want a:5 only", got)
	}
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = cond(); err == nil {
			return
		}
	}
	t.Fatalf("%s: not within 30 s: %v", what, err)
}

// Package cluster makes a cellbox server one node of a cluster on Kubernetes. Each node
// keeps a Lease in the API server (coordination.k8s.io/v1, one per node, named
// "cellbox-<node>") that says where it answers, how many sessions it has and how many more it
// takes; every node watches all the Leases with a client-go informer. From them a node
// knows, for any session id, which node has it (the id starts with that node's tag, see
// config.NodeTag) and whether that node is up, and where a new session has the most room.
//
// There is no membership protocol of our own: a node that stops renewing its Lease is down,
// one that is stopping says so in its Lease before it goes.
//
// Not for: HTTP (package httpapi forwards requests with what this package says), or running
// sessions (package session).
package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// The Lease's label and annotations. The label selects cellbox's Leases among others in the
// namespace; the annotations are the node's record.
const (
	labelApp      = "app.kubernetes.io/name"
	appName       = "cellbox"
	annURL        = "cellbox.dev/url"
	annTag        = "cellbox.dev/node-tag"
	annSessions   = "cellbox.dev/sessions"
	annRoom       = "cellbox.dev/room"
	annWarm       = "cellbox.dev/warm"
	annState      = "cellbox.dev/state"
	annMovedIn    = "cellbox.dev/moved-in"
	stateServing  = "serving"
	stateDraining = "draining"
	stateStopping = "stopping"
	leasePrefix   = "cellbox-"
)

// MaxMovedIn caps the sessions moved from other nodes that a node's Lease lists (about 60
// bytes each with its proof, against the 256 KiB a Kubernetes object's annotations may
// take); a node holding as many takes no more.
const MaxMovedIn = 3000

// Config says how a node registers and what it publishes.
type Config struct {
	Kube      *rest.Config // the API server (Kubeconfig or InCluster)
	Namespace string       // of the Leases
	Node      string       // this node's name
	URL       *url.URL     // where the other nodes reach this one
	// LeaseDuration: a node whose Lease was not renewed for this long is down. Renewed
	// every third of it, and at once when the node's warm sandboxes run out or come back.
	LeaseDuration time.Duration
	// Load reports this node's sessions, how many more it takes (--max-sessions minus the
	// sessions it has), and its warm sandboxes (a new session there takes milliseconds).
	Load func() Load
	// MovedIn lists the sessions here that were moved from another node (a drain), each
	// with how many times it has moved; nil: none. Published in the Lease: a session id
	// names the node that made it, and these say where it went (Route).
	MovedIn func() map[string]int
	// Secret is the cluster's shared secret, which signs each session a Lease lists as
	// moved in (a claim): whoever may write Leases can make a Lease of a node of any name,
	// and a claim without the proof would send that session's requests to their address.
	// "": no session moves, and claims are neither published nor taken.
	Secret string
	// Cordoned, when set, is told when this node's Kubernetes Node (of the node's name) is
	// cordoned (kubectl cordon or drain: true) or uncordoned (false), as read once a
	// renewal; the first reading is told only when cordoned. Reading Nodes needs the
	// manifests' ClusterRole; without it, or without a Node of this name, nothing is told.
	Cordoned func(bool)
	Logger   *slog.Logger
}

// Load is what a node publishes of itself.
type Load struct {
	Sessions, Room, Warm int
}

// Member is one node as its Lease describes it.
type Member struct {
	Name     string
	Tag      string   // the prefix of its session ids
	URL      *url.URL // nil when the Lease has none that parses
	Sessions int
	Room     int // how many more sessions it takes
	Warm     int // its warm sandboxes
	// Renewed is when this node last saw it renew its Lease, by this node's clock (the
	// nodes' clocks need not agree): when the watch delivered the renewal; for a Lease
	// first seen, the renewal time it holds, if past.
	Renewed  time.Time
	Duration time.Duration
	Stopping bool // it said it is stopping (a restart, a rolling update)
	// Draining: it moves its sessions to other nodes and takes no new ones (its
	// Kubernetes Node is cordoned); it still serves the sessions it has.
	Draining bool
	Here     bool // this node
	// Live: it serves its sessions, as far as this node can tell. It renewed its Lease
	// within its duration and is not stopping. While this node itself cannot renew its
	// own Lease (the API server is down or cut off), a silent Lease says nothing of its
	// node: those with an address count as live, and a request finds out by trying.
	Live bool
}

// Cluster is this node's view of the cluster, and its own Lease kept renewed.
type Cluster struct {
	cfg    Config
	tag    string
	client *rest.RESTClient
	params runtime.ParameterCodec
	store  cache.Store
	log    *slog.Logger

	stopped       atomic.Bool
	draining      atomic.Bool
	nudged        atomic.Bool // renew at the next tick: what the Lease says changed
	publishedWarm atomic.Bool // what the Lease last said: warm sandboxes or none
	stopRenew     context.CancelFunc
	stopWatch     context.CancelFunc
	done          chan struct{} // closed when renewLoop has returned
	renewedAt     atomic.Int64  // unix nanoseconds of this node's last renewal that worked

	mu     sync.Mutex
	placed map[string]placed // sessions sent to a node since its Lease last changed

	heardMu sync.Mutex
	heard   map[string]time.Time // Lease name → when this node saw it last renewed

	movedMu sync.Mutex
	claims  map[string]map[string]int // Lease name → the sessions moved in that it lists
	sent    map[string]claim          // sessions this node moved away, until a Lease claims them

	cordon struct {
		off     bool // the Node may not be read: stop trying
		missing bool // there is no Node of the name (said once)
		seen    bool
		was     bool
	}
}

// claim is where a moved session is: the node (its Lease's name) and how many times it
// moved; the highest count is where it is now.
type claim struct {
	lease string
	moves int
	at    time.Time // of a move this node made (sent)
}

type placed struct {
	version string // of the member's Lease when counting began
	n       int
}

// Start registers this node (creating or taking over its Lease), starts watching the other
// nodes' Leases, and returns once the first list is in. It renews the Lease until Leave.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	scheme := runtime.NewScheme()
	if err := coordv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	kc := rest.CopyConfig(cfg.Kube)
	kc.GroupVersion = &coordv1.SchemeGroupVersion
	kc.APIPath = "/apis"
	kc.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if kc.UserAgent == "" {
		kc.UserAgent = "cellbox/" + cfg.Node
	}
	client, err := rest.RESTClientFor(kc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	c := &Cluster{cfg: cfg, tag: config.NodeTag(cfg.Node), client: client, params: runtime.NewParameterCodec(scheme),
		log: cfg.Logger, placed: map[string]placed{}, heard: map[string]time.Time{}, done: make(chan struct{}),
		claims: map[string]map[string]int{}, sent: map[string]claim{}}
	if err := c.renew(ctx, stateServing); err != nil {
		return nil, fmt.Errorf("register node %s: Lease %s/%s%s: %w", cfg.Node, cfg.Namespace, leasePrefix, cfg.Node, err)
	}
	selector := labelApp + "=" + appName
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			var list coordv1.LeaseList
			err := c.leases(c.client.Get()).VersionedParams(&opts, c.params).Do(ctx).Into(&list)
			return &list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			opts.Watch = true
			return c.leases(c.client.Get()).VersionedParams(&opts, c.params).Watch(ctx)
		},
	}
	store, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &coordv1.Lease{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { c.hear(nil, o) },
			UpdateFunc: func(old, o any) { c.hear(old, o) },
			DeleteFunc: func(o any) {
				if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				if l, ok := o.(*coordv1.Lease); ok {
					c.heardMu.Lock()
					delete(c.heard, l.Name)
					c.heardMu.Unlock()
					c.movedMu.Lock()
					delete(c.claims, l.Name)
					c.movedMu.Unlock()
				}
			},
		},
	})
	c.store = store
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	c.stopWatch = stopWatch
	go informer.RunWithContext(watchCtx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		stopWatch()
		return nil, fmt.Errorf("list the nodes' Leases in %s: %w", cfg.Namespace, context.Cause(ctx))
	}
	renewCtx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	c.stopRenew = stopRenew
	go c.renewLoop(renewCtx)
	if cfg.Cordoned != nil {
		go c.watchCordon(renewCtx)
	}
	return c, nil
}

// state is what this node's Lease says of it while it renews.
func (c *Cluster) state() string {
	if c.draining.Load() {
		return stateDraining
	}
	return stateServing
}

// Nudge renews this node's Lease within a quarter second: what it publishes changed (a
// session moved in or out).
func (c *Cluster) Nudge() { c.nudged.Store(true) }

// Drain says in this node's Lease that it is draining (true: other nodes send it no new
// sessions, and it moves its sessions away) or serving again (false).
func (c *Cluster) Drain(on bool) {
	if c.draining.Swap(on) != on {
		c.Nudge()
	}
}

// MovedTo notes that session id, which was here, is now on node after its moves-th move:
// requests for it go there at once, before that node's Lease says so.
func (c *Cluster) MovedTo(id, node string, moves int) {
	c.movedMu.Lock()
	c.sent[id] = claim{lease: leasePrefix + node, moves: moves, at: time.Now()}
	c.movedMu.Unlock()
}

// movedTo is the Lease of the node a moved session is on, as the Leases and this node's own
// moves say; false for a session that never moved (its id says its node).
func (c *Cluster) movedTo(id string) (string, bool) {
	c.movedMu.Lock()
	defer c.movedMu.Unlock()
	best, ok := c.sent[id]
	if ok && time.Since(best.at) > 3*c.cfg.LeaseDuration {
		// No Lease claimed it in that time: it ended where it went (or that node is
		// gone). By its id, then; the node it names answers.
		delete(c.sent, id)
		ok = false
	}
	for lease, ids := range c.claims {
		n, has := ids[id]
		// The most moves wins; between two Leases with as many (a move whose answer was
		// lost), the same one on every node.
		if has && (!ok || n > best.moves || n == best.moves && lease < best.lease) {
			best, ok = claim{lease: lease, moves: n}, true
		}
	}
	return best.lease, ok
}

// watchCordon reads this node's Kubernetes Node every third of the Lease duration and
// tells Cordoned when its spec.unschedulable changes.
func (c *Cluster) watchCordon(ctx context.Context) {
	t := time.NewTicker(c.cfg.LeaseDuration / 3)
	defer t.Stop()
	for !c.cordon.off {
		c.readCordon(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readCordon reads the Node once (see watchCordon).
func (c *Cluster) readCordon(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseDuration/3)
	defer cancel()
	raw, err := c.client.Get().AbsPath("/api/v1/nodes", c.cfg.Node).DoRaw(rctx)
	switch {
	case apierrors.IsForbidden(err):
		c.cordon.off = true
		c.log.Warn("this node may not read its Kubernetes Node (the manifests' ClusterRole cellbox-node-reader), so a cordon or drain of it will not move its sessions",
			"node", c.cfg.Node, "err", err)
		return
	case apierrors.IsNotFound(err):
		if !c.cordon.missing {
			c.cordon.missing = true
			c.log.Info("no Kubernetes Node of this node's name (--cluster-node): a cordon cannot be seen until there is one", "node", c.cfg.Node)
		}
		return
	}
	var node struct {
		Spec struct {
			Unschedulable bool `json:"unschedulable"`
		} `json:"spec"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &node)
	}
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("read this node's Kubernetes Node", "node", c.cfg.Node, "err", err)
		}
		return
	}
	on := node.Spec.Unschedulable
	if c.cordon.seen && on == c.cordon.was || !c.cordon.seen && !on {
		c.cordon.seen, c.cordon.was = true, on
		return
	}
	c.cordon.seen, c.cordon.was = true, on
	c.cfg.Cordoned(on)
}

// Leave says in this node's Lease that it is stopping (the other nodes then answer its
// sessions "unavailable, restarting" and send it no new ones) and renews it no more. It
// gives the API server 3 s at most: a shutdown must not wait on it. This node still watches
// the others (it may forward requests while it drains) until Close.
func (c *Cluster) Leave(ctx context.Context) error {
	if c.stopped.Swap(true) {
		return nil
	}
	c.stopRenew()
	<-c.done
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return c.renew(ctx, stateStopping)
}

// Close stops watching the other nodes.
func (c *Cluster) Close() { c.stopWatch() }

// Tag is this node's session id prefix.
func (c *Cluster) Tag() string { return c.tag }

// Name is this node's name.
func (c *Cluster) Name() string { return c.cfg.Node }

// leases is req on the Leases of the namespace.
func (c *Cluster) leases(req *rest.Request) *rest.Request {
	return req.Namespace(c.cfg.Namespace).Resource("leases")
}

// renewLoop renews the Lease every third of its duration, and at once (at most four times a
// second) when the node's warm sandboxes run out or come back, which decides where new
// sessions go: a new node becomes a choice when its first warm sandbox is ready. A renewal
// may take until the Lease would lapse (a loaded API server is slow, not down); one that
// fails is tried again a quarter second later, then at doubling waits up to the period.
func (c *Cluster) renewLoop(ctx context.Context) {
	defer close(c.done)
	period := c.cfg.LeaseDuration / 3
	tick := min(250*time.Millisecond, period)
	t := time.NewTicker(tick)
	defer t.Stop()
	next, backoff := time.Now().Add(period), tick
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		warm := c.cfg.Load().Warm > 0
		if time.Now().Before(next) && warm == c.publishedWarm.Load() && !c.nudged.Load() {
			continue
		}
		c.nudged.Store(false)
		lapse := time.Unix(0, c.renewedAt.Load()).Add(c.cfg.LeaseDuration)
		rctx, cancel := context.WithTimeout(ctx, max(period, time.Until(lapse)))
		err := c.renew(rctx, c.state())
		cancel()
		if err == nil {
			next, backoff = time.Now().Add(period), tick
			continue
		}
		next, backoff = time.Now().Add(backoff), min(2*backoff, period)
		if ctx.Err() == nil {
			c.log.Warn("renew this node's Lease; the other nodes take it for down once it expires", "node", c.cfg.Node, "err", err)
		}
	}
}

// renew writes this node's Lease: created if missing, else updated. The Lease as the watch
// last delivered it is updated, with no read; a conflict (the watch behind, or another
// writer in between) is retried once with the Lease read afresh.
func (c *Cluster) renew(ctx context.Context, state string) error {
	name := leasePrefix + c.cfg.Node
	for attempt := 0; ; attempt++ {
		var cur coordv1.Lease
		var err error
		if o, ok := c.watched(name); ok && attempt == 0 {
			o.DeepCopyInto(&cur)
		} else {
			err = c.leases(c.client.Get()).Name(name).Do(ctx).Into(&cur)
		}
		notFound := apierrors.IsNotFound(err)
		if err != nil && !notFound {
			return err
		}
		l := c.record(&cur, state)
		if notFound {
			l.Name = name
			l.Namespace = c.cfg.Namespace
			err = c.leases(c.client.Post()).Body(l).Do(ctx).Error()
		} else {
			err = c.leases(c.client.Put()).Name(name).Body(l).Do(ctx).Error()
		}
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt == 0 {
			continue
		}
		if err == nil {
			c.renewedAt.Store(time.Now().UnixNano())
		}
		return err
	}
}

// watched is the Lease named name as the watch last delivered it; none before the watch
// started (Start registers the node first).
func (c *Cluster) watched(name string) (*coordv1.Lease, bool) {
	if c.store == nil {
		return nil, false
	}
	o, ok, err := c.store.GetByKey(c.cfg.Namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	l, ok := o.(*coordv1.Lease)
	return l, ok
}

// record fills l (the Lease as read, or empty) with this node's state.
func (c *Cluster) record(l *coordv1.Lease, state string) *coordv1.Lease {
	load := c.cfg.Load()
	c.publishedWarm.Store(load.Warm > 0)
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[labelApp] = appName
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[annURL] = c.cfg.URL.String()
	l.Annotations[annTag] = c.tag
	l.Annotations[annSessions] = strconv.Itoa(load.Sessions)
	l.Annotations[annRoom] = strconv.Itoa(load.Room)
	l.Annotations[annWarm] = strconv.Itoa(load.Warm)
	l.Annotations[annState] = state
	delete(l.Annotations, annMovedIn)
	if c.cfg.MovedIn != nil && c.cfg.Secret != "" {
		if in := c.cfg.MovedIn(); len(in) > 0 {
			if len(in) > MaxMovedIn {
				c.log.Warn("more sessions moved in than a Lease lists; the rest are not found through other nodes", "sessions", len(in), "listed", MaxMovedIn)
				for id := range in {
					if len(in) <= MaxMovedIn {
						break
					}
					delete(in, id)
				}
			}
			signed := make(map[string]string, len(in))
			for id, n := range in {
				signed[id] = strconv.Itoa(n) + "." + claimMAC(c.cfg.Secret, c.cfg.Node, id, n)
			}
			data, _ := json.Marshal(signed)
			l.Annotations[annMovedIn] = string(data)
		}
	}
	now := metav1.NewMicroTime(time.Now())
	holder := holderIdentity(c.cfg.Node)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder {
		l.Spec.HolderIdentity = &holder
		l.Spec.AcquireTime = &now
	}
	secs := int32((c.cfg.LeaseDuration + time.Second - 1) / time.Second)
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.RenewTime = &now
	return l
}

// hear notes when a Lease was renewed, by this node's clock: now, for a renewal the watch
// delivers (old is the Lease before it); for a Lease first seen (old nil), the renewal time
// it holds, or now if that is ahead of this node's clock. A node whose clock is behind is
// not taken for down, nor one whose clock is ahead for up past its Lease.
func (c *Cluster) hear(old, o any) {
	l, ok := o.(*coordv1.Lease)
	if !ok {
		return
	}
	c.noteClaims(l)
	if l.Spec.RenewTime == nil {
		return
	}
	now := time.Now()
	at := now
	if prev, ok := old.(*coordv1.Lease); ok {
		if prev.Spec.RenewTime != nil && prev.Spec.RenewTime.Equal(l.Spec.RenewTime) {
			return // another change (a relist, or someone else's edit): not a renewal
		}
	} else if l.Spec.RenewTime.Time.Before(now) {
		at = l.Spec.RenewTime.Time
	}
	c.heardMu.Lock()
	c.heard[l.Name] = at
	c.heardMu.Unlock()
}

// claimMAC is the proof of a claim: that node has session id after its moves-th move,
// signed with the cluster's secret (128 bits of HMAC-SHA256, base64).
func claimMAC(secret, node, id string, moves int) string {
	h := hmac.New(sha256.New, []byte(secret))
	io.WriteString(h, "moved-in\n"+node+"\n"+id+"\n"+strconv.Itoa(moves))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
}

// noteClaims keeps the sessions moved in that a node's Lease lists, each with its proof
// (claimMAC) for that node. A Lease that is not a node's (member) claims nothing, and ids
// that are not session ids, or whose proof fails, are dropped.
func (c *Cluster) noteClaims(l *coordv1.Lease) {
	var in map[string]int
	if m, ok := c.member(l, time.Now()); ok && l.Annotations[annMovedIn] != "" && c.cfg.Secret != "" {
		var signed map[string]string
		if err := json.Unmarshal([]byte(l.Annotations[annMovedIn]), &signed); err != nil {
			c.log.Warn("a node's Lease lists moved sessions that do not parse; ignored", "lease", l.Name, "err", err)
		}
		in = make(map[string]int, len(signed))
		forged := 0
		for id, v := range signed {
			ns, mac, _ := strings.Cut(v, ".")
			n, err := strconv.Atoi(ns)
			switch {
			case err != nil || n < 1:
				forged++
			case !hmac.Equal([]byte(mac), []byte(claimMAC(c.cfg.Secret, m.Name, id, n))):
				forged++
			default:
				if _, ok := tagOf(id); ok {
					in[id] = n
				}
			}
		}
		if forged > 0 {
			c.log.Warn("a node's Lease lists moved sessions without the cluster's proof; ignored", "lease", l.Name, "claims", forged)
		}
	}
	c.movedMu.Lock()
	defer c.movedMu.Unlock()
	for id, n := range in {
		if s, ok := c.sent[id]; ok && n >= s.moves {
			delete(c.sent, id) // a Lease says where it is now
		}
	}
	if len(in) == 0 {
		delete(c.claims, l.Name)
		return
	}
	c.claims[l.Name] = in
}

// holderIdentity names this process: the pod (POD_NAME, set by the manifests), else the
// node and the process id.
func holderIdentity(node string) string {
	if p := os.Getenv("POD_NAME"); p != "" {
		return p
	}
	return node + "/" + strconv.Itoa(os.Getpid())
}

// Members lists the nodes of the cluster, this one included, by name.
func (c *Cluster) Members() []Member {
	var ms []Member
	now := time.Now()
	for _, o := range c.store.List() {
		if m, ok := c.member(o, now); ok {
			ms = append(ms, m)
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	return ms
}

// inTouch reports whether this node's watch delivered its own Lease's renewal within the
// Lease's duration: whether it can tell a silent node from its own trouble reaching the API
// server. Its own renewal, not just a write that worked: after an outage the watch may
// catch up later than the writes (client-go relists with a backoff), and until it has,
// every other node's Lease looks old here.
func (c *Cluster) inTouch(now time.Time) bool {
	c.heardMu.Lock()
	heard := c.heard[leasePrefix+c.cfg.Node]
	c.heardMu.Unlock()
	return now.Sub(heard) < c.cfg.LeaseDuration
}

// member reads a node's Lease. Not a node's: a Lease of another kind, or one whose tag is
// not its node name's (the tag is what session ids are routed by: a Lease cannot claim
// another node's sessions).
func (c *Cluster) member(o any, now time.Time) (Member, bool) {
	l, ok := o.(*coordv1.Lease)
	if !ok || !strings.HasPrefix(l.Name, leasePrefix) {
		return Member{}, false
	}
	m := Member{Name: strings.TrimPrefix(l.Name, leasePrefix), Tag: l.Annotations[annTag],
		Stopping: l.Annotations[annState] == stateStopping, Draining: l.Annotations[annState] == stateDraining}
	if m.Tag != config.NodeTag(m.Name) {
		return Member{}, false
	}
	m.Here = m.Name == c.cfg.Node
	if u, err := url.Parse(l.Annotations[annURL]); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		m.URL = u
	}
	m.Sessions, _ = strconv.Atoi(l.Annotations[annSessions])
	m.Room, _ = strconv.Atoi(l.Annotations[annRoom])
	m.Warm, _ = strconv.Atoi(l.Annotations[annWarm])
	c.heardMu.Lock()
	m.Renewed = c.heard[l.Name]
	c.heardMu.Unlock()
	if l.Spec.LeaseDurationSeconds != nil {
		m.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if m.Here { // what this node knows of itself is fresher than its Lease
		load := c.cfg.Load()
		m.Sessions, m.Room, m.Warm = load.Sessions, load.Room, load.Warm
		m.URL, m.Renewed, m.Duration = c.cfg.URL, now, c.cfg.LeaseDuration
		m.Stopping, m.Draining = c.stopped.Load(), c.draining.Load()
		m.Live = !m.Stopping
		return m, true
	}
	fresh := now.Sub(m.Renewed) < m.Duration
	m.Live = !m.Stopping && m.URL != nil && (fresh || !c.inTouch(now))
	return m, true
}

// Route says which node has session id: here (nil member, nil error) for this node's ids
// and for ids of no known node (they are not found here either); the node, when it is
// live; an error matching errdefs.ErrUnavailable, saying why, when it is not.
func (c *Cluster) Route(id string) (*Member, error) {
	tag, ok := tagOf(id)
	if !ok {
		return nil, nil
	}
	now := time.Now()
	if lease, moved := c.movedTo(id); moved {
		if o, ok := c.watched(lease); ok {
			if m, ok := c.member(o, now); ok {
				return c.routeTo(id, m, now)
			}
		}
		// The node it moved to left no Lease: by its id, then.
	}
	if tag == c.tag {
		return nil, nil
	}
	for _, o := range c.store.List() {
		if l, ok := o.(*coordv1.Lease); !ok || l.Annotations[annTag] != tag {
			continue // cheaply, before member reads the Lease: this runs for every request
		}
		if m, ok := c.member(o, now); ok {
			return c.routeTo(id, m, now)
		}
	}
	return nil, nil
}

// routeTo is Route's answer for session id on node m.
func (c *Cluster) routeTo(id string, m Member, now time.Time) (*Member, error) {
	switch {
	case m.Here:
		return nil, nil
	case m.Live:
		return &m, nil
	case m.URL == nil:
		return nil, fmt.Errorf("session %s is on cluster node %s, whose Lease has no address other nodes can reach: %w", id, m.Name, errdefs.ErrUnavailable)
	case m.Stopping && now.Sub(m.Renewed) < restartingFor:
		// A stopping node renews its Lease no more: its age is how long it has been away.
		return nil, fmt.Errorf("session %s is on cluster node %s, which is restarting: its sessions come back when it is up again; retry in a few seconds: %w", id, m.Name, errdefs.ErrUnavailable)
	case m.Stopping:
		return nil, fmt.Errorf("session %s is on cluster node %s, which stopped %s ago and has not come back: its sessions are unavailable until it does: %w",
			id, m.Name, now.Sub(m.Renewed).Round(time.Second), errdefs.ErrUnavailable)
	default:
		return nil, fmt.Errorf("session %s is on cluster node %s, which has not been heard from for %s: it is down or cut off, and its sessions are unavailable until it is back: %w",
			id, m.Name, now.Sub(m.Renewed).Round(time.Second), errdefs.ErrUnavailable)
	}
}

// restartingFor is how long a stopped node is said to be restarting; past it, it is said
// to have stopped and not come back (removed, or failing to start).
const restartingFor = 5 * time.Minute

// tagOf is the node tag a session id starts with: cluster ids are the tag's 8 hex digits and
// 24 more.
func tagOf(id string) (string, bool) {
	if len(id) != 32 {
		return "", false
	}
	return id[:8], true
}

// Place lists the live nodes that take new sessions, best first: those with a warm
// sandbox before those without (a session there starts in milliseconds, not a second), then
// the most room. Both less the sessions this node sent each since its Lease last said.
// Report the node that took one with Placed.
func (c *Cluster) Place() []Member {
	now := time.Now()
	var ms []Member
	c.mu.Lock()
	for _, o := range c.store.List() {
		m, ok := c.member(o, now)
		if !ok || !m.Live || m.Draining {
			continue
		}
		if p, ok := c.placed[m.Name]; ok && !m.Here {
			if p.version == o.(*coordv1.Lease).ResourceVersion {
				m.Room -= p.n
				m.Warm = max(m.Warm-p.n, 0)
			} else {
				delete(c.placed, m.Name)
			}
		}
		if m.Room > 0 {
			ms = append(ms, m)
		}
	}
	c.mu.Unlock()
	sort.Slice(ms, func(i, j int) bool {
		if wi, wj := ms[i].Warm > 0, ms[j].Warm > 0; wi != wj {
			return wi
		}
		if ms[i].Room != ms[j].Room {
			return ms[i].Room > ms[j].Room
		}
		return ms[i].Name < ms[j].Name
	})
	return ms
}

// Placed counts a session that node took, until its Lease next says how many it has.
func (c *Cluster) Placed(node string) {
	if node == c.cfg.Node {
		return
	}
	l, ok := c.watched(leasePrefix + node)
	if !ok {
		return
	}
	version := l.ResourceVersion
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.placed[node]
	if p.version != version {
		p = placed{version: version}
	}
	p.n++
	c.placed[node] = p
}

package move

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/cluster"
	"github.com/cellbox/cellbox/internal/session"
)

// sendTimeout bounds one session's move: its checkpoint and workspace over the cluster's
// network, and its resume on the other node.
const sendTimeout = 10 * time.Minute

// retryEvery is how often a drain tries again the sessions it could not move yet (a cell
// was running, or no node had room).
const retryEvery = 5 * time.Second

// Cluster is what a drain needs of the cluster: where sessions may go, and to say where
// they went.
type Cluster interface {
	Name() string
	Place() []cluster.Member
	Drain(on bool)
	MovedTo(id, node string, moves int)
	Nudge()
}

// Drainer moves this node's sessions to other nodes while the node is cordoned.
type Drainer struct {
	M       *session.Manager
	C       Cluster
	Secret  string // the cluster's shared secret; "": sessions cannot move, the node only takes no new ones
	Client  *http.Client
	Log     *slog.Logger
	mu      sync.Mutex
	stop    context.CancelFunc
	stopped chan struct{}
}

// Cordoned is the cluster's callback (cluster.Config.Cordoned): on, the node drains (takes
// no new sessions, and moves its sessions away, retrying those it cannot move yet until
// none is left or the node is uncordoned); off, it serves again.
func (d *Drainer) Cordoned(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stop != nil {
		d.stop()
		<-d.stopped
		d.stop = nil
	}
	d.C.Drain(on)
	if !on {
		d.Log.Info("this node's Kubernetes Node is uncordoned: it takes new sessions again")
		return
	}
	if d.Secret == "" {
		d.Log.Warn("this node's Kubernetes Node is cordoned: it takes no new sessions, but cannot move its sessions to other nodes without the cluster's secret (CELLBOX_CLUSTER_SECRET)")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.stop, d.stopped = cancel, make(chan struct{})
	go d.run(ctx, d.stopped)
}

// Close stops a drain under way (the node is stopping); sessions not moved stay here.
func (d *Drainer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stop != nil {
		d.stop()
		<-d.stopped
		d.stop = nil
	}
}

// maxTries is how many times a drain tries to move one session (each a round apart)
// before it leaves it where it is, said in the log.
const maxTries = 5

// run moves the sessions, one at a time, until none that can move is left.
func (d *Drainer) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	d.Log.Info("this node's Kubernetes Node is cordoned: moving its sessions to other nodes")
	warned := map[string]bool{}
	tries := map[string]int{}
	sticky := map[string]cluster.Member{} // where a move's answer was lost: it may be there
	for {
		all, stuck := d.M.Movable()
		for _, id := range stuck {
			if !warned[id] {
				warned[id] = true
				d.Log.Warn("a session that cannot be paused stays on this drained node (under runc only sessions created with idle_action \"pause\" can be)", "session_id", id)
			}
		}
		var ids []string
		for _, id := range all {
			if tries[id] < maxTries {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			d.Log.Info("drain done: no session left that can move", "left", len(all)+len(stuck))
			return
		}
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			err := d.moveOne(ctx, id, sticky)
			if err == nil {
				continue
			}
			if tries[id]++; tries[id] == maxTries {
				d.Log.Error("a session could not be moved off this drained node; it stays here", "session_id", id, "tries", maxTries, "err", err)
			} else {
				d.Log.Warn("a session could not be moved off this drained node yet; retrying", "session_id", id, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryEvery):
		}
	}
}

// errLost is a move whose answer did not come (the connection failed, or time ran out):
// the other node may have the session.
type errLost struct{ err error }

func (e errLost) Error() string { return "no answer: " + e.err.Error() }

// moveOne moves session id to the node with the most room that takes it; after a move to
// a node whose answer was lost (sticky), to that node only, which then answers at once
// if it has it.
func (d *Drainer) moveOne(ctx context.Context, id string, sticky map[string]cluster.Member) error {
	var targets []cluster.Member
	if m, ok := sticky[id]; ok {
		targets = []cluster.Member{m}
	} else {
		for _, m := range d.C.Place() {
			if !m.Here {
				targets = append(targets, m)
			}
		}
	}
	if len(targets) == 0 {
		return fmt.Errorf("no other node takes sessions now")
	}
	o, err := d.M.MoveOut(ctx, id)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range targets {
		err := d.send(ctx, m, o)
		if err == nil {
			delete(sticky, id)
			d.C.MovedTo(id, m.Name, o.Moves)
			o.Finish(ctx, true, m.Name)
			d.C.Nudge()
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
		var lost errLost
		if errors.As(err, &lost) {
			sticky[id] = m
			break
		}
	}
	o.Finish(ctx, false, "")
	return fmt.Errorf("no node took it: %w", errors.Join(errs...))
}

// nonce is 16 random bytes in hex.
func nonce() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// send PUTs o to node m; nil once m has it, resumed there.
func (d *Drainer) send(ctx context.Context, m cluster.Member, o *session.Outgoing) error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(write(pw, o)) }()
	u := *m.URL
	u.Path = Path + o.ID // what the signature covers, as the other node reads it
	if o.WasPaused {
		u.RawQuery = url.Values{"paused": {"true"}}.Encode()
	}
	req, err := NewRequest(ctx, d.Secret, m.Name, &u, pr, time.Now(), nonce())
	if err != nil {
		pr.Close()
		return err
	}
	req.Header.Set("Cellbox-Forwarded-By", d.C.Name())
	res, err := d.Client.Do(req)
	pr.Close()
	if err != nil {
		return errLost{err}
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		return nil
	}
	var e api.ErrorBody
	json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&e)
	return fmt.Errorf("%s: %s", res.Status, e.Error.Message)
}

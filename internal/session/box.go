package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/egress"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/sandbox"
)

// boxSpec is what a box is started with.
type boxSpec struct {
	image  string // see sandbox.Spec.Image; "": the backend's own root
	limits api.Limits
	env    map[string]string
	// checkpointable: the sandbox is made so that it can be checkpointed (pause.go), where
	// that costs something (runc: no template kernel); where every sandbox can be (gVisor)
	// it stays false.
	checkpointable bool
	// language: the kernel, beside Python's, that a session of this box will use first: a
	// language pool's boxes have it running (see kernelLanguage).
	language string
}

// poolKey names a warm pool: an image's, or the default image's for a language.
type poolKey struct{ image, language string }

// kernelLanguage is the kernel a session of lang uses beside Python's ("" for Python).
func kernelLanguage(lang string) string {
	if lang == api.LanguagePython {
		return ""
	}
	return api.KernelLanguage(lang)
}

// box is a started sandbox whose guest has been dialed and configured: a ready kernel.
type box struct {
	boxSpec
	id    string // also the workspace id
	ws    string // the workspace's host folder
	sb    sandbox.Sandbox
	guest *guestproto.Client
	// trusted is the certificate authority the sandbox trusts (see Manager.trust).
	trusted atomic.Pointer[egress.CA]
}

// newSessionID is a new session's id: in a cluster, the node's tag and then random hex (see
// config.SessionIDPrefix), so any node can tell where a session is from its id alone.
func (m *Manager) newSessionID() string {
	return m.cfg.SessionIDPrefix() + newID()
}

func newID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// startBox creates a workspace (unless ws names an existing one), a sandbox of spec, dials
// its guest and starts its kernel. On failure everything it made is undone.
func (m *Manager) startBox(ctx context.Context, id string, spec boxSpec, ws string) (_ *box, err error) {
	start := time.Now()
	// Each phase's time, for the metric and the debug log: where a cold start goes.
	last, phases := start, make([]any, 0, 8)
	phase := func(name string) {
		now := time.Now()
		m.metrics.startPhase.WithLabelValues(name).Observe(now.Sub(last).Seconds())
		phases = append(phases, name, now.Sub(last).Round(10*time.Microsecond))
		last = now
	}
	reuse := ws != ""
	if !reuse {
		if ws, err = m.store.Create(ctx, id, spec.limits.DiskMB); err != nil {
			return nil, fmt.Errorf("create workspace: %w", err)
		}
		phase("workspace")
	}
	defer func() {
		if err != nil && !reuse {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			m.store.Remove(cctx, id)
		}
	}()
	sb, err := m.backend.Create(ctx, sandbox.Spec{
		ID:        id,
		Workspace: ws,
		Image:     spec.image,
		Limits:    m.sandboxLimits(spec),
		// No session outlives its idle timeout, so a sandbox unattached for the longest one
		// has no session left: its server is gone for good.
		OrphanExit:     m.cfg.MaxIdleTimeout,
		Checkpointable: spec.checkpointable,
	})
	if err != nil {
		return nil, fmt.Errorf("start sandbox: %w", err)
	}
	phase("runtime")
	stop := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		sb.Stop(cctx)
	}
	g, err := guestproto.Dial(ctx, sb.Conn())
	if err != nil {
		stop()
		return nil, err
	}
	phase("connect")
	m.serveEgress(g, id)
	err = g.Configure(ctx, m.guestConfig(spec))
	if err != nil {
		g.Close()
		stop()
		return nil, err
	}
	phase("configure")
	m.metrics.sandboxStart.Observe(time.Since(start).Seconds())
	m.log.Debug("sandbox started", append([]any{"sandbox_id", id, "took", time.Since(start).Round(10 * time.Microsecond)}, phases...)...)
	return &box{boxSpec: spec, id: id, ws: ws, sb: sb, guest: g}, nil
}

// sandboxLimits are the sandbox's limits for a box of spec.
func (m *Manager) sandboxLimits(spec boxSpec) sandbox.Limits {
	return sandbox.Limits{MemoryMB: spec.limits.MemoryMB, CPUs: spec.limits.CPUs, Pids: spec.limits.Pids, TmpMB: m.cfg.TmpMB}
}

// guestConfig is the guest's configuration for a box of spec.
func (m *Manager) guestConfig(spec boxSpec) guestproto.Config {
	return guestproto.Config{
		Python:          m.cfg.Python,
		Preimport:       m.cfg.Preimport,
		Env:             spec.env,
		MaxOutputBytes:  m.cfg.MaxOutputBytes,
		MaxRichBytes:    m.cfg.MaxRichBytes,
		DefaultTimeoutS: m.cfg.ExecTimeout.Seconds(),
		InterruptGraceS: m.cfg.InterruptGrace.Seconds(),
		MemoryMB:        spec.limits.MemoryMB,
		Image:           spec.image,
	}
}

// adapt makes warm box b fit spec, which it was not started with: the sandbox takes spec's
// memory, CPU and process limits (sandbox.Updater), and the guest its env, which a kernel
// that has run no cell takes without a restart. spec has b's image and disk quota (the
// caller takes b from that image's pool only for the default quota, which cannot change).
// An error means a new box instead; changed then says whether b was changed already (else
// it may go back to its pool).
func (m *Manager) adapt(ctx context.Context, b *box, spec boxSpec) (changed bool, err error) {
	if spec.limits != b.limits {
		u, ok := b.sb.(sandbox.Updater)
		if !ok {
			return false, fmt.Errorf("the backend cannot change limits: %w", errors.ErrUnsupported)
		}
		if err := u.Update(ctx, m.sandboxLimits(spec)); err != nil {
			return !errors.Is(err, errors.ErrUnsupported), err
		}
	}
	if !maps.Equal(spec.env, b.env) || spec.limits.MemoryMB != b.limits.MemoryMB {
		if err := b.guest.Configure(ctx, m.guestConfig(spec)); err != nil {
			return true, err
		}
	}
	b.boxSpec = spec
	return false, nil
}

// stop ends the sandbox; the workspace stays where it is. A paused box has none.
func (b *box) stop(ctx context.Context) error {
	if b.guest != nil {
		b.guest.Close()
	}
	if b.sb == nil {
		return nil
	}
	return b.sb.Stop(ctx)
}

// alive reports whether the sandbox and its guest still run.
func (b *box) alive() bool {
	var guestDone <-chan struct{}
	if b.guest != nil {
		guestDone = b.guest.Done()
	}
	select {
	case <-b.sb.Done():
		return false
	case <-guestDone:
		return false
	default:
		return true
	}
}

// obtain returns a ready box: from its image's warm pool, given the request's limits and
// env (adapt) when they are not the pool's, else a new one.
func (m *Manager) obtain(ctx context.Context, spec boxSpec) (*box, error) {
	// A warm sandbox has the default disk quota, which cannot change. A session of another
	// language takes one with its kernel running, else one of its image's.
	if spec.limits.DiskMB == m.defaults().DiskMB && spec.checkpointable == m.poolCheckpointable() {
		keys := []poolKey{{spec.image, ""}}
		if spec.language != "" {
			keys = append([]poolKey{{spec.image, spec.language}}, keys...)
		}
		pooled := false
		for _, k := range keys {
			p := m.pools[k]
			if p == nil {
				continue
			}
			pooled = true
			if b := m.fromPool(ctx, p, spec); b != nil {
				m.metrics.poolHits.Inc()
				return b, nil
			}
		}
		if pooled {
			m.metrics.poolMisses.Inc()
		}
	}
	release, err := m.starts.acquire(ctx, true)
	if err != nil {
		return nil, err
	}
	defer release()
	return m.startBox(ctx, m.newSessionID(), spec, "")
}

// fromPool takes a box of p and makes it fit spec; nil: none was ready, or it could not.
func (m *Manager) fromPool(ctx context.Context, p *pool, spec boxSpec) *box {
	b := p.take()
	if b == nil {
		return nil
	}
	changed, err := m.adapt(ctx, b, spec)
	if err == nil {
		return b
	}
	m.log.Debug("a warm sandbox could not take the request's limits or env: starting a new one", "sandbox_id", b.id, "error", err)
	if changed || !p.put(b) { // unchanged, it waits for the next request
		go p.discard(b)
	}
	return nil
}

// warmLanguage starts the kernel of b's language in it, for a language pool: quiet cells
// that show a value, as most first cells do. Three: R's byte-code compiler compiles the
// runner's functions over their first calls (a pooled R session's first cell took 54 ms
// after one warm cell, 3.5 ms after three).
func (m *Manager) warmLanguage(ctx context.Context, b *box) error {
	code := "1"
	if b.language == api.LanguageBash {
		code = "true"
	}
	var res *api.ExecuteResult
	var err error
	for range 3 {
		res, err = b.guest.ExecuteWith(ctx, api.ExecuteRequest{Language: b.language, Code: code, TimeoutS: 60}, guestproto.ExecuteOptions{Quiet: true})
		if err != nil {
			break
		}
	}
	if err == nil && res.Status != api.StatusOK {
		err = fmt.Errorf("the %s kernel did not start: %s %s: %w", b.language, res.Status, res.Message, errdefs.ErrUnavailable)
	}
	return err
}

// discard stops a box and releases (keep) or removes its workspace.
func (m *Manager) discard(ctx context.Context, b *box, keep bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	err := b.stop(ctx)
	if err != nil {
		m.log.Warn("stop sandbox", "sandbox_id", b.id, "err", err)
	}
	var werr error
	if keep {
		werr = m.store.Release(ctx, b.id)
	} else {
		werr = m.store.Remove(ctx, b.id)
	}
	if werr != nil {
		m.log.Warn("release workspace", "session_id", b.id, "err", werr)
	}
	return errors.Join(err, werr)
}

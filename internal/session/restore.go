package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/egress"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// Sessions outliving the server process: every live session has a record (record.go). At
// start, recover decides from the records which sessions live on, and tidies everything
// else an earlier process left; restore then attaches to their sandboxes, or replaces a
// sandbox that is gone.

// replacedNotice is told on a replaced session's next execution.
const replacedNotice = "[cellbox: the server restarted and this session's sandbox was gone, so it was replaced: variables are lost, files in /mnt/data are kept]\n"

// restoreTimeout bounds the restore of one session.
const restoreTimeout = 2 * time.Minute

// recover reads the records of an earlier process and returns those of the sessions that
// live on. The others end: those past their deadline or idle too long, or all of them
// when sessions end with the server (m.keep off). Then it cleans up: every sandbox and
// workspace mount the earlier process left, but for those of the sessions that live on, is
// stopped and released.
func (m *Manager) recover(ctx context.Context) ([]record, error) {
	recs, bad, err := m.records.load()
	if err != nil {
		return nil, err
	}
	for _, err := range bad {
		m.log.Warn("session records", "err", err)
	}
	now := time.Now()
	var live []record
	keep := map[string]bool{}
	for _, r := range recs {
		idle := time.Duration(r.IdleTimeoutS * float64(time.Second))
		switch {
		case !m.keep:
			m.log.Info("ending a session of an earlier server process (sessions end with the server here)", "session_id", r.ID, "tenant", r.Tenant)
		case r.ExpiresAt != nil && !now.Before(*r.ExpiresAt):
			m.log.Info("ending a session whose lifetime ran out while the server was down", "session_id", r.ID, "tenant", r.Tenant,
				"expired_at", r.ExpiresAt.UTC().Format(time.RFC3339))
		case r.PausedAt != nil && now.Sub(*r.PausedAt) > m.cfg.PausedRetention:
			m.log.Info("ending a session paused for longer than --paused-retention", "session_id", r.ID, "tenant", r.Tenant,
				"paused_at", r.PausedAt.UTC().Format(time.RFC3339))
		case r.PausedAt == nil && !r.Busy && now.Sub(r.LastActiveAt) > idle && r.IdleAction != api.IdleActionPause:
			m.log.Info("ending a session whose idle time ran out while the server was down", "session_id", r.ID, "tenant", r.Tenant,
				"idle_since", r.LastActiveAt.UTC().Format(time.RFC3339))
		default:
			if r.Busy { // its run ended with the server that ran it: active until then
				r.Busy, r.LastActiveAt = false, now
			}
			live = append(live, r)
			keep[r.ID] = true
			continue
		}
		if err := m.records.remove(r.ID); err != nil {
			m.log.Warn("remove session record", "session_id", r.ID, "err", err)
		}
	}
	paused := map[string]bool{}
	for _, r := range live {
		paused[r.ID] = r.PausedAt != nil
	}
	// A live session's checkpoint is kept even when its record does not say paused: a
	// server killed between a pause's dump and its record's write left it (restoreOne).
	kept := func(id string) bool { return keep[id] }
	m.sweepCheckpoints(kept)
	// A paused session has no sandbox: one of its id runs only when a resume was cut short
	// (its record still says paused), and is stopped; the checkpoint stays.
	running := func(id string) bool { return keep[id] && !paused[id] }
	// Workspaces first: a sandbox left running keeps its own mount of its workspace.
	if err := m.store.Recover(kept); err != nil {
		return nil, err
	}
	if err := m.backend.Cleanup(ctx, running); err != nil {
		return nil, fmt.Errorf("clean up sandboxes of an earlier run: %w", err)
	}
	return live, nil
}

// restore brings back the sessions of recs, a few at a time. Each attaches to its
// sandbox; or, when the sandbox is gone, gets a new one on its workspace (told on its next
// execution); or, when that fails too, ends. A session whose sandbox the backend could
// not tell about (its runtime failed) is left as it is, for the next start. A signal that
// arrives meanwhile does not cut a restore short: every session gets restoreTimeout.
func (m *Manager) restore(ctx context.Context, recs []record) {
	if len(recs) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	var mu sync.Mutex
	count := map[string]int{}
	for _, r := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
			defer cancel()
			how := m.restoreOne(ctx, r)
			mu.Lock()
			count[how]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	m.log.Info("sessions of the earlier server process restored",
		"attached", count["attached"], "replaced", count["replaced"], "ended", count["ended"], "left", count["left"], "paused", count["paused"], "resumed", count["resumed"])
}

// restoreOne restores the session of r and says how: attached, resumed (from the checkpoint
// of a pause cut short), replaced, ended or left.
func (m *Manager) restoreOne(ctx context.Context, r record) string {
	s := sessionOf(r)
	if r.PausedAt != nil {
		return m.restorePaused(ctx, s, r)
	}
	how := "attached"
	ws, err := m.store.Dir(r.ID)
	var b *box
	if err == nil {
		b, err = m.attachBox(ctx, r, ws)
	}
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		m.log.Error("could not tell whether a session's sandbox still runs; left as it is for the next start",
			"session_id", r.ID, "tenant", r.Tenant, "err", err)
		return "left"
	}
	dir := m.checkpointDir(r.ID)
	if m.cfg.StateDir != "" && exists(dir) {
		if err != nil {
			// Its sandbox was written to disk and stopped, and the server was killed
			// before the record said paused: it comes back from that checkpoint.
			if b, err = m.unpause(ctx, r, ws, dir); err == nil {
				how = "resumed"
			}
		} else {
			os.RemoveAll(dir) // its sandbox runs: a pause that failed
		}
	}
	if err != nil {
		m.log.Warn("a session's sandbox is gone; starting a new one on its workspace (variables are lost, files kept)",
			"session_id", r.ID, "tenant", r.Tenant, "err", err)
		how = "replaced"
		s.notice, s.execCount = replacedNotice, 0
		spec := r.spec()
		if spec.image == "" {
			// A session on the host's root (or from before images) gets this server's
			// default: on an image server, a new sandbox never runs on the host's root.
			spec.image = m.defaultImage
		}
		// After a reboot of the host, its workspace image is checked and mounted again.
		if err = m.store.Remount(ctx, r.ID); err == nil {
			b, err = m.startBox(ctx, r.ID, spec, ws)
		}
	}
	if err != nil {
		return m.endUnrestored(ctx, r, err)
	}
	s.box = b
	m.restoreTools(s, r)
	if how == "replaced" { // the new kernel has none of them
		if msg := m.newKernel(ctx, s, b); msg != "" {
			s.notice += "[cellbox: " + msg + "]\n"
		}
	}
	m.restoreNetwork(ctx, s, r)
	s.slot = m.adm.hold(s.tenant)
	m.mu.Lock()
	m.sessions[s.id] = s
	m.mu.Unlock()
	m.save(s)
	m.log.Info("session restored", "session_id", s.id, "tenant", s.tenant, "how", how)
	return how
}

// exists reports whether path is there.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// unpause restores the sandbox of r (whose record does not say paused) from the
// checkpoint in dir, which it then removes; an error says why it did not.
func (m *Manager) unpause(ctx context.Context, r record, ws, dir string) (*box, error) {
	defer os.RemoveAll(dir)
	b := &box{boxSpec: r.spec(), id: r.ID, ws: ws}
	sb, g, err := m.restoreBox(ctx, b, r.ID, ws, dir) // its workspace remounted first
	if err != nil {
		m.log.Warn("a session whose pause was cut short by the server's end did not come back from its checkpoint",
			"session_id", r.ID, "err", err)
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
	}
	b.sb, b.guest = sb, g
	m.log.Info("a session whose pause was cut short by the server's end came back from its checkpoint", "session_id", r.ID)
	return b, nil
}

// endUnrestored ends the session of r, which could not be restored (err says why): its
// record goes, its workspace is released (kept for --retention), and "ended" is returned.
func (m *Manager) endUnrestored(ctx context.Context, r record, err error) string {
	m.log.Error("could not restore a session; it ended (its files are kept)", "session_id", r.ID, "tenant", r.Tenant, "err", err)
	m.records.remove(r.ID)
	if err := m.store.Release(ctx, r.ID); err != nil {
		m.log.Warn("release workspace", "session_id", r.ID, "err", err)
	}
	m.events.publish(Event{Kind: SessionEnded, SessionID: r.ID, Tenant: r.Tenant, Reason: EndFailed})
	return "ended"
}

// attachBox attaches to the sandbox of r and dials its guest, whose kernel is configured
// already. A guest that does not answer its hello is stopped: its sandbox is lost.
func (m *Manager) attachBox(ctx context.Context, r record, ws string) (*box, error) {
	sb, err := m.backend.Attach(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	g, err := guestproto.Dial(ctx, sb.Conn())
	if err == nil && g.Hello().Root != sb.GuestWorkspace() {
		g.Close()
		err = fmt.Errorf("the guest serves %q, not the workspace", g.Hello().Root)
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		sb.Stop(cctx)
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
	}
	m.serveEgress(g, r.ID)
	return &box{boxSpec: r.spec(), id: r.ID, ws: ws, sb: sb, guest: g}, nil
}

// restoreNetwork gives a restored session its policy and authority again. A policy the
// operator's settings no longer allow becomes "none", and the session is told so.
func (m *Manager) restoreNetwork(ctx context.Context, s *Session, r record) {
	if r.CA != "" {
		ca, err := egress.ParseCA(r.CA)
		if err != nil {
			m.log.Warn("a session's certificate authority does not parse; it gets a new one", "session_id", s.id, "err", err)
		} else {
			s.ca = ca
		}
	}
	p, err := m.net.policy(s.tenant, r.Network)
	if err == nil {
		s.network = r.Network
	} else {
		m.log.Warn("a restored session's network policy is no longer allowed; it has none now", "session_id", s.id, "err", err)
		p, _ = egress.Compile(api.Network{Egress: api.EgressNone}, nil)
		s.network = &api.Network{Egress: api.EgressNone}
		s.notice = "the server's settings no longer allow this session's network policy: it has no network access now"
	}
	if err := m.applyNetwork(ctx, s, p); err != nil {
		m.log.Warn("a restored session's network policy could not be applied; it has none now", "session_id", s.id, "err", err)
		none, _ := egress.Compile(api.Network{Egress: api.EgressNone}, nil)
		s.policy = none
		m.net.gw.Set(s.id, s.tenant, none, m.net.limitsFor(s.tenant), nil)
	}
}

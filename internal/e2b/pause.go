package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// Pause, connect (which resumes), the deprecated resume, and fork: a paused sandbox is a
// paused session (Manager.Pause), which any call resumes, sandbox traffic included; a fork
// is Manager.Fork.
//
// E2B's timeout of a sandbox created with lifecycle: {onTimeout: "pause"} (autoPause) is
// the session's idle timeout, with idle_action pause and no lifetime: cellbox pauses a
// session after a time without activity, not at a deadline, and a lifetime would end it.
// Every other sandbox's timeout is its lifetime (control.go).

// pausesOnTimeout says whether s's E2B timeout pauses it: it has no lifetime, and its idle
// timeout pauses it.
func pausesOnTimeout(s api.Session) bool {
	return s.ExpiresAt == nil && s.IdleAction == api.IdleActionPause
}

// lifecycle is E2B's SandboxLifecycle, in a sandbox's detail.
type lifecycle struct {
	OnTimeout string `json:"onTimeout"` // "kill" or "pause"
	// AutoResume: traffic to the paused sandbox resumes it, which on cellbox any call does.
	AutoResume bool `json:"autoResume"`
}

func lifecycleOf(s api.Session) lifecycle {
	l := lifecycle{OnTimeout: "kill", AutoResume: true}
	if pausesOnTimeout(s) {
		l.OnTimeout = "pause"
	}
	return l
}

// errKeepsMemory refuses E2B's pause that keeps only the files (memory: false): cellbox's
// checkpoint holds the sandbox's memory, and E2B refuses too where it cannot do the other.
var errKeepsMemory = fmt.Errorf("cellbox pauses a sandbox with its memory (its variables and processes) and resumes it so: "+
	"a pause that keeps only the files (keepMemory, autoPauseMemory or memory false; onResume 'reboot') is not supported: %w",
	errdefs.ErrInvalidArgument)

// refused is a pause (or fork) the session refused, with what an E2B user can do about it.
// E2B's SDK reads any 409 of a pause as "already paused" (pause() returns false), so a
// refusal is a 400, which it throws with this message.
func refused(s *api.Session, err error) error {
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		return err
	}
	msg := err.Error()
	if s.IdleAction != api.IdleActionPause {
		msg += " (through E2B's SDK, a sandbox created with lifecycle: {onTimeout: 'pause'} is pausable)"
	}
	return errdefs.New(api.CodeInvalidArgument, msg)
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Memory *bool `json:"memory"`
	}
	if err := h.decode(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if req.Memory != nil && !*req.Memory {
		h.writeError(w, r, errKeepsMemory)
		return
	}
	id := r.PathValue("id")
	s, err := h.m.Get(r.Context(), id)
	switch {
	case err != nil:
	case s.State == api.StatePaused: // 409, as E2B answers: the SDK's pause() returns false
		err = fmt.Errorf("sandbox %s is already paused: %w", id, errdefs.ErrFailedPrecondition)
	default:
		if _, err = h.m.Pause(r.Context(), id); err != nil {
			err = refused(s, err)
		}
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect answers with the sandbox, resuming it if it is paused: 200 when it ran, 201 when
// it was resumed, as E2B answers. A timeout extends a lifetime, never shortens it.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request) { h.wake(w, r, false) }

// resume is E2B's deprecated resume: connect, but 409 for a sandbox that runs, and a
// timeout replaces the lifetime.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request) { h.wake(w, r, true) }

func (h *Handler) wake(w http.ResponseWriter, r *http.Request, legacy bool) {
	var req struct {
		Timeout *int  `json:"timeout"`
		Memory  *bool `json:"memory"`
	}
	if err := h.decode(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	id := r.PathValue("id")
	s, err := h.m.Get(r.Context(), id)
	paused := err == nil && s.State == api.StatePaused
	switch {
	case err != nil:
	case legacy && !paused:
		err = fmt.Errorf("sandbox %s is already running: %w", id, errdefs.ErrFailedPrecondition)
	case paused && req.Memory != nil && !*req.Memory:
		err = errKeepsMemory
	case req.Timeout != nil:
		// A sandbox that pauses on timeout keeps its idle timeout (setTimeout).
		var life time.Duration
		life, err = timeoutSeconds(req.Timeout, 0)
		if err == nil && !pausesOnTimeout(*s) && (legacy || s.ExpiresAt == nil || time.Now().Add(life).After(*s.ExpiresAt)) {
			_, err = h.m.SetLifetime(r.Context(), id, life)
		}
	}
	if err == nil && paused {
		_, err = h.m.Resume(r.Context(), id)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if paused {
		status = http.StatusCreated
	}
	writeJSON(w, status, h.sandboxOf(r, id, h.templateOf(s.Image)))
}

// forked is E2B's SandboxForkResult. E2B reports each fork's failure in its entry;
// cellbox makes them all or none, so every entry holds a sandbox.
type forked struct {
	Sandbox sandbox `json:"sandbox"`
}

// fork makes count sandboxes from one, each with a copy of its memory and files, all or
// none: a failure is the answer's status, not an entry of its list. A fork's timeout is
// as its sandbox's: a lifetime (the request's timeout, or the default), or, for a sandbox
// that pauses on timeout, the same idle timeout.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int `json:"timeout"`
		Count   *int `json:"count"`
	}
	if err := h.decode(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	life, err := timeoutSeconds(req.Timeout, defaultTimeout)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	count := 1
	if req.Count != nil {
		if count = *req.Count; count < 1 {
			h.writeError(w, r, fmt.Errorf("count must be at least 1: %w", errdefs.ErrInvalidArgument))
			return
		}
	}
	id := r.PathValue("id")
	s, err := h.m.Get(r.Context(), id)
	var res *api.ForkResult
	if err == nil {
		if res, err = h.m.Fork(r.Context(), id, api.ForkRequest{Count: count}); err != nil {
			err = refused(s, err)
		}
	}
	if err == nil && !pausesOnTimeout(*s) {
		err = h.setLifetimes(r.Context(), res.Sessions, life)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := make([]forked, len(res.Sessions))
	for i, f := range res.Sessions {
		out[i].Sandbox = h.sandboxOf(r, f.ID, h.templateOf(f.Image))
	}
	writeJSON(w, http.StatusCreated, out)
}

// setLifetimes gives the forks their lifetime (a fork has none of its own); if one cannot
// have it, none is kept.
func (h *Handler) setLifetimes(ctx context.Context, forks []api.Session, life time.Duration) error {
	for _, f := range forks {
		if _, err := h.m.SetLifetime(ctx, f.ID, life); err != nil {
			for _, f := range forks {
				h.m.Delete(context.WithoutCancel(ctx), f.ID)
			}
			return err
		}
	}
	return nil
}

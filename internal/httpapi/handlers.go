package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/cluster"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/move"
	"github.com/cellbox/cellbox/internal/session"
)

func (s *server) createSession(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSessionRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	sess, err := s.m.Create(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, sess)
}

func (s *server) listSessions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.SessionList{Sessions: s.m.List(r.Context())})
}

func (s *server) getSession(w http.ResponseWriter, r *http.Request) {
	sess, err := s.m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sess)
}

func (s *server) updateSession(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateSessionRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.LifetimeS == 0 && req.Network == nil {
		s.writeError(w, r, fmt.Errorf("nothing to change: give lifetime_s (positive) or network: %w", errdefs.ErrInvalidArgument))
		return
	}
	var sess *api.Session
	var err error
	if req.Network != nil {
		// The policy first: a refused one changes nothing, the lifetime included.
		if sess, err = s.m.SetNetwork(r.Context(), r.PathValue("id"), *req.Network); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if req.LifetimeS != 0 {
		d := time.Duration(req.LifetimeS) * time.Second
		if req.LifetimeS > int(math.MaxInt64/time.Second) {
			d = math.MaxInt64 // past any maximum, and not wrapped around to one within it
		}
		if sess, err = s.m.SetLifetime(r.Context(), r.PathValue("id"), d); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, sess)
}

func (s *server) egressLog(w http.ResponseWriter, r *http.Request) {
	l, err := s.m.Egress(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *server) deleteSession(w http.ResponseWriter, r *http.Request) {
	if err := s.m.Delete(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) interrupt(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.m.Interrupt(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.getSession(w, r)
}

func (s *server) restart(w http.ResponseWriter, r *http.Request) {
	if err := s.m.Restart(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.getSession(w, r)
}

func (s *server) pause(w http.ResponseWriter, r *http.Request) {
	sess, err := s.m.Pause(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sess)
}

func (s *server) resume(w http.ResponseWriter, r *http.Request) {
	sess, err := s.m.Resume(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sess)
}

func (s *server) fork(w http.ResponseWriter, r *http.Request) {
	var req api.ForkRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.m.Fork(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *server) execute(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.ExecuteRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := s.m.Get(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.run(w, r, func(onOutput func(api.Output)) (*api.ExecuteResult, error) {
		res, err := s.m.ExecuteInteractive(r.Context(), id, req, session.ExecuteHooks{OnOutput: onOutput, Trace: traceOf(r).guestTrace()})
		if err == nil && req.Links {
			s.addLinks(r, id, res.Files)
		}
		return res, err
	})
}

func (s *server) oneShot(w http.ResponseWriter, r *http.Request) {
	var req api.OneShotRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Links && !s.m.HasArtifacts() {
		s.writeError(w, r, fmt.Errorf("links: a one-shot's sandbox, and its files, are gone when it ends, and this server keeps no artifacts store (--artifacts-store) to keep them: "+
			"run the code in a session (POST /v1/sessions, then its execute with links), whose files live as long as it does: %w", errdefs.ErrFailedPrecondition))
		return
	}
	s.run(w, r, func(onOutput func(api.Output)) (*api.ExecuteResult, error) {
		return s.m.OneShot(r.Context(), req, onOutput)
	})
}

// run answers an execution (see answer): an "output" event per output as it happens.
func (s *server) run(w http.ResponseWriter, r *http.Request, exec func(onOutput func(api.Output)) (*api.ExecuteResult, error)) {
	answer(s, w, r, func(send func(string, any)) (*api.ExecuteResult, error) {
		if send == nil {
			return exec(nil)
		}
		return exec(func(o api.Output) { send("output", o) })
	})
}

// answer answers a call as one JSON result, or as Server-Sent Events when the client accepts
// text/event-stream: the events work sends as it goes (send is nil without SSE), then one
// "result" (or "error") event, then the end of the response. A request that asks for a
// trace gets its Server-Timing in the header, or the event stream's trailer.
func answer[T any](s *server, w http.ResponseWriter, r *http.Request, work func(send func(event string, v any)) (T, error)) {
	tr := traceOf(r)
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		res, err := work(nil)
		if tr != nil {
			w.Header().Set("Server-Timing", tr.serverTiming())
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	if tr != nil {
		w.Header().Set("Trailer", "Server-Timing")
	}
	ev := startSSE(w)
	defer ev.stop()
	res, err := work(ev.send)
	if tr != nil {
		w.Header().Set("Server-Timing", tr.serverTiming())
	}
	if err != nil {
		ev.send("error", api.ErrorBody{Error: s.errorDetail(r, err)})
		return
	}
	ev.send("result", res)
}

// sseKeepalive is how often a comment line keeps an idle event stream open through proxies.
const sseKeepalive = 15 * time.Second

type sseWriter struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	rc   *http.ResponseController
	done chan struct{}
}

func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	e := &sseWriter{w: w, rc: http.NewResponseController(w), done: make(chan struct{})}
	e.rc.Flush()
	go func() {
		t := time.NewTicker(sseKeepalive)
		defer t.Stop()
		for {
			select {
			case <-e.done:
				return
			case <-t.C:
				e.mu.Lock()
				io.WriteString(e.w, ": keepalive\n\n")
				e.rc.Flush()
				e.mu.Unlock()
			}
		}
	}()
	return e
}

// send writes one event; errors (a gone client) are ignored: the request's context ends
// and the execution is interrupted.
func (e *sseWriter) send(event string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", event, b)
	e.rc.Flush()
}

func (e *sseWriter) stop() { close(e.done) }

func (s *server) command(w http.ResponseWriter, r *http.Request) {
	var req api.CommandRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.m.Command(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Links {
		s.addLinks(r, r.PathValue("id"), res.Files)
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *server) deleteContext(w http.ResponseWriter, r *http.Request) {
	if err := s.m.DeleteContext(r.Context(), r.PathValue("id"), r.PathValue("name")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) listFiles(w http.ResponseWriter, r *http.Request) {
	list, err := s.m.ListFiles(r.Context(), r.PathValue("id"), r.URL.Query().Get("path"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) putFile(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > s.opts.MaxUploadBytes {
		s.writeError(w, r, fmt.Errorf("file is %d bytes; this server takes at most %d: %w", r.ContentLength, s.opts.MaxUploadBytes, errdefs.ErrTooLarge))
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxUploadBytes)
	info, err := s.m.PutFile(r.Context(), r.PathValue("id"), r.PathValue("path"), body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

func (s *server) getFile(w http.ResponseWriter, r *http.Request) {
	info, rc, err := s.m.GetFile(r.Context(), r.PathValue("id"), r.PathValue("path"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer rc.Close()
	h := w.Header()
	ctype := mime.TypeByExtension(path.Ext(info.Name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.FormatInt(info.Size, 10))
	// Files are written by untrusted code: never let a browser run them on our origin.
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	disp := mime.FormatMediaType("attachment", map[string]string{"filename": info.Name})
	if disp == "" {
		disp = "attachment"
	}
	h.Set("Content-Disposition", disp)
	h.Set("Last-Modified", info.ModTime.UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, rc); err != nil {
		// Headers are gone; the short body tells the client. Abort the connection so a
		// truncated file is never taken for a whole one.
		s.log.Warn("download interrupted", "session_id", r.PathValue("id"), "err", err)
		panic(http.ErrAbortHandler)
	}
}

func (s *server) deleteFile(w http.ResponseWriter, r *http.Request) {
	if err := s.m.DeleteFile(r.Context(), r.PathValue("id"), r.PathValue("path")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// moveIn takes a session another node of the cluster moves here (package move): the
// request carries the cluster's secret, not an API key.
func (s *server) moveIn(w http.ResponseWriter, r *http.Request) {
	body, ok := s.opts.Moves.Check(r, time.Now())
	if !ok {
		s.writeError(w, r, fmt.Errorf("moving a session here needs a signature with the cluster's secret, for this node, fresh and not used before: %w", errdefs.ErrUnauthenticated))
		return
	}
	if len(s.m.MovedIn()) >= cluster.MaxMovedIn {
		s.writeError(w, r, fmt.Errorf("this node holds as many moved sessions as its Lease can list: %w", errdefs.ErrResourceExhausted))
		return
	}
	sess, err := move.Receive(r.Context(), s.m, r.PathValue("id"), body, r.URL.Query().Get("paused") == "true", s.opts.Tenants)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.opts.Cluster.Nudge()
	writeJSON(w, http.StatusOK, sess)
}

// Package jupyter serves Jupyter's kernel API (the Jupyter Server REST API's kernels and
// kernelspecs, and each kernel's websocket) over the session manager, as Jupyter Kernel
// Gateway does: jupyter_server and Notebook with --gateway-url, nbclient and papermill
// through the gateway kernel manager, and any client of the kernel websocket run their
// kernels in cellbox sessions. A kernel is a session; its id is the session's id sealed
// (ids.go), so that ids seen elsewhere (file links, E2B hosts) open no kernel.
//
// httpapi mounts it at /api/kernels and /api/kernelspecs as a front door: it claims those
// requests, reads Jupyter's token (Authorization: token KEY, or ?token=KEY), and answers
// refusals in Jupyter's error shape. docs/jupyter.md says what is served and how.
//
// Not for: notebooks as documents (package notebook), cellbox's own REST API (package
// httpapi), or what a session does (package session).
package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/errdefs/errhttp"
	"github.com/cellbox/cellbox/internal/session"
)

// Sessions is what the gateway uses of the session manager (*session.Manager).
type Sessions interface {
	Create(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error)
	Get(ctx context.Context, id string) (*api.Session, error)
	List(ctx context.Context) []api.Session
	Delete(ctx context.Context, id string) error
	Execute(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error)
	ExecuteInteractive(ctx context.Context, id string, req api.ExecuteRequest, hooks session.ExecuteHooks) (*api.ExecuteResult, error)
	Interrupt(ctx context.Context, id string) error
	Restart(ctx context.Context, id string) error
	Complete(ctx context.Context, id string, req api.CompleteRequest) (*api.Completion, error)
	Inspect(ctx context.Context, id string, req api.InspectRequest) (*api.Inspection, error)
	IsComplete(ctx context.Context, id, code string) (*api.IsComplete, error)
	// Owner finds the tenant of a kernel opened by its id alone (Options.OpenChannels);
	// Subscribe closes a kernel's websockets when its session ends.
	Owner(id string) (tenant string, ok bool)
	Subscribe(f func(session.Event)) (stop func())
}

var _ Sessions = (*session.Manager)(nil)

// Options configures the gateway.
type Options struct {
	// IDKey seals session ids into kernel ids (16, 24 or 32 bytes; see ids.go). Every
	// node of a cluster must have the same.
	IDKey []byte
	// OpenChannels lets a kernel's websocket come without a key: the kernel id, which only
	// its tenant is ever shown, is then the credential. For jupyter_server 1.x's gateway
	// kernel manager (nbclient, papermill), which opens the websocket without the token it
	// sends on REST calls. Off: the websocket needs a key as every other request.
	OpenChannels bool
	// Version is the server's, shown in kernel_info_reply and GET /api.
	Version string
	// CellTimeout bounds one cell (--max-exec-timeout): Jupyter's clients name no timeout.
	CellTimeout time.Duration
	// Elsewhere returns the caller's sessions on a cluster's other nodes, for the kernel
	// list (httpapi.Elsewhere); nil outside a cluster.
	Elsewhere func(context.Context) []api.Session
	// MaxMessageBytes caps one message a client sends on a kernel's websocket
	// (--max-body-bytes); 0: 8 MiB.
	MaxMessageBytes int64
	Logger          *slog.Logger
}

// Handler serves the gateway. It is an httpapi.FrontDoor.
type Handler struct {
	s    Sessions
	opts Options
	log  *slog.Logger
	ids  *idCodec
	mux  *http.ServeMux

	mu      sync.Mutex
	kernels map[string]*kernel // by session id, while it has a websocket or work queued
	stop    func()
	langs   map[string]langInfo // by tenant, image and language: what kernel_info_reply says of the language
}

// New returns the gateway's handler.
func New(s Sessions, opts Options) (*Handler, error) {
	ids, err := newIDCodec(opts.IDKey)
	if err != nil {
		return nil, err
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 8 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{s: s, opts: opts, log: opts.Logger, ids: ids, kernels: map[string]*kernel{}, langs: map[string]langInfo{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api", h.apiVersion)
	mux.HandleFunc("GET /api/{$}", h.apiVersion)
	mux.HandleFunc("GET /api/kernelspecs", h.kernelspecs)
	mux.HandleFunc("GET /api/kernelspecs/{name}", h.kernelspec)
	mux.HandleFunc("GET /api/kernels", h.listKernels)
	mux.HandleFunc("POST /api/kernels", h.startKernel)
	mux.HandleFunc("GET /api/kernels/{id}", h.getKernel)
	mux.HandleFunc("DELETE /api/kernels/{id}", h.deleteKernel)
	mux.HandleFunc("POST /api/kernels/{id}/interrupt", h.interruptKernel)
	mux.HandleFunc("POST /api/kernels/{id}/restart", h.restartKernel)
	mux.HandleFunc("GET /api/kernels/{id}/channels", h.channels)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.WriteError(w, r, errdefs.New(api.CodeNotFound, "no route "+r.Method+" "+r.URL.Path+" in Jupyter's kernel API"))
	})
	h.mux = mux
	h.stop = s.Subscribe(h.onEvent)
	return h, nil
}

// Close stops following session events and closes every kernel's websockets (the kernels
// live on: their clients may connect again).
func (h *Handler) Close() {
	h.stop()
	h.mu.Lock()
	ks := make([]*kernel, 0, len(h.kernels))
	for _, k := range h.kernels {
		ks = append(ks, k)
	}
	h.mu.Unlock()
	for _, k := range ks {
		k.closeAll(websocket.StatusGoingAway, "the server is restarting; the kernel lives on")
	}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Claims claims Jupyter's kernel API. Every request needs a key (httpapi checks it, read by
// PresentedKey), but a kernel's websocket that presents none when OpenChannels is set: the
// channels handler then goes by the kernel id alone.
func (h *Handler) Claims(r *http.Request) (claimed, needsKey bool) {
	p := r.URL.Path
	if p != "/api" && p != "/api/" && !strings.HasPrefix(p, "/api/kernels") && !strings.HasPrefix(p, "/api/kernelspecs") {
		return false, false
	}
	if h.opts.OpenChannels && isChannels(r) {
		if _, ok := h.PresentedKey(r); !ok {
			return true, false
		}
	}
	return true, true
}

func isChannels(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/kernels/") && strings.HasSuffix(r.URL.Path, "/channels")
}

// PresentedKey is the API key of a Jupyter request: Authorization: token KEY (Jupyter's
// scheme) or Bearer KEY, X-API-Key: KEY, or the query's token=KEY (which a browser's
// websocket can send, having no headers of its own). httpapi reads it so (KeyReader).
func (h *Handler) PresentedKey(r *http.Request) (string, bool) {
	if a := r.Header.Get("Authorization"); a != "" {
		f := strings.Fields(a)
		if len(f) != 2 || !strings.EqualFold(f[0], "token") && !strings.EqualFold(f[0], "bearer") {
			return "", false
		}
		return f[1], true
	}
	if k := r.Header.Get("X-API-Key"); k != "" {
		return k, true
	}
	if k := r.URL.Query().Get("token"); k != "" {
		return k, true
	}
	return "", false
}

// WriteError answers err in Jupyter's error shape: {"message": ..., "reason": ...}, with
// the status of its code; an internal error's text is logged, not shown.
func (h *Handler) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = fmt.Errorf("request body is larger than this server's limit of %d bytes: %w", mbe.Limit, errdefs.ErrTooLarge)
	}
	status := errhttp.Status(errdefs.Code(err))
	msg := errdefs.Public(h.log, err, "method", r.Method, "path", r.URL.Path)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `token realm="cellbox"`)
	}
	writeJSON(w, status, map[string]string{"message": msg, "reason": http.StatusText(status)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// SessionOf is the session id of a kernel request's kernel (its path's id), for routing in
// a cluster; false for a request on no kernel or an id that is none of cellbox's.
func (h *Handler) SessionOf(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/kernels/")
	if !ok {
		return "", false
	}
	kid, _, _ := strings.Cut(rest, "/")
	return h.ids.session(kid)
}

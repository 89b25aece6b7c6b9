// Package openai serves OpenAI's Responses API (with its code_interpreter tool, for any
// model the server has), its Containers API and a minimal Files API over the session
// manager, so that programs written against OpenAI's SDKs run code and create, fill and
// read code interpreter containers on cellbox with their base URL changed: a container is a cellbox
// session ("cntr_" + its id), its files are the workspace's files under /mnt/data, and
// /v1/files keeps uploads per tenant in the state dir for containers' file_ids.
//
// httpapi mounts it at /v1/containers and /v1/files, behind the REST API's API-key check:
// requests arrive with their tenant in the context (session.Tenant). docs/openai.md says
// what maps to what; OpenAI's own API reference is the contract.
//
// Not for: the model APIs themselves (package llm), cellbox's own agent (package agent), cellbox's own
// REST API (package httpapi), or anything that decides what a session does (package session).
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/errdefs/errhttp"
	"github.com/cellbox/cellbox/internal/session"
)

// Sessions is what the handler uses of the session manager (*session.Manager).
type Sessions interface {
	Create(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error)
	Get(ctx context.Context, id string) (*api.Session, error)
	List(ctx context.Context) []api.Session
	Delete(ctx context.Context, id string) error
	PutFile(ctx context.Context, id, path string, r io.Reader) (*api.FileInfo, error)
	GetFile(ctx context.Context, id, path string) (*api.FileInfo, io.ReadCloser, error)
	ListFiles(ctx context.Context, id, path string) (*api.FileList, error)
	DeleteFile(ctx context.Context, id, path string) error
	// Owner and Subscribe keep the record of uploaded container files in step with the
	// sessions: a record whose session ended is removed.
	Owner(id string) (tenant string, ok bool)
	Subscribe(f func(session.Event)) (stop func())
}

var _ Sessions = (*session.Manager)(nil)

// Options configures the handler.
type Options struct {
	// StateDir holds the uploads of /v1/files (openai/files/) and which container files
	// were uploaded rather than written by code (openai/containers/).
	StateDir       string
	MaxBodyBytes   int64 // a JSON request body
	MaxUploadBytes int64 // one uploaded file
	// MaxFiles and MaxFileBytes cap what one tenant keeps in /v1/files; 0: the defaults
	// (DefaultMaxFiles, DefaultMaxFileBytes).
	MaxFiles     int
	MaxFileBytes int64
	// MaxMemoryMB and MaxIdleTimeout are the server's bounds (--max-memory-mb,
	// --max-idle-timeout), checked here to word the refusal in OpenAI's terms.
	MaxMemoryMB    int
	MaxIdleTimeout time.Duration
	Logger         *slog.Logger
	// Responses configures POST /v1/responses (responses.go).
	Responses ResponsesOptions

	// In a cluster (cluster.go): IDPrefix starts the hex of the response and file ids this
	// node makes (config.SessionIDPrefix, the node's tag); Elsewhere returns the caller's
	// sessions on the other nodes for the containers list (httpapi.Elsewhere), and
	// ElsewhereFiles their files for the files list (httpapi.ElsewhereItems); OpenOnNode
	// GETs a path on the node that keeps an id, with the request's key, or returns nil, nil
	// when that is this node (httpapi.OpenOnNode). Zero for a single server.
	IDPrefix string
	// BaseURL is where the URLs of an answer (a response's images) point, for the request
	// answered (httpapi.BaseURL, with --public-url); nil: http:// and the request's Host.
	BaseURL        func(*http.Request) string
	Elsewhere      func(context.Context) []api.Session
	ElsewhereFiles func(context.Context) []json.RawMessage
	OpenOnNode     func(r *http.Request, id, path string) (*http.Response, error)
}

// The per-tenant caps of /v1/files when Options leaves them 0.
const (
	DefaultMaxFiles     = 1000
	DefaultMaxFileBytes = 4 << 30
)

// Handler serves /v1/containers and /v1/files.
type Handler struct {
	m     Sessions
	opts  Options
	log   *slog.Logger
	mux   *http.ServeMux
	files *fileStore
	srcs  *sources
	stop  func()

	ropts  ResponsesOptions
	stored responses // of /v1/responses, per tenant
}

// New returns the handler; Close stops its subscription to the sessions' events.
func New(m Sessions, opts Options) (*Handler, error) {
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = DefaultMaxFiles
	}
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = DefaultMaxFileBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	files, err := newFileStore(opts.StateDir, opts.MaxFiles, opts.MaxFileBytes)
	if err != nil {
		return nil, err
	}
	srcs, err := newSources(opts.StateDir, m, opts.Logger)
	if err != nil {
		return nil, err
	}
	h := &Handler{m: m, opts: opts, log: opts.Logger, files: files, srcs: srcs, ropts: opts.Responses}
	h.stop = m.Subscribe(func(e session.Event) {
		if e.Kind == session.SessionEnded && !e.Detached {
			srcs.forget(e.SessionID)
		}
	})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/containers", h.createContainer)
	mux.HandleFunc("GET /v1/containers", h.listContainers)
	mux.HandleFunc("GET /v1/containers/{id}", h.getContainer)
	mux.HandleFunc("DELETE /v1/containers/{id}", h.deleteContainer)
	mux.HandleFunc("POST /v1/containers/{id}/files", h.createContainerFile)
	mux.HandleFunc("GET /v1/containers/{id}/files", h.listContainerFiles)
	mux.HandleFunc("GET /v1/containers/{id}/files/{file}", h.getContainerFile)
	mux.HandleFunc("DELETE /v1/containers/{id}/files/{file}", h.deleteContainerFile)
	mux.HandleFunc("GET /v1/containers/{id}/files/{file}/content", h.containerFileContent)
	mux.HandleFunc("POST /v1/files", h.createFile)
	mux.HandleFunc("GET /v1/files", h.listFiles)
	mux.HandleFunc("GET /v1/files/{id}", h.getFile)
	mux.HandleFunc("DELETE /v1/files/{id}", h.deleteFile)
	mux.HandleFunc("GET /v1/files/{id}/content", h.fileContent)
	mux.HandleFunc("POST /v1/responses", h.createResponse)
	mux.HandleFunc("GET /v1/responses/{id}", h.getResponse)
	mux.HandleFunc("DELETE /v1/responses/{id}", h.deleteResponse)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, fmt.Errorf("%s %s is not part of cellbox's OpenAI-compatible API (Responses, Containers, Files: docs/openai.md lists what is): %w",
			r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
	h.mux = mux
	return h, nil
}

// Close stops following the sessions' events.
func (h *Handler) Close() { h.stop() }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// errorBody is OpenAI's error shape.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// paramError names the request field an error is about, for OpenAI's error.param.
type paramError struct {
	param string
	err   error
}

func (e *paramError) Error() string { return e.err.Error() }
func (e *paramError) Unwrap() error { return e.err }

// invalid is an invalid_argument error about param.
func invalid(param, format string, args ...any) error {
	return &paramError{param, fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)}
}

// writeError answers with OpenAI's error shape: type is OpenAI's class of the status, code
// cellbox's code of the error (api.Code*).
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	st := errhttp.ToHTTP(err)
	var msg string
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		st, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than this server's limit of %d bytes", mbe.Limit)
	} else {
		msg = errdefs.Public(h.log, err, "method", r.Method, "path", r.URL.Path)
	}
	typ := "invalid_request_error"
	switch {
	case st == http.StatusUnauthorized:
		typ = "authentication_error"
	case st == http.StatusForbidden:
		typ = "permission_error"
	case st == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case st >= 500:
		typ = "server_error"
	}
	code := errhttp.Code(st)
	d := errorDetail{Message: msg, Type: typ, Code: &code}
	var pe *paramError
	if errors.As(err, &pe) {
		d.Param = &pe.param
	}
	writeJSON(w, st, errorBody{d})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encode response","type":"server_error","param":null,"code":"internal"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// decode reads a JSON body of at most MaxBodyBytes into v. Unknown fields are ignored, as
// OpenAI's SDKs may send fields newer than this server.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes)
	err := json.NewDecoder(r.Body).Decode(v)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		return fmt.Errorf("the request needs a JSON body: %w", errdefs.ErrInvalidArgument)
	case errors.As(err, new(*http.MaxBytesError)):
		return err
	}
	return fmt.Errorf("the request body is not valid JSON for this call: %s: %w", err.Error(), errdefs.ErrInvalidArgument)
}

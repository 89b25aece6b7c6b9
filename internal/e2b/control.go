package e2b

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
)

// templates are E2B's default template ids, the SDKs' defaults: each is a session on the
// server's default image. "base" is the e2b package's default; cellbox's sandboxes always
// have the interpreter. Any other template id names an image (cellbox image build NAME).
var templates = []string{"code-interpreter-v1", "base"}

// imageOf is the image a template id asks for: "" (the server's default) for E2B's
// default templates.
func imageOf(templateID string) string {
	if templateID == "" || slices.Contains(templates, templateID) {
		return ""
	}
	return templateID
}

// templateOf is the template id that a session on img reports: E2B's default for the
// server's default image, else the image's name.
func (h *Handler) templateOf(img string) string {
	if img == h.m.DefaultImage() {
		return templates[0]
	}
	return img
}

// defaultTimeout is E2B's sandbox timeout when create gives none.
const defaultTimeout = 300

func (h *Handler) controlRoutes() http.Handler {
	mux := http.NewServeMux()
	for _, v := range []string{"", "/v2"} {
		mux.HandleFunc("POST "+v+"/sandboxes", h.create)
		mux.HandleFunc("GET "+v+"/sandboxes", h.list)
		mux.HandleFunc("POST "+v+"/sandboxes/{id}/connect", h.connect)
	}
	mux.HandleFunc("GET /sandboxes/{id}", h.info)
	mux.HandleFunc("DELETE /sandboxes/{id}", h.kill)
	mux.HandleFunc("POST /sandboxes/{id}/timeout", h.setTimeout)
	mux.HandleFunc("POST /sandboxes/{id}/pause", h.pause)
	mux.HandleFunc("POST /sandboxes/{id}/resume", h.resume)
	mux.HandleFunc("POST /sandboxes/{id}/fork", h.fork)
	mux.HandleFunc("PUT /sandboxes/{id}/network", h.setNetwork)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, fmt.Errorf("%s %s is not part of cellbox's E2B-compatible API (docs/e2b.md lists what is): %w",
			r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
	return mux
}

// writeError answers with the error shape of E2B's control plane and envd's REST calls,
// {code, message}.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	st := status(err)
	writeJSON(w, st, map[string]any{"code": st, "message": h.message(r, err)})
}

// sandbox is E2B's answer to create and connect.
type sandbox struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listed is E2B's ListedSandbox; detail its SandboxDetail.
type listed struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
}

type detail struct {
	listed
	EnvdAccessToken string    `json:"envdAccessToken"`
	Domain          *string   `json:"domain"`
	Lifecycle       lifecycle `json:"lifecycle"`
	// AllowInternetAccess and Network say what the session's policy is, in E2B's terms
	// (networkView).
	AllowInternetAccess *bool          `json:"allowInternetAccess,omitempty"`
	Network             *networkConfig `json:"network,omitempty"`
}

// clientID fills E2B's deprecated, still required field.
const clientID = "cellbox"

func (h *Handler) sandboxOf(r *http.Request, id, template string) sandbox {
	tok := h.token(session.Tenant(r.Context()), id)
	return sandbox{SandboxID: id, TemplateID: template, Alias: template, ClientID: clientID,
		EnvdVersion: envdVersion, EnvdAccessToken: tok, TrafficAccessToken: tok}
}

// listedOf is s as E2B lists it. Its end is when it pauses or ends: its lifetime's
// deadline, or its idle timeout's; a paused sandbox's, when it was paused (as E2B says).
func (h *Handler) listedOf(s api.Session) listed {
	end := s.LastActiveAt.Add(time.Duration(s.IdleTimeoutS) * time.Second)
	state := "running"
	if s.State == api.StatePaused {
		state = "paused"
	}
	switch {
	case s.PausedAt != nil:
		end = *s.PausedAt
	case s.ExpiresAt != nil:
		end = *s.ExpiresAt
	}
	md := s.Metadata
	if md == nil {
		md = map[string]string{}
	}
	template := h.templateOf(s.Image)
	return listed{SandboxID: s.ID, TemplateID: template, Alias: template, ClientID: clientID,
		StartedAt: s.CreatedAt, EndAt: end.UTC(), CPUCount: int(math.Ceil(s.Limits.CPUs)),
		MemoryMB: s.Limits.MemoryMB, DiskSizeMB: s.Limits.DiskMB, Metadata: md, State: state,
		EnvdVersion: envdVersion}
}

// timeoutSeconds checks an E2B timeout (seconds); nil gives def.
func timeoutSeconds(t *int, def int) (time.Duration, error) {
	if t == nil {
		return time.Duration(def) * time.Second, nil
	}
	if *t <= 0 {
		return 0, fmt.Errorf("timeout must be at least 1 second, not %d: %w", *t, errdefs.ErrInvalidArgument)
	}
	return time.Duration(*t) * time.Second, nil
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TemplateID          string            `json:"templateID"`
		Timeout             *int              `json:"timeout"`
		Metadata            map[string]string `json:"metadata"`
		EnvVars             map[string]string `json:"envVars"`
		AllowInternetAccess *bool             `json:"allow_internet_access"`
		Network             *networkConfig    `json:"network"`
		// AutoPause: the timeout pauses the sandbox instead of ending it
		// (lifecycle: {onTimeout: "pause"}); AutoPauseMemory false asks for a pause that
		// keeps only the files, which cellbox does not make.
		AutoPause       *bool `json:"autoPause"`
		AutoPauseMemory *bool `json:"autoPauseMemory"`
	}
	if err := h.decode(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	timeout, err := timeoutSeconds(req.Timeout, defaultTimeout)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	// E2B's timeout is the session's lifetime, which ends it; for a sandbox whose timeout
	// pauses it, it is the idle timeout instead, with no lifetime (pause.go).
	life, idle, action := timeout, h.opts.MaxIdleTimeout, ""
	if req.AutoPause != nil && *req.AutoPause {
		if req.AutoPauseMemory != nil && !*req.AutoPauseMemory {
			h.writeError(w, r, errKeepsMemory)
			return
		}
		if timeout > h.opts.MaxIdleTimeout {
			h.writeError(w, r, fmt.Errorf("timeout %d s: a sandbox that pauses on timeout pauses after that long without activity, "+
				"at most this server's longest idle timeout, %d s (--max-idle-timeout): %w",
				int(timeout.Seconds()), int(h.opts.MaxIdleTimeout.Seconds()), errdefs.ErrInvalidArgument))
			return
		}
		life, idle, action = 0, timeout, api.IdleActionPause
	}
	// E2B's SDKs send allow_internet_access: true unless told otherwise, so true alone is
	// no request for more than the server gives by default (--egress): an operator's "none
	// unless asked" holds for E2B's clients too. An explicit network, or false, is taken.
	allowInternet := req.AllowInternetAccess
	if allowInternet != nil && *allowInternet && req.Network == nil {
		allowInternet = nil
	}
	network, err := policyOf(allowInternet, req.Network)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	s, err := h.m.Create(r.Context(), api.CreateSessionRequest{
		Env:          req.EnvVars,
		Metadata:     req.Metadata,
		LifetimeS:    int(life.Seconds()),
		IdleTimeoutS: int(idle.Seconds()),
		IdleAction:   action,
		Image:        imageOf(req.TemplateID),
		Network:      network,
	})
	template := cmp.Or(req.TemplateID, templates[0]) // what was asked, echoed
	if errors.Is(err, errdefs.ErrNotFound) {
		// Nothing else of a create is not found: the template's image is not built.
		err = fmt.Errorf("template '%.100s' not found: %w", template, err)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.sandboxOf(r, s.ID, template))
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request) {
	s, err := h.m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	d := detail{listed: h.listedOf(*s), EnvdAccessToken: h.token(session.Tenant(r.Context()), s.ID), Lifecycle: lifecycleOf(*s)}
	d.AllowInternetAccess, d.Network = networkView(s.Network)
	writeJSON(w, http.StatusOK, d)
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := h.decode(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if req.Timeout == nil {
		h.writeError(w, r, fmt.Errorf("give the sandbox's new timeout in seconds: {\"timeout\": 300}: %w", errdefs.ErrInvalidArgument))
		return
	}
	life, err := timeoutSeconds(req.Timeout, 0)
	var s *api.Session
	if err == nil {
		s, err = h.m.Get(r.Context(), r.PathValue("id"))
	}
	// A sandbox whose timeout pauses it keeps its idle timeout: the session API has no
	// call to change one, and a lifetime would end the sandbox (docs/e2b.md).
	if err == nil && !pausesOnTimeout(*s) {
		_, err = h.m.SetLifetime(r.Context(), s.ID, life)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.m.Delete(r.Context(), id); err != nil {
		h.writeError(w, r, err)
		return
	}
	h.forget(id)
	w.WriteHeader(http.StatusNoContent)
}

// maxPage caps one page of the list.
const maxPage = 1000

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filter, err := metadataFilter(q.Get("metadata"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > maxPage {
			h.writeError(w, r, fmt.Errorf("limit must be a number from 1 to %d: %w", maxPage, errdefs.ErrInvalidArgument))
			return
		}
	}
	after, err := parseCursor(q.Get("nextToken"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	states, err := stateFilter(q.Get("state"), strings.HasPrefix(r.URL.Path, "/v2/"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := []listed{}
	all := h.m.List(r.Context()) // in a cluster, the other nodes' too (httpapi gathers them)
	if h.opts.Elsewhere != nil {
		all = append(all, h.opts.Elsewhere(r.Context())...)
	}
	sort.Slice(all, func(i, j int) bool { return cursorOf(all[i]).before(cursorOf(all[j])) })
	var last cursor
	for _, s := range all {
		ls := h.listedOf(s)
		if after != nil && !after.before(cursorOf(s)) || !matches(s.Metadata, filter) || !states[ls.State] {
			continue
		}
		if len(out) == limit {
			w.Header().Set("X-Next-Token", last.String())
			break
		}
		out = append(out, ls)
		last = cursorOf(s)
	}
	writeJSON(w, http.StatusOK, out)
}

// stateFilter parses the list's state filter, E2B's states comma-joined. Without one, v2
// lists running and paused sandboxes, the deprecated GET /sandboxes running ones only, as
// on E2B.
func stateFilter(v string, v2 bool) (map[string]bool, error) {
	if v == "" {
		return map[string]bool{"running": true, "paused": v2}, nil
	}
	out := map[string]bool{}
	for _, st := range strings.Split(v, ",") {
		if st != "running" && st != "paused" {
			return nil, fmt.Errorf("state %.50q: want running or paused, or both comma-separated: %w", st, errdefs.ErrInvalidArgument)
		}
		out[st] = true
	}
	return out, nil
}

// cursor is a position in the list, ordered by creation, then id.
type cursor struct {
	created time.Time
	id      string
}

func cursorOf(s api.Session) cursor { return cursor{s.CreatedAt, s.ID} }

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.created.UnixNano(), 10) + ":" + c.id))
}

func parseCursor(tok string) (*cursor, error) {
	if tok == "" {
		return nil, nil
	}
	bad := fmt.Errorf("nextToken is not one this server gave: %w", errdefs.ErrInvalidArgument)
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, bad
	}
	ns, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil {
		return nil, bad
	}
	return &cursor{created: time.Unix(0, n), id: id}, nil
}

// before reports whether c comes before d in the list's order.
func (c cursor) before(d cursor) bool {
	if !c.created.Equal(d.created) {
		return c.created.Before(d.created)
	}
	return c.id < d.id
}

// metadataFilter parses the list's metadata filter. The SDK encodes it three times: each
// key and value, then the k=v&k=v string, then the query parameter (undone by the URL
// parser already).
func metadataFilter(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("metadata filter %.200q is not valid (%s): give it as the SDK does, {key: value} pairs: %w", v, why, errdefs.ErrInvalidArgument)
	}
	s, err := url.QueryUnescape(v)
	if err != nil {
		return nil, bad("not URL-encoded")
	}
	out := map[string]string{}
	for _, pair := range strings.Split(s, "&") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 {
			return nil, bad("each pair is key=value")
		}
		k, err1 := url.QueryUnescape(kv[0])
		val, err2 := url.QueryUnescape(kv[1])
		if err1 != nil || err2 != nil {
			return nil, bad("not URL-encoded")
		}
		out[k] = val
	}
	return out, nil
}

func matches(md, filter map[string]string) bool {
	for k, v := range filter {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}

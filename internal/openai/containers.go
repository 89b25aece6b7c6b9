package openai

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// containerPrefix starts a container id: "cntr_" + the session's id, so that the REST API
// (POST /v1/sessions/{id}/execute) reaches the same session by the id without the prefix.
const containerPrefix = "cntr_"

// nameKey is the session metadata key that keeps a container's name.
const nameKey = "openai.container.name"

// memoryLimits are OpenAI's memory_limit values, in MiB.
var memoryLimits = []struct {
	name string
	mb   int
}{{"1g", 1024}, {"4g", 4096}, {"16g", 16384}, {"64g", 65536}}

// memoryMB is the session's memory limit for OpenAI's memory_limit; 0 ("" asked): the
// server's default. max is the server's --max-memory-mb (0: not checked here).
func memoryMB(limit string, max int) (int, error) {
	if limit == "" {
		return 0, nil
	}
	for _, l := range memoryLimits {
		if l.name != limit {
			continue
		}
		if max > 0 && l.mb > max {
			return 0, invalid("memory_limit", "memory_limit %s (%d MiB) is above this server's maximum of %d MiB: ask for less", limit, l.mb, max)
		}
		return l.mb, nil
	}
	return 0, invalid("memory_limit", "memory_limit must be one of 1g, 4g, 16g, 64g, not %q", trunc(limit))
}

// memoryLimitOf is OpenAI's memory_limit for a session's limit in MiB: "" when it is none
// of OpenAI's sizes (a session made through the REST API with another one).
func memoryLimitOf(mb int) string {
	for _, l := range memoryLimits {
		if l.mb == mb {
			return l.name
		}
	}
	return ""
}

type expiresAfter struct {
	Anchor  string `json:"anchor"`
	Minutes int    `json:"minutes"`
}

// idleTimeoutS is the session's idle timeout for OpenAI's expires_after (a container ends
// that many minutes after it was last active); 0 (nil asked): the server's default. max is
// the server's --max-idle-timeout (0: not checked here).
func idleTimeoutS(ea *expiresAfter, max time.Duration) (int, error) {
	if ea == nil {
		return 0, nil
	}
	if ea.Anchor != "last_active_at" {
		return 0, invalid("expires_after.anchor", "expires_after.anchor must be \"last_active_at\", not %q", trunc(ea.Anchor))
	}
	if ea.Minutes < 1 {
		return 0, invalid("expires_after.minutes", "expires_after.minutes must be at least 1, not %d", ea.Minutes)
	}
	if maxMin := int(max / time.Minute); max > 0 && ea.Minutes > maxMin {
		return 0, invalid("expires_after.minutes", "expires_after.minutes %d is above this server's maximum of %d", ea.Minutes, maxMin)
	}
	return ea.Minutes * 60, nil
}

type networkPolicy struct {
	Type           string         `json:"type"`
	AllowedDomains []string       `json:"allowed_domains,omitempty"`
	DomainSecrets  []domainSecret `json:"domain_secrets,omitempty"`
}

type domainSecret struct {
	Domain string `json:"domain"`
	Name   string `json:"name"`
	Value  string `json:"value"`
}

// networkOf is the session's egress policy for OpenAI's network_policy: disabled is egress
// none; an allowlist is cellbox's, each domain secret a header (its name, its value) set
// on the requests for its domain; nil (none asked) is nil, the server's default.
func networkOf(p *networkPolicy) (*api.Network, error) {
	if p == nil {
		return nil, nil
	}
	switch p.Type {
	case "disabled":
		if len(p.AllowedDomains) > 0 || len(p.DomainSecrets) > 0 {
			return nil, invalid("network_policy", "network_policy of type disabled takes no allowed_domains nor domain_secrets")
		}
		return &api.Network{Egress: api.EgressNone}, nil
	case "allowlist":
	default:
		return nil, invalid("network_policy.type", "network_policy.type must be disabled or allowlist, not %q", trunc(p.Type))
	}
	if len(p.AllowedDomains) == 0 {
		return nil, invalid("network_policy.allowed_domains", "network_policy of type allowlist needs allowed_domains")
	}
	n := &api.Network{Egress: api.EgressAllowlist, Allow: p.AllowedDomains}
	byDomain := map[string]int{}
	for i, s := range p.DomainSecrets {
		if s.Domain == "" || s.Name == "" {
			return nil, invalid(fmt.Sprintf("network_policy.domain_secrets[%d]", i), "a domain secret needs a domain and a name (the header it sets)")
		}
		j, ok := byDomain[s.Domain]
		if !ok {
			j = len(n.Secrets)
			byDomain[s.Domain] = j
			n.Secrets = append(n.Secrets, api.EgressSecret{Domain: s.Domain, Headers: map[string]string{}})
		}
		n.Secrets[j].Headers[s.Name] = s.Value
	}
	return n, nil
}

// networkPolicyOf is OpenAI's network_policy for a session's policy: nil for a public one,
// which OpenAI's shape cannot say.
func networkPolicyOf(n api.Network) *networkPolicy {
	switch n.Egress {
	case api.EgressNone, "":
		return &networkPolicy{Type: "disabled"}
	case api.EgressAllowlist:
		return &networkPolicy{Type: "allowlist", AllowedDomains: n.Allow}
	}
	return nil
}

// container is OpenAI's Container object.
type container struct {
	ID            string         `json:"id"`
	Object        string         `json:"object"`
	CreatedAt     int64          `json:"created_at"`
	Status        string         `json:"status"`
	ExpiresAfter  expiresAfter   `json:"expires_after"`
	LastActiveAt  int64          `json:"last_active_at"`
	MemoryLimit   string         `json:"memory_limit,omitempty"`
	Name          string         `json:"name"`
	NetworkPolicy *networkPolicy `json:"network_policy,omitempty"`
}

func (c container) key() (int64, string) { return c.CreatedAt, c.ID }

func containerOf(s api.Session) container {
	return container{
		ID: containerPrefix + s.ID, Object: "container", CreatedAt: s.CreatedAt.Unix(), Status: "running",
		ExpiresAfter: expiresAfter{Anchor: "last_active_at", Minutes: (s.IdleTimeoutS + 59) / 60},
		LastActiveAt: s.LastActiveAt.Unix(), MemoryLimit: memoryLimitOf(s.Limits.MemoryMB),
		Name: s.Metadata[nameKey], NetworkPolicy: networkPolicyOf(s.Network),
	}
}

// sessionID is the session of a container id; a malformed id is not found, as any other
// unknown container.
func sessionID(containerID string) (string, error) {
	id, ok := strings.CutPrefix(containerID, containerPrefix)
	if !ok || id == "" {
		return "", fmt.Errorf("no container %q: container ids start with %s: %w", trunc(containerID), containerPrefix, errdefs.ErrNotFound)
	}
	return id, nil
}

// notFound rewords the session layer's not found for a container.
func notFound(err error, containerID string) error {
	if errdefs.Code(err) == api.CodeNotFound {
		return fmt.Errorf("no container %q: it never existed, was deleted, or expired: %w", trunc(containerID), errdefs.ErrNotFound)
	}
	return err
}

func (h *Handler) createContainer(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name          string         `json:"name"`
		ExpiresAfter  *expiresAfter  `json:"expires_after"`
		FileIDs       []string       `json:"file_ids"`
		MemoryLimit   string         `json:"memory_limit"`
		NetworkPolicy *networkPolicy `json:"network_policy"`
		Skills        []any          `json:"skills"`
	}
	if err := h.decode(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	create, err := h.sessionRequest(req.Name, req.ExpiresAfter, req.MemoryLimit, req.NetworkPolicy)
	if err == nil && len(req.Skills) > 0 {
		err = invalid("skills", "skills are not supported by cellbox's containers")
	}
	// Every file is checked before the session is made.
	var files []storedFile
	for i, id := range req.FileIDs {
		f, ferr := h.fileOf(r, id)
		if ferr != nil && err == nil {
			err = &paramError{fmt.Sprintf("file_ids[%d]", i), ferr}
		}
		files = append(files, f)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	s, err := h.m.Create(r.Context(), create)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	for _, f := range files {
		if err := h.copyIn(r, s.ID, f); err != nil {
			h.m.Delete(context.WithoutCancel(r.Context()), s.ID)
			h.writeError(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, containerOf(*s))
}

// sessionRequest maps a container's create request to the session's.
func (h *Handler) sessionRequest(name string, ea *expiresAfter, memory string, np *networkPolicy) (api.CreateSessionRequest, error) {
	var req api.CreateSessionRequest
	if name == "" {
		return req, invalid("name", "a container needs a name")
	}
	if len(name) > 256 {
		return req, invalid("name", "a container's name is at most 256 bytes")
	}
	idle, err := idleTimeoutS(ea, h.opts.MaxIdleTimeout)
	if err != nil {
		return req, err
	}
	mb, err := memoryMB(memory, h.opts.MaxMemoryMB)
	if err != nil {
		return req, err
	}
	network, err := networkOf(np)
	if err != nil {
		return req, err
	}
	req = api.CreateSessionRequest{IdleTimeoutS: idle, Metadata: map[string]string{nameKey: name}, Network: network}
	if mb > 0 {
		req.Limits = &api.Limits{MemoryMB: mb}
	}
	return req, nil
}

func (h *Handler) listContainers(w http.ResponseWriter, r *http.Request) {
	l, err := parseListing(r, 20, 100)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	name := r.URL.Query().Get("name")
	var all []container
	sessions := h.m.List(r.Context())
	if h.opts.Elsewhere != nil {
		sessions = append(sessions, h.opts.Elsewhere(r.Context())...)
	}
	for _, s := range sessions {
		if name == "" || s.Metadata[nameKey] == name {
			all = append(all, containerOf(s))
		}
	}
	p, err := cut(l, all)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// session finds the container of the request's {id}.
func (h *Handler) session(r *http.Request) (*api.Session, error) {
	cid := r.PathValue("id")
	id, err := sessionID(cid)
	if err != nil {
		return nil, err
	}
	s, err := h.m.Get(r.Context(), id)
	if err != nil {
		return nil, notFound(err, cid)
	}
	return s, nil
}

func (h *Handler) getContainer(w http.ResponseWriter, r *http.Request) {
	s, err := h.session(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, containerOf(*s))
}

func (h *Handler) deleteContainer(w http.ResponseWriter, r *http.Request) {
	cid := r.PathValue("id")
	id, err := sessionID(cid)
	if err == nil {
		err = notFound(h.m.Delete(r.Context(), id), cid)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.srcs.forget(id)
	writeJSON(w, http.StatusOK, map[string]any{"id": cid, "object": "container.deleted", "deleted": true})
}

package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/cluster"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/session"
)

// The library of saved tools. Only the API's caller writes it (saveTool; a session's code
// only proposes a tool). Each node keeps the tools saved from sessions on it (package
// session's library); in a cluster the routes make them one library: a list or a get sees
// every node's (a name on several nodes: the one saved last), a delete removes it from
// every node, and a load on the session's node first copies there the newest version of
// each tool it loads, so a kernel restart there loads it again without asking the others.

// clusterWide: r is to be answered with every node's library (a client's request to a
// cluster node, not one another node sent).
func (s *server) clusterWide(r *http.Request) bool {
	return s.opts.Cluster != nil && r.Header.Get(ForwardedHeader) == ""
}

// clusterWideName: as clusterWide, for a route on a saved tool's name; a name no tool can
// have is answered here alone.
func (s *server) clusterWideName(r *http.Request, name string) bool {
	return s.clusterWide(r) && guestproto.CheckToolName(name) == nil
}

// newest merges lists of saved tools: one of each name, the one saved last (the first
// list's on a tie), in name order.
func newest(lists ...[]api.SavedTool) []api.SavedTool {
	by := map[string]api.SavedTool{}
	for _, l := range lists {
		for _, t := range l {
			if old, ok := by[t.Name]; !ok || t.SavedAt.After(old.SavedAt) {
				by[t.Name] = t
			}
		}
	}
	out := make([]api.SavedTool, 0, len(by))
	for _, t := range by {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// clusterSaved returns the key's saved tools on every node (this one's first), merged by
// newest, without their sources when index, and the nodes that did not answer. A request
// another node sent is answered with this node's alone.
func (s *server) clusterSaved(r *http.Request, index bool) ([]api.SavedTool, []string, error) {
	list, path := s.m.SavedTools, "/v1/saved-tools"
	if index {
		list, path = s.m.SavedToolIndex, "/v1/saved-tools?source=false"
	}
	here, err := list(r.Context())
	if err != nil || !s.clusterWide(r) {
		return here, nil, err
	}
	theirs, unavailable := gather[api.SavedToolList](s, r, path)
	lists := [][]api.SavedTool{here}
	for _, l := range theirs {
		lists = append(lists, l.Tools)
	}
	return newest(lists...), unavailable, nil
}

// listSavedTools answers GET /v1/saved-tools; with ?source=false, without the sources.
func (s *server) listSavedTools(w http.ResponseWriter, r *http.Request) {
	tools, unavailable, err := s.clusterSaved(r, r.URL.Query().Get("source") == "false")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.SavedToolList{Tools: tools, UnavailableNodes: unavailable})
}

// savedOn asks every other live node for the key's saved tool name: the newest of those
// found (nil: none), and the nodes that did not answer.
func (s *server) savedOn(r *http.Request, name string) (*api.SavedTool, []string) {
	var (
		mu          sync.Mutex
		found       []api.SavedTool
		unavailable []string
	)
	s.eachOther(r, func(ctx context.Context, m cluster.Member) error {
		t, err := s.savedToolOn(ctx, r, m, name)
		if err != nil || t == nil {
			return err
		}
		mu.Lock()
		found = append(found, *t)
		mu.Unlock()
		return nil
	}, &unavailable)
	if l := newest(found); len(l) == 1 {
		return &l[0], unavailable
	}
	return nil, unavailable
}

func (s *server) getSavedTool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	t, err := s.m.SavedTool(r.Context(), name)
	if !s.clusterWideName(r, name) || (err != nil && !errors.Is(err, errdefs.ErrNotFound)) {
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, t)
		return
	}
	theirs, unavailable := s.savedOn(r, name)
	var all []api.SavedTool
	if t != nil {
		all = append(all, *t)
	}
	if theirs != nil {
		all = append(all, *theirs)
	}
	if l := newest(all); len(l) == 1 {
		writeJSON(w, http.StatusOK, l[0])
		return
	}
	if len(unavailable) > 0 {
		s.writeError(w, r, fmt.Errorf("%s; cluster nodes %s did not answer, and may keep it: %w",
			strings.TrimSuffix(err.Error(), ": "+errdefs.ErrNotFound.Error()), strings.Join(unavailable, ", "), errdefs.ErrUnavailable))
		return
	}
	s.writeError(w, r, err)
}

// deleteSavedTool answers DELETE /v1/saved-tools/{name}: in a cluster, on every node. A
// node that does not answer keeps its copy, and the answer says so (503): delete again.
func (s *server) deleteSavedTool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	err := s.m.DeleteSavedTool(r.Context(), name)
	if !s.clusterWideName(r, name) || (err != nil && !errors.Is(err, errdefs.ErrNotFound)) {
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var (
		mu          sync.Mutex
		deleted     = err == nil
		unavailable []string
	)
	s.eachOther(r, func(ctx context.Context, m cluster.Member) error {
		res, err := s.sendOn(ctx, r, m, http.MethodDelete, "/v1/saved-tools/"+url.PathEscape(name))
		if err != nil {
			return err
		}
		res.Body.Close()
		switch res.StatusCode {
		case http.StatusNoContent, http.StatusOK:
			mu.Lock()
			deleted = true
			mu.Unlock()
		case http.StatusNotFound:
		default:
			return fmt.Errorf("HTTP %d", res.StatusCode)
		}
		return nil
	}, &unavailable)
	switch {
	case len(unavailable) > 0:
		s.writeError(w, r, fmt.Errorf("the saved tool %s was deleted where it could be, but cluster nodes %s did not answer and may keep it: delete it again when they are back: %w",
			name, strings.Join(unavailable, ", "), errdefs.ErrUnavailable))
	case !deleted:
		s.writeError(w, r, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// saveTool answers POST /v1/sessions/{id}/tools/{name}/save {"source": ...} (optional) with
// the saved tool: the caller saves a tool the session's code proposed (@tool(save=True)),
// as the session has it, in this node's library (the session's).
func (s *server) saveTool(w http.ResponseWriter, r *http.Request) {
	var req api.SaveToolRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	t, err := s.m.SaveTool(r.Context(), r.PathValue("id"), r.PathValue("name"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// loadTools answers POST /v1/sessions/{id}/tools/load {"names": [...]} (none: all of the
// key's saved tools) with the session's tools after. It runs on the session's node; in a
// cluster the newest version of each tool, on whichever node, is copied here first.
func (s *server) loadTools(w http.ResponseWriter, r *http.Request) {
	var req api.LoadToolsRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.opts.Cluster != nil {
		if err := s.fetchSaved(r, req.Names); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	tools, err := s.m.LoadTools(r.Context(), r.PathValue("id"), req.Names)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.SessionToolList{Tools: tools})
}

// fetchSaved copies to this node's library the newest version, on any node, of the key's
// saved tools named (none named: all of them): one index of each other node (no sources),
// then each tool newer elsewhere than here from the node that has it. A name no node has
// is left for LoadTools to refuse, but when a node did not answer, which may have it.
func (s *server) fetchSaved(r *http.Request, names []string) error {
	if len(names) > session.MaxSavedTools {
		return fmt.Errorf("names has %d tools; at most %d: %w", len(names), session.MaxSavedTools, errdefs.ErrInvalidArgument)
	}
	here, err := s.m.SavedToolIndex(r.Context())
	if err != nil {
		return err
	}
	local := map[string]time.Time{}
	for _, t := range here {
		local[t.Name] = t.SavedAt
	}
	type copyOn struct {
		at   time.Time
		node cluster.Member
	}
	var (
		mu          sync.Mutex
		elsewhere   = map[string]copyOn{}
		unavailable []string
	)
	s.eachOther(r, func(ctx context.Context, m cluster.Member) error {
		l, err := listOn[api.SavedToolList](s, r, m, "/v1/saved-tools?source=false")
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, t := range l.Tools {
			if c, ok := elsewhere[t.Name]; !ok || t.SavedAt.After(c.at) {
				elsewhere[t.Name] = copyOn{t.SavedAt, m}
			}
		}
		return nil
	}, &unavailable)
	if len(names) == 0 {
		for name := range local {
			names = append(names, name)
		}
		for name := range elsewhere {
			if _, ok := local[name]; !ok {
				names = append(names, name)
			}
		}
		if len(names) > session.MaxSavedTools {
			return fmt.Errorf("you have %d saved tools across the cluster's nodes, more than a session's node keeps (%d): name the ones to load: %w",
				len(names), session.MaxSavedTools, errdefs.ErrResourceExhausted)
		}
	}
	for _, name := range names {
		c, ok := elsewhere[name]
		at, here := local[name]
		switch {
		case !ok && !here && len(unavailable) > 0:
			return fmt.Errorf("no saved tool %q on the nodes that answered; cluster nodes %s did not, and may keep it: %w",
				name, strings.Join(unavailable, ", "), errdefs.ErrUnavailable)
		case !ok || here && !c.at.After(at):
			continue // here already, or on no node (LoadTools says so)
		}
		if err := s.copySaved(r, c.node, name); err != nil {
			return err
		}
	}
	return nil
}

// savedToolOn asks node m for the key's saved tool name: nil when m has none.
func (s *server) savedToolOn(ctx context.Context, r *http.Request, m cluster.Member, name string) (*api.SavedTool, error) {
	res, err := s.getOn(ctx, r, m, "/v1/saved-tools/"+url.PathEscape(name))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	switch res.StatusCode {
	case http.StatusNotFound:
		return nil, nil
	case http.StatusOK:
	default:
		return nil, fmt.Errorf("HTTP %d", res.StatusCode)
	}
	var t api.SavedTool
	if err := json.NewDecoder(io.LimitReader(res.Body, 4<<20)).Decode(&t); err != nil || t.Name != name {
		return nil, fmt.Errorf("its saved tool %q does not decode", name)
	}
	return &t, nil
}

// copySaved copies the key's saved tool name from node m to this node's library.
func (s *server) copySaved(r *http.Request, m cluster.Member, name string) error {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	t, err := s.savedToolOn(ctx, r, m, name)
	if err == nil && t == nil {
		err = errors.New("it has none now")
	}
	if err != nil {
		return fmt.Errorf("the saved tool %s could not be fetched from cluster node %s (%v): %w", name, m.Name, err, errdefs.ErrUnavailable)
	}
	return s.m.KeepSavedTool(r.Context(), *t)
}

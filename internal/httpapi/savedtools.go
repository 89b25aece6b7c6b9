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

// The library of saved tools. Each node keeps the tools saved by sessions on it (package
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
// newest, and the nodes that did not answer.
func (s *server) clusterSaved(r *http.Request) ([]api.SavedTool, []string, error) {
	here, err := s.m.SavedTools(r.Context())
	if err != nil {
		return nil, nil, err
	}
	if s.opts.Cluster == nil {
		return here, nil, nil
	}
	theirs, unavailable := gather[api.SavedToolList](s, r, "/v1/saved-tools")
	lists := [][]api.SavedTool{here}
	for _, l := range theirs {
		lists = append(lists, l.Tools)
	}
	return newest(lists...), unavailable, nil
}

func (s *server) listSavedTools(w http.ResponseWriter, r *http.Request) {
	if !s.clusterWide(r) {
		tools, err := s.m.SavedTools(r.Context())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, api.SavedToolList{Tools: tools})
		return
	}
	tools, unavailable, err := s.clusterSaved(r)
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
		res, err := s.getOn(ctx, r, m, "/v1/saved-tools/"+url.PathEscape(name))
		if err != nil {
			return err
		}
		defer res.Body.Close()
		switch res.StatusCode {
		case http.StatusNotFound:
			return nil
		case http.StatusOK:
		default:
			return fmt.Errorf("HTTP %d", res.StatusCode)
		}
		var t api.SavedTool
		if err := json.NewDecoder(io.LimitReader(res.Body, 4<<20)).Decode(&t); err != nil || t.Name != name {
			return fmt.Errorf("its saved tool %q does not decode", name)
		}
		mu.Lock()
		found = append(found, t)
		mu.Unlock()
		return nil
	}, &unavailable)
	if l := newest(found); len(l) == 1 {
		return &l[0], unavailable
	}
	return nil, unavailable
}

// eachOther runs do for every other node of the cluster, at once, each within 10 s; the
// nodes that are down or whose do failed are added to unavailable, in name order.
func (s *server) eachOther(r *http.Request, do func(context.Context, cluster.Member) error, unavailable *[]string) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	fail := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		*unavailable = append(*unavailable, name)
	}
	for _, m := range s.opts.Cluster.Members() {
		switch {
		case m.Here:
			continue
		case !m.Live:
			fail(m.Name)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			if err := do(ctx, m); err != nil {
				s.log.Warn("saved tools on another cluster node", "node", m.Name, "path", r.URL.Path, "err", err)
				fail(m.Name)
			}
		}()
	}
	wg.Wait()
	sort.Strings(*unavailable)
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
// saved tools named (none named: all of them). A tool no node has is left for LoadTools
// to refuse.
func (s *server) fetchSaved(r *http.Request, names []string) error {
	var tools []api.SavedTool
	if len(names) == 0 {
		all, _, err := s.clusterSaved(r)
		if err != nil {
			return err
		}
		tools = all
	} else {
		if len(names) > session.MaxSavedTools {
			return fmt.Errorf("names has %d tools; at most %d: %w", len(names), session.MaxSavedTools, errdefs.ErrInvalidArgument)
		}
		for _, name := range names {
			if guestproto.CheckToolName(name) != nil {
				continue // no node keeps it: LoadTools says so
			}
			t, _ := s.savedOn(r, name)
			if t != nil {
				tools = append(tools, *t)
			}
		}
	}
	for _, t := range tools {
		if err := s.m.KeepSavedTool(r.Context(), t); err != nil {
			return err
		}
	}
	return nil
}

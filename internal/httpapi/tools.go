package httpapi

import (
	"fmt"
	"net/http"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/tool"
)

// A session's tools (functions its kernel offers: from cellbox import tool) and the API
// key's library of saved tools, which the caller saves to (savedtools.go). Calls on a session go to its node; the library is each
// node's, and in a cluster the routes below see every node's (savedtools.go).

// sessionTools answers GET /v1/sessions/{id}/tools: {"tools": [...]} as api.SessionTool,
// or with ?format= the definitions in a provider's shape (tool.Format).
func (s *server) sessionTools(w http.ResponseWriter, r *http.Request) {
	tools, err := s.m.Tools(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	format := r.URL.Query().Get("format")
	if format == "" {
		writeJSON(w, http.StatusOK, api.SessionToolList{Tools: tools})
		return
	}
	defs := make([]tool.Definition, len(tools))
	for i, t := range tools {
		defs[i] = tool.Definition{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}
	}
	v, err := tool.Format(defs, format)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("%s: %w", err.Error(), errdefs.ErrInvalidArgument))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// callTool answers POST /v1/sessions/{id}/tools/{name}/call as an execution is answered:
// JSON, or with Accept: text/event-stream an "output" event per output, then "result".
func (s *server) callTool(w http.ResponseWriter, r *http.Request) {
	id, name := r.PathValue("id"), r.PathValue("name")
	var req api.ToolCallRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	// Refusals (unknown session or tool, bad arguments) before the answer starts.
	if err := s.m.CheckToolCall(r.Context(), id, name, req); err != nil {
		s.writeError(w, r, err)
		return
	}
	answer(s, w, r, func(send func(string, any)) (*api.ToolCallResult, error) {
		var onOutput func(api.Output)
		if send != nil {
			onOutput = func(o api.Output) { send("output", o) }
		}
		res, err := s.m.CallTool(r.Context(), id, name, req, onOutput)
		if err == nil && req.Links {
			s.addLinks(r, id, res.Files)
		}
		return res, err
	})
}

package httpapi

import (
	"net/http"

	"github.com/cellbox/cellbox/api"
)

// complete answers POST /v1/sessions/{id}/complete: the kernel's completions at a cursor.
func (s *server) complete(w http.ResponseWriter, r *http.Request) {
	var req api.CompleteRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.m.Complete(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// inspect answers POST /v1/sessions/{id}/inspect: what the kernel knows of a name.
func (s *server) inspect(w http.ResponseWriter, r *http.Request) {
	var req api.InspectRequest
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.m.Inspect(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

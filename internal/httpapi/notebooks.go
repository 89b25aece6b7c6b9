package httpapi

import (
	"net/http"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/notebook"
	"github.com/cellbox/cellbox/internal/session"
)

var _ notebook.Sessions = (*session.Manager)(nil)

// maxNotebookBytes bounds the body of POST /v1/notebooks/execute. A notebook is a file,
// with its images in it, so it is bounded as an upload is (--max-upload-bytes) up to this
// (it is parsed in memory, and comes back with outputs), and never below --max-body-bytes.
const maxNotebookBytes = 64 << 20

const notebookPath = "/v1/notebooks/execute"

// maxBody is the most bytes r's body may have.
func (s *server) maxBody(r *http.Request) int64 {
	if r.Method == http.MethodPost && r.URL.Path == notebookPath {
		return max(s.opts.MaxBodyBytes, min(s.opts.MaxUploadBytes, maxNotebookBytes))
	}
	return s.opts.MaxBodyBytes
}

// executeNotebook answers POST /v1/notebooks/execute (package notebook): the executed
// notebook, or with Server-Sent Events a "cell" event per code cell as it finishes and
// then the "result". A bad request, or a session of the request's that is not the
// caller's, is refused before the stream starts.
func (s *server) executeNotebook(w http.ResponseWriter, r *http.Request) {
	var req api.NotebookRequest
	if err := s.decodeJSON(w, r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	job, err := notebook.New(s.m, s.log).Prepare(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	answer(s, w, r, func(send func(string, any)) (*api.NotebookResult, error) {
		var onCell func(api.NotebookCell)
		if send != nil {
			onCell = func(c api.NotebookCell) { send("cell", c) }
		}
		return job.Run(r.Context(), onCell)
	})
}

package openai

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// In a cluster, each node keeps what was made on it: its sessions (containers), the
// /v1/files uploaded to it and the responses it answered. Their ids carry the node's tag
// (Options.IDPrefix, as session ids do), and httpapi sends a request on one of them to its
// node. What this package must reach itself is a file that a container on this node takes
// (file_ids) but another node keeps: fileOf and openFile fetch it from there.

// fileOf returns the caller's /v1/files file id, wherever in the cluster it is kept.
func (h *Handler) fileOf(r *http.Request, id string) (storedFile, error) {
	var f storedFile
	if !validID(id) {
		return f, noFile(id)
	}
	res, err := h.onNode(r, id, "/v1/files/"+id)
	if err != nil || res == nil {
		if err == nil {
			f, err = h.files.get(r.Context(), id)
		}
		return f, err
	}
	defer res.Body.Close()
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&f); err != nil || f.ID != id {
		return f, fmt.Errorf("the cluster node that keeps file %s answered with something else: %w", id, errdefs.ErrUnavailable)
	}
	return f, nil
}

// openFile returns the content of the caller's file f, wherever in the cluster it is kept;
// the caller closes it.
func (h *Handler) openFile(r *http.Request, f storedFile) (io.ReadCloser, error) {
	res, err := h.onNode(r, f.ID, "/v1/files/"+f.ID+"/content")
	if err != nil {
		return nil, err
	}
	if res != nil {
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(res.Body, f.Bytes), res.Body}, nil
	}
	_, c, err := h.files.open(r.Context(), f.ID)
	return c, err
}

// onNode GETs path on the cluster node that keeps file id, when that is another node, and
// returns its 200 answer; nil, nil when the file is this node's.
func (h *Handler) onNode(r *http.Request, id, path string) (*http.Response, error) {
	if h.opts.OpenOnNode == nil {
		return nil, nil
	}
	res, err := h.opts.OpenOnNode(r, strings.TrimPrefix(id, filePrefix), path)
	if err != nil || res == nil {
		return nil, err
	}
	switch {
	case res.StatusCode == http.StatusOK:
		return res, nil
	case res.StatusCode == http.StatusNotFound:
		err = noFile(id)
	default:
		err = fmt.Errorf("the cluster node that keeps file %s answered %d %s: %w", id, res.StatusCode, http.StatusText(res.StatusCode), errdefs.ErrUnavailable)
	}
	res.Body.Close()
	return nil, err
}

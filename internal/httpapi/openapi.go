package httpapi

import (
	"net/http"

	"github.com/cellbox/cellbox/api"
)

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(api.OpenAPI)
}

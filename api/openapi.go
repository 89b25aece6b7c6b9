package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the REST API v1, served at /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

package mcpserver

import (
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCallHTTP is one tools/call of python "x = 1" over streamable HTTP on loopback,
// with the official Go SDK's client: what MCP costs on top of the execution itself (compare
// BenchmarkExecute in internal/agent, the same cell through the manager).
//
//	go test -run '^$' -bench CallHTTP -benchtime 300x ./internal/mcpserver/
func BenchmarkCallHTTP(b *testing.B) {
	s, _ := newServer(b)
	hs := httptest.NewServer(s.Handler())
	b.Cleanup(hs.Close)
	b.Cleanup(s.Close)
	c := newClient(b, &mcp.StreamableClientTransport{Endpoint: hs.URL})
	c.call("python", map[string]any{"code": "x = 0"}) // the connection's session starts
	b.ResetTimer()
	for b.Loop() {
		if res, out := c.call("python", map[string]any{"code": "x = 1"}); res.IsError {
			b.Fatal(out)
		}
	}
}

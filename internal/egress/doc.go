// Package egress is the server's side of a sandbox's internet access: the session's network
// policy (what may leave, which secrets are added on the way out), the address ranges that are
// never dialed, the operator's per-tenant limits, and the gateway that reads what code in a
// sandbox asked its proxy for, decides, resolves, dials, relays and records each connection.
//
// The policy half (policy.go, addr.go, tenants.go) does no I/O: it parses what clients and
// operators write and answers questions about names, addresses and ports. Every parser here
// reads untrusted input (a model writes policies; sandbox code names destinations) and is
// fuzzed.
//
// Not for: the proxy inside the sandbox (package guest copies bytes and parses nothing), the
// wire types (api.Network, api.EgressConnection), or flags and files (package config).
package egress

// Package e2e tests the egress path end to end: real clients in a runc sandbox (pip, curl,
// git, requests, urllib), the guest's proxy, the server's gateway, and real servers on test
// hosts in network namespaces (package testhost) that the gateway resolves with a test DNS
// server. It holds tests only.
//
// Not for: the gateway's own cases against hand-made clients (package egress), or what a
// backend must do for the proxy to work (the conformance suite, sandboxtest).
package e2e

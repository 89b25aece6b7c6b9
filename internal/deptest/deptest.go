// Package deptest holds the tests of the module's dependency rules (docs/ARCHITECTURE.md,
// "Dependency rules"): which packages may link which, checked with `go list -deps` on
// Linux and macOS, so that a rule no one reads cannot drift. After tailscale's
// tstest/deptest, but for the whole module's rules in one place.
//
// Not for: code. The package has none; its tests are the point.
package deptest

package main

import "github.com/cellbox/cellbox/internal/guest"

func init() {
	register("guest", "the in-sandbox daemon (started by a backend, not by hand)", guest.Main)
}

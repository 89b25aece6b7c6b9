package main

import "github.com/cellbox/cellbox/internal/sandbox/runc/template/tinit"

func init() {
	register("template-init", "a kernel template's start (started by the server, not by hand)", tinit.Main)
}

package main

import "github.com/cellbox/cellbox/internal/template"

func init() {
	register("template-init", "a kernel template's start (started by the server, not by hand)", template.Main)
}

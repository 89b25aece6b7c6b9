module github.com/cellbox/cellbox

go 1.26.8

require github.com/hashicorp/yamux v0.1.2

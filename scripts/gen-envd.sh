#!/usr/bin/env bash
# Regenerates the Go code of internal/e2b/envd/*.proto (committed; only needed after a
# .proto changes). Needs protoc (apt-get install protobuf-compiler); installs the two Go
# plugins at the versions go.mod pins.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go connectrpc.com/connect/cmd/protoc-gen-connect-go
PATH=$bin:$PATH protoc -I internal/e2b/envd \
	--go_out=. --go_opt=module=github.com/cellbox/cellbox \
	--connect-go_out=. --connect-go_opt=module=github.com/cellbox/cellbox \
	internal/e2b/envd/process.proto internal/e2b/envd/filesystem.proto

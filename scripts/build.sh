#!/bin/bash
# build.sh OUT: builds cellbox, static, at OUT, with the guest's own binary (cmd/cellbox-guest)
# attached at its end (internal/guestbin): the server writes that out and runs it in its
# sandboxes. GOOS and GOARCH come from the environment, as go build takes them; a binary for
# another system than Linux carries no guest (it runs none). GO: the go command (default go).
set -euo pipefail
case $1 in
/*) out=$1 ;;
*) out=$PWD/$1 ;;
esac
go=${GO:-go}
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
"$go" build -trimpath -o "$out" ./cmd/cellbox
if [[ $("$go" env GOOS) != linux ]]; then
	exit 0
fi
guest=$(mktemp "${TMPDIR:-/tmp}/cellbox-guest.XXXXXX")
trap 'rm -f "$guest"' EXIT
"$go" build -trimpath -o "$guest" ./cmd/cellbox-guest
GOOS= GOARCH= "$go" run ./cmd/cellbox-guest attach "$guest" "$out"

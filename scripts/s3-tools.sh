#!/usr/bin/env bash
# s3-tools.sh [DIR]: builds versitygw, an S3 server (Apache 2.0), from the Go module proxy
# for the artifacts tests. Prints the folder holding it (DIR, default $CELLBOX_S3_TOOLS or
# /var/cache/cellbox/s3-tools/versitygw-<version>). Built once per version (about a minute
# on 2 cores); later runs print the folder at once.
set -euo pipefail

version=v1.8.0
me=s3-tools
say() { printf '%s: %s\n' "$me" "$*" >&2; }

dir=${1:-${CELLBOX_S3_TOOLS:-/var/cache/cellbox/s3-tools/versitygw-$version}}
if [[ -x $dir/versitygw ]]; then
	echo "$dir"
	exit 0
fi
go=$(command -v go || echo /usr/local/go/bin/go)
[[ -x $go ]] || {
	say "go not found in PATH nor in /usr/local/go/bin"
	exit 1
}
mkdir -p "$dir"
say "building versitygw $version (about a minute)"
GOBIN=$dir GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 "$go" install -trimpath "github.com/versity/versitygw/cmd/versitygw@$version"
say "built in $dir"
echo "$dir"

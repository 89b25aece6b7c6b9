#!/usr/bin/env bash
# runsc.sh [DIR]: builds gVisor's runsc from the Go module proxy, at the version
# tools/runsc/go.mod pins (its go.sum checks every module), and prints the path of the
# binary: DIR/runsc (default $CELLBOX_RUNSC_CACHE or /var/cache/cellbox/runsc/<version>-<key>).
# Built once per version (about a minute and a half on 2 cores); later runs print the path
# at once. GO: the go command (default: go in PATH, else /usr/local/go/bin/go). scripts/install-deps.sh installs it as /usr/local/bin/runsc.
#
# The binary is static (CGO_ENABLED=0), as gVisor's own releases are: runsc's sandbox
# re-executes itself (/proc/self/exe) inside an empty chroot, where a dynamically linked
# runsc finds no ELF interpreter (/lib64/ld-linux-x86-64.so.2) and the sandbox never starts
# ("cannot read client sync file: waiting for sandbox to start: EOF"; the sentry's log ends
# with "error executing umounter: fork/exec /proc/self/exe: no such file or directory").
# A plain `go install` links dynamically wherever a C compiler is installed.
set -euo pipefail

me=runsc
say() { printf '%s: %s\n' "$me" "$*" >&2; }
self=$(realpath "$0")
cd "$(dirname "$self")/.."

version=$(awk '$1 == "gvisor.dev/gvisor" { print $2 }' tools/runsc/go.mod)
[[ -n $version ]] || { say "tools/runsc/go.mod requires no gvisor.dev/gvisor"; exit 1; }
# The cache is by version and by what the build checks and does (go.sum, this script): a
# binary built otherwise, or left there by someone else, is not taken for this one.
key=$(cat tools/runsc/go.sum "$self" | sha256sum | cut -c1-12)
dir=${1:-${CELLBOX_RUNSC_CACHE:-/var/cache/cellbox/runsc/$version-$key}}
if [[ -x $dir/runsc ]]; then
	echo "$dir/runsc"
	exit 0
fi
go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[[ -x $go ]] || { say "go not found in PATH nor in /usr/local/go/bin"; exit 1; }
mkdir -p "$dir"
say "building runsc $version (about a minute and a half)"
# The version runsc --version prints: the module's, without its v0.0.0- prefix.
CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly GOTOOLCHAIN=local "$go" build -C tools/runsc -trimpath \
	-ldflags "-X gvisor.dev/gvisor/runsc/version.version=${version#v0.0.0-}" -o "$dir/runsc.new" gvisor.dev/gvisor/runsc
mv "$dir/runsc.new" "$dir/runsc"
say "built $dir/runsc"
echo "$dir/runsc"

#!/usr/bin/env bash
# kube-tools.sh [DIR]: builds a real Kubernetes control plane for the cluster tests from the
# Go module proxy: kube-apiserver and kubectl from k8s.io/kubernetes, etcd from its server
# module. Prints the folder holding the three binaries (DIR, default
# $CELLBOX_KUBE_TOOLS or /var/cache/cellbox/kube-tools/<versions>). Built once per version
# set; later runs print the folder at once. The first build takes ~9 minutes on 2 cores and
# ~3 GB of Go build cache.
#
# Debian has no kube-apiserver, and its etcd (3.4) breaks the apiserver's watch cache, so both
# come from source. k8s.io/kubernetes points its k8s.io/* modules at ./staging, which a module
# download does not carry: the replaces are rewritten to the published modules of the same
# release (v0.X.Y for v1.X.Y).
set -euo pipefail

k8s=v1.34.4
etcd=v3.6.16
me=kube-tools
say() { printf '%s: %s\n' "$me" "$*" >&2; }

dir=${1:-${CELLBOX_KUBE_TOOLS:-/var/cache/cellbox/kube-tools/k8s-$k8s-etcd-$etcd}}
if [[ -x $dir/kube-apiserver && -x $dir/etcd && -x $dir/kubectl ]]; then
	echo "$dir"
	exit 0
fi
go=$(command -v go || echo /usr/local/go/bin/go)
[[ -x $go ]] || {
	say "go not found in PATH nor in /usr/local/go/bin"
	exit 1
}
mkdir -p "$dir"
work=$(mktemp -d /tmp/cellbox-kube-tools.XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0

say "building etcd $etcd (about a minute)"
mkdir "$work/etcd"
cat >"$work/etcd/main.go" <<'EOF'
// etcd, built from its server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
(
	cd "$work/etcd"
	"$go" mod init cellbox.test/etcd >/dev/null 2>&1
	"$go" get "go.etcd.io/etcd/server/v3@$etcd" >/dev/null 2>&1
	"$go" mod tidy >/dev/null 2>&1
	"$go" build -trimpath -o "$dir/etcd.new" .
)

say "building kube-apiserver and kubectl $k8s (about 9 minutes the first time)"
src=$("$go" mod download -json "k8s.io/kubernetes@$k8s" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -d $src ]] || {
	say "could not download k8s.io/kubernetes@$k8s from the Go module proxy"
	exit 1
}
cp -r "$src" "$work/k8s"
chmod -R u+w "$work/k8s"
rm -rf "$work/k8s/vendor" "$work/k8s/go.work" "$work/k8s/go.work.sum"
staging=v0.${k8s#v1.}
(
	cd "$work/k8s"
	args=()
	for mod in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/.*#\1#p' go.mod); do
		args+=("-replace=$mod=$mod@$staging")
	done
	((${#args[@]} > 0)) || {
		say "found no staging replaces in k8s.io/kubernetes@$k8s's go.mod"
		exit 1
	}
	"$go" mod edit "${args[@]}"
	minor=$(cut -d. -f2 <<<"$k8s")
	ld="-X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
	"$go" build -trimpath -ldflags "$ld" -o "$dir/kube-apiserver.new" ./cmd/kube-apiserver
	"$go" build -trimpath -ldflags "$ld" -o "$dir/kubectl.new" ./cmd/kubectl
)
for b in etcd kube-apiserver kubectl; do
	mv "$dir/$b.new" "$dir/$b"
done
say "built in $dir"
echo "$dir"

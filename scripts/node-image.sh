#!/usr/bin/env bash
# node-image.sh [REF]: builds the container image a cellbox node runs in on Kubernetes
# (deploy/kubernetes), from Debian's packages and this checkout, into the local Docker engine
# as REF (default cellbox/node:latest), and prints REF. No base image is pulled. BINARY: a
# cellbox binary scripts/build.sh built, to use instead of building one.
#
# The image is Debian with the sandbox image's packages (internal/image/default.list: a
# node's sandboxes see its /usr, --rootfs host) and runc, with cellbox and gVisor's runsc,
# both built static, at /usr/local/bin, and CRIU (scripts/criu.sh, with the libraries it
# links and iptables) at /usr/local/sbin, so that sessions can be paused under runc. Its root filesystem is built by `cellbox image build` as image
# "cellbox-node" in STATE (default /var/lib/cellbox; downloads are shared with the other
# images there), so a second run with the same packages and binary imports nothing.
#
# Needs root, debootstrap and a Docker engine. Then: docker tag REF REGISTRY/cellbox:TAG,
# docker push, and name it in your overlay's images: (docs/kubernetes.md).
set -euo pipefail

me=node-image
say() { printf '%s: %s\n' "$me" "$*" >&2; }
ref=${1:-cellbox/node:latest}
state=${STATE:-/var/lib/cellbox}
self=$(realpath "$0")
cd "$(dirname "$self")/.."

((EUID == 0)) || { say "needs root (debootstrap makes device files and chroots)"; exit 1; }
command -v docker >/dev/null || { say "docker not found: apt-get install docker.io"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cellbox-node-image.XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/extra/usr/local/bin" "$work/extra/usr/local/sbin" "$work/extra/node-etc"
if [[ -n ${BINARY:-} ]]; then
	cp "$BINARY" "$work/extra/usr/local/bin/cellbox" # built already (make test's ./bin/cellbox)
else
	say "building cellbox"
	scripts/build.sh "$work/extra/usr/local/bin/cellbox"
fi
cellbox=$work/extra/usr/local/bin/cellbox

# gVisor's runsc, at the version tools/runsc pins (Debian's is of 2022).
runsc=$(scripts/runsc.sh)
cp "$runsc" "$work/extra/usr/local/bin/runsc"
# CRIU 4.2, built from Debian's source (Debian 12's fails on current kernels).
criu=$(scripts/criu.sh)
cp "$criu" "$work/extra/usr/local/sbin/criu"

# The sandbox image's list, and runc.
{
	cat internal/image/default.list
	printf '\n# the node: the OCI runtime its sandboxes run on (runsc: /usr/local/bin, above)\ndebian runc\n'
	printf '# what CRIU (/usr/local/sbin) links, and the iptables it locks the network with\n'
	printf 'debian libbsd0 libgnutls30 libprotobuf-c1 libnl-3-200 libnet1 libuuid1 iptables\n'
} >"$work/node.list"
"$cellbox" image build cellbox-node --file "$work/node.list" --state-dir "$state" >&2
root=$state/images/cellbox-node/$(cat "$state/images/cellbox-node/current")/rootfs
[[ -x $root/usr/sbin/runc ]] || { say "the built root filesystem has no runc: $root"; exit 1; }

# An image built from this root, this binary and this script is imported once.
source=$({ cat "$state/images/cellbox-node/current" && sha256sum <"$cellbox" && sha256sum <"$runsc" && sha256sum <"$criu" && sha256sum <"$self"; } | sha256sum | cut -c1-16)
if [[ $(docker image inspect --format '{{index .Config.Labels "dev.cellbox.node-source"}}' "$ref" 2>/dev/null) == "$source" ]]; then
	say "$ref is up to date ($source)"
	echo "$ref"
	exit 0
fi

# The image build leaves /etc/passwd and /etc/group empty (sandboxes get their own): the
# node's are root's, in place of those (an import takes no path twice).
printf 'root:x:0:0:root:/root:/bin/bash\n' >"$work/extra/node-etc/passwd"
printf 'root:x:0:\n' >"$work/extra/node-etc/group"

# The image this one replaces, removed after the import: each new binary would otherwise
# leave 1.5 GB untagged behind (make test imports one a run).
previous=$(docker image inspect --format '{{.Id}}' "$ref" 2>/dev/null || true)

say "importing $ref"
tar --numeric-owner -cf - -C "$root" --exclude=./etc/passwd --exclude=./etc/group . \
	-C "$work/extra" --transform 's,^\./node-etc/,./etc/,' ./node-etc/passwd ./node-etc/group ./usr/local/bin/cellbox ./usr/local/bin/runsc ./usr/local/sbin/criu |
	docker import \
		--change 'ENTRYPOINT ["/usr/local/bin/cellbox"]' \
		--change 'CMD ["serve"]' \
		--change 'ENV CELLBOX_ADDR=0.0.0.0:8080 CELLBOX_STATE_DIR=/var/lib/cellbox CELLBOX_CGROUP_PARENT=/cellbox' \
		--change 'EXPOSE 8080' \
		--change "LABEL dev.cellbox.node-source=$source" \
		- "$ref" >/dev/null
if [[ -n $previous && $(docker image inspect --format '{{.Id}}' "$ref") != "$previous" ]]; then
	# Kept if a container or another tag still uses it.
	docker image rm "$previous" >/dev/null 2>&1 || say "kept the image $ref replaced ($previous): in use"
fi
echo "$ref"

#!/usr/bin/env bash
# criu.sh [DIR]: builds CRIU from Debian's source tarball, at the version and sha256 pinned
# below, and prints the path of the binary: DIR/criu (default $CELLBOX_CRIU_CACHE or
# /var/cache/cellbox/criu/<version>-<key>). Built once per version (about 25 s on 2 idle
# cores, plus its build dependencies from apt when they are missing); later runs print the
# path at once. CELLBOX_CRIU_TARBALL: a copy of the tarball to build from instead of
# downloading it (checked all the same). scripts/install-deps.sh installs it as
# /usr/local/sbin/criu.
#
# Not Debian 12's criu: 3.17 fails `criu check` on current kernels (6.18: its vDSO layout),
# and 4.1.1 (Debian 13) cannot checkpoint a TCP socket on them (getsockopt SO_PASSCRED, which
# the kernel refuses); 4.2.1 does both (docs/ARCHITECTURE.md, "Checkpoints"). Only the criu
# binary is built (`make criu`: no crit, no plugins); it links against the libraries of its
# build dependencies (libprotobuf-c, libnl-3, libnet, libgnutls, ...), which stay installed.
# Debian drops a version from its pool when sid moves on: the download then fails, and the
# message says what to do.
set -euo pipefail

version=4.2.1
sha256=29ec0ee09e296479fe7048c80980e8ef1d0684d0b0204c2b101dfea19f6725b9
# Plain http, as apt's default sources: the sha256 is what vouches for the tarball.
url=http://deb.debian.org/debian/pool/main/c/criu/criu_$version.orig.tar.xz
me=criu
say() { printf '%s: %s\n' "$me" "$*" >&2; }
self=$(realpath "$0")

# The cache is by version and by what the build checks and does (this script, which pins
# the sha256): a binary built otherwise, or left there by someone else, is not taken for
# this one.
key=$(sha256sum <"$self" | cut -c1-12)
dir=${1:-${CELLBOX_CRIU_CACHE:-/var/cache/cellbox/criu/$version-$key}}
if [[ -x $dir/criu ]]; then
	echo "$dir/criu"
	exit 0
fi
mkdir -p "$dir"
work=$(mktemp -d "${TMPDIR:-/tmp}/cellbox-criu.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Build dependencies, by Debian's names (bookworm's versions build it): CRIU's own list
# (criu/Makefile.packages) and a C toolchain.
deps=(gcc make libc6-dev pkg-config libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev
	protobuf-compiler libnl-3-dev libnet1-dev libcap-dev libaio-dev python3-protobuf libbsd-dev
	libgnutls28-dev xz-utils)
[[ -n ${CELLBOX_CRIU_TARBALL:-} ]] || deps+=(curl)
missing=()
for p in "${deps[@]}"; do
	[[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
	sudo=()
	((EUID == 0)) || ! command -v sudo >/dev/null || sudo=(sudo)
	if ! command -v apt-get >/dev/null || { ((EUID != 0)) && ((${#sudo[@]} == 0)); }; then
		say "missing build dependencies (Debian's names): ${missing[*]}"
		say "install them (apt-get, as root), then run this again"
		exit 1
	fi
	apt() {
		if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y "$@" >"$work/apt.log" 2>&1 </dev/null; then
			say "apt-get $1 failed:"
			tail -n 30 "$work/apt.log" >&2
			exit 1
		fi
	}
	say "updating the package lists"
	apt update
	say "installing the build dependencies: ${missing[*]}"
	apt install --no-install-recommends "${missing[@]}"
fi

tarball=${CELLBOX_CRIU_TARBALL:-}
if [[ -z $tarball ]]; then
	tarball=$work/criu_$version.orig.tar.xz
	say "downloading $url"
	if ! curl -fsS --retry 3 -o "$tarball" "$url"; then
		say "could not download $url (above). If Debian has dropped $version from its pool, either"
		say "  point CELLBOX_CRIU_TARBALL at a copy of criu_$version.orig.tar.xz (https://snapshot.debian.org/package/criu/ keeps every version), or"
		say "  set version and sha256 in $self to the criu in http://deb.debian.org/debian/pool/main/c/criu/ (the .dsc lists its sha256),"
		say "  and check that it passes \`criu check\` and checkpoints a sandbox (docs/ARCHITECTURE.md, \"Checkpoints\")"
		exit 1
	fi
elif [[ ! -f $tarball ]]; then
	say "CELLBOX_CRIU_TARBALL=$tarball: no such file"
	exit 1
fi
got=$(sha256sum <"$tarball" | cut -c1-64)
if [[ $got != "$sha256" ]]; then
	say "${CELLBOX_CRIU_TARBALL:-$url} is not criu_$version.orig.tar.xz: its sha256 is $got, not $sha256"
	say "use a good copy (CELLBOX_CRIU_TARBALL=path), or, for another version, set version and sha256 in $self"
	exit 1
fi
tar -xJf "$tarball" -C "$work"
src=$work/criu-$version
[[ -d $src ]] || {
	say "$tarball holds no criu-$version folder"
	exit 1
}

say "building criu $version (about 25 s on 2 cores)"
if ! make -C "$src" -j"$(nproc)" criu >"$work/make.log" 2>&1 </dev/null; then
	say "make criu failed:"
	tail -n 30 "$work/make.log" >&2
	exit 1
fi
cp "$src/criu/criu" "$dir/criu.new"
got=$("$dir/criu.new" --version 2>&1 | head -n 1) || true
if [[ $got != "Version: $version" ]]; then
	say "the built criu does not run as criu $version: $got"
	rm -f "$dir/criu.new"
	exit 1
fi
mv "$dir/criu.new" "$dir/criu"
say "built $dir/criu"
# What checkpoints need of the kernel and of this user; a failure does not undo the build
# (it may be this user's, or fixed by a kernel option), but checkpoints will not work.
if out=$("$dir/criu" check 2>&1); then
	say "criu check: $(tail -n 1 <<<"$out")"
else
	say "criu check FAILED: $(tail -n 1 <<<"$out")"
	say "criu is built, but checkpoints will not work here until \`$dir/criu check\` (as root) passes"
fi
echo "$dir/criu"

#!/usr/bin/env bash
# install-deps.sh [--test]: installs what cellbox needs to run on Debian or Ubuntu, and with
# --test what its tests need too. Idempotent: quiet when everything is there, and it touches
# apt (update, install) only when something is missing. Go itself is not installed here.
set -euo pipefail

me=install-deps
say() { printf '%s: %s\n' "$me" "$*" >&2; }

with_test=0
for arg in "$@"; do
	case $arg in
	--test) with_test=1 ;;
	-h | --help)
		echo "usage: $0 [--test]   (--test: also what the tests need)"
		exit 0
		;;
	*)
		say "unknown argument $arg (usage: $0 [--test])"
		exit 2
		;;
	esac
done

# What cellbox runs on: OCI runtimes (runsc is gVisor, in Debian since 12), ext4 images for
# workspace quotas, the Python kernel's packages (from Debian; no pip), fonts for matplotlib,
# the tools sandboxes are set up with, and debootstrap for `cellbox image build`; for the
# other languages' kernels on the host's root, Node.js and acorn (its parser), and R with
# the packages its runner uses.
pkgs=(runc crun runsc iptables e2fsprogs mount python3 python3-ipython python3-numpy python3-pandas
	python3-matplotlib python3-matplotlib-inline python3-scipy fonts-dejavu-core
	iproute2 procps ca-certificates debootstrap node-acorn r-base-core r-cran-jsonlite r-cran-repr)
# What the tests need: make and git; gcc and libc6-dev for cgo (go test -race); Node.js and
# npm for the MCP and E2B client tests; chromium for the web page's browser test; Debian's
# Docker engine for the docker backend's, and curl to ask it whether it runs
# (scripts/with-dockerd.sh starts it); pydantic, for the kernel tools' schemas of pydantic
# models (internal/guest/pyrunner); nbformat, which checks the notebooks that
# /v1/notebooks/execute and cellbox run write; Jupyter's own clients of the kernel gateway
# (internal/jupyter: jupyter_server, nbclient and its websocket client, Notebook 6) and
# ipykernel with jupyter_client, the reference of its benchmark.
test_pkgs=(make git gcc libc6-dev chromium docker.io curl iproute2 python3-pip python3-requests python3-pydantic python3-nbformat
	python3-jupyter-server python3-nbclient python3-websocket jupyter-notebook python3-ipykernel python3-jupyter-client)

if [[ ! -r /etc/os-release ]] || ! grep -qiE '^(ID|ID_LIKE)=.*(debian|ubuntu)' /etc/os-release ||
	! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
	say "this script knows Debian and Ubuntu only. Install these with your package manager:"
	say "  ${pkgs[*]}"
	say "  nodejs"
	((with_test)) && say "  and for the tests: ${test_pkgs[*]} npm"
	say "(names are Debian's; e.g. python3-ipython is IPython for the system's python3)"
	exit 1
fi

missing=()
for p in "${pkgs[@]}"; do
	[[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
done
if ((with_test)); then
	for p in "${test_pkgs[@]}"; do
		[[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
	done
	command -v npm >/dev/null || missing+=(npm)
fi
# Node.js may come from elsewhere (NodeSource's nodejs carries its own npm, and conflicts
# with Debian's npm): go by the commands, not the packages.
command -v node >/dev/null || missing+=(nodejs)
sudo=()
((EUID == 0)) || ! command -v sudo >/dev/null || sudo=(sudo)

if ((${#missing[@]} > 0)); then
	if ((EUID != 0)) && ((${#sudo[@]} == 0)); then
		say "missing: ${missing[*]}"
		say "run this script as root, or install sudo, to install them"
		exit 1
	fi

	log=$(mktemp "${TMPDIR:-/tmp}/install-deps.XXXXXX")
	trap 'rm -f "$log"' EXIT
	apt() {
		if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y "$@" >"$log" 2>&1 </dev/null; then
			say "apt-get $1 failed:"
			tail -n 30 "$log" >&2
			exit 1
		fi
	}
	say "updating the package lists"
	apt update
	say "installing: ${missing[*]}"
	apt install --no-install-recommends "${missing[@]}"
fi

# gVisor, current: Debian's runsc is of 2022 (docs/security.md lists its bugs). runsc is
# built at the version tools/runsc pins (scripts/runsc.sh; Go needed, as for cellbox) and
# installed as /usr/local/bin/runsc, ahead of Debian's /usr/bin/runsc in PATH. A build that
# fails fails this script. Sandboxes that outlive a server across the swap are then driven
# by the new runsc's commands (kill, delete): end them first (docs/security.md).
# install_built DST WHY CMD...: CMD builds a binary (cached) and prints its path, which is
# installed as DST when it differs; a build that fails says WHY and fails this script.
install_built() {
	local dst=$1 why=$2 built
	shift 2
	if ! built=$("$@"); then
		say "$why"
		exit 1
	fi
	if ! cmp -s "$built" "$dst"; then
		say "installing $dst ($("$built" --version | head -n 1))"
		"${sudo[@]}" install -m 0755 "$built" "$dst"
	fi
}
# GO (from make, which finds it before sudo's PATH would not) names the go command.
install_built /usr/local/bin/runsc \
	"could not build gVisor's runsc (above): cellbox's gVisor is that build (Debian's runsc is of 2022, and not supported)" \
	"${sudo[@]}" env ${GO:+GO="$GO"} "$(dirname "$0")/runsc.sh"

# CRIU, for checkpoints of runc sandboxes: Debian 12's criu 3.17 fails `criu check` on
# current kernels (its vDSO layout), and 4.1.1 cannot checkpoint a TCP socket on them. CRIU
# is built from Debian's source tarball at the version scripts/criu.sh pins (its build
# dependencies from apt) and installed as /usr/local/sbin/criu, ahead of Debian's
# /usr/sbin/criu in PATH. A build that fails fails this script; when Debian's pool no
# longer has the tarball, CELLBOX_CRIU_TARBALL names a copy (scripts/criu.sh says more).
install_built /usr/local/sbin/criu \
	"could not build CRIU (above): cellbox's checkpoints need it (Debian 12's criu 3.17 does not work on current kernels)" \
	"${sudo[@]}" env ${CELLBOX_CRIU_TARBALL:+CELLBOX_CRIU_TARBALL="$CELLBOX_CRIU_TARBALL"} "$(dirname "$0")/criu.sh"

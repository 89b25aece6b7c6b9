#!/usr/bin/env bash
# The web page's weight and load time in Debian's chromium (docs/benchmarks.md): starts
# `cellbox serve` (runc, no warm pool: the page alone is measured) on a free loopback port
# with a state dir of its own, runs internal/web/testdata/browser/bench.mjs, stops it.
#   scripts/bench-web.sh [loads=10]     (as root, after make build)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=internal/web/testdata/browser
[[ -x bin/cellbox ]] || { echo "bin/cellbox missing: run make build" >&2; exit 1; }
command -v chromium >/dev/null || { echo "chromium missing: scripts/install-deps.sh --test installs it" >&2; exit 1; }
[[ -d $dir/node_modules ]] || npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
state=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
./bin/cellbox serve --addr "127.0.0.1:$port" --state-dir "$state" --pool-size 0 --end-sessions-on-exit >"$state/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$state"' EXIT
for _ in $(seq 120); do
	curl -sf "127.0.0.1:$port/healthz" >/dev/null && break
	kill -0 $pid 2>/dev/null || { cat "$state/serve.log" >&2; exit 1; }
	sleep 0.5
done
cd "$dir"
node bench.mjs "http://127.0.0.1:$port/" "$(command -v chromium)" "${1:-10}"

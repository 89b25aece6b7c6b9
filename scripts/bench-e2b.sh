#!/usr/bin/env bash
# Latency of the E2B-compatible API through E2B's official JS SDK (docs/benchmarks.md):
# starts `cellbox serve` (runc, warm pool of 2) on a free loopback port with a state dir of
# its own, runs internal/e2b/testdata/e2bclient/bench.mjs against it, stops it.
#   scripts/bench-e2b.sh [creates=20] [roundtrips=300]     (as root, after make build)
set -euo pipefail
cd "$(dirname "$0")/.."
client=internal/e2b/testdata/e2bclient
[[ -x bin/cellbox ]] || { echo "bin/cellbox missing: run make build" >&2; exit 1; }
[[ -d $client/node_modules ]] || npm ci --prefix "$client" --no-audit --no-fund --loglevel=error
state=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
./bin/cellbox serve --addr "127.0.0.1:$port" --state-dir "$state" --end-sessions-on-exit >"$state/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$state"' EXIT
for _ in $(seq 120); do
	pool=$(curl -sf "127.0.0.1:$port/healthz" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pool"])' 2>/dev/null || true)
	[[ $pool == 2 ]] && break
	kill -0 $pid 2>/dev/null || { cat "$state/serve.log" >&2; exit 1; }
	sleep 0.5
done
echo "server on 127.0.0.1:$port, warm pool full; running the SDK" >&2
cd "$client"
E2B_API_URL="http://127.0.0.1:$port" E2B_SANDBOX_URL="http://127.0.0.1:$port" E2B_API_KEY=e2b_bench \
	node bench.mjs "${1:-20}" "${2:-300}"

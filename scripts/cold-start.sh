#!/bin/bash
# cold-start.sh BIN [N]: the CPU one cold session costs (create → print(1+1) → delete, N of
# them one after another, no warm pool), counted over the server's own cgroup subtree only
# (the server, runc, the kernel template, the sandboxes), so that other work on the machine
# is not; and by process name (perf record -a -G, a sample every 0.1 ms of CPU).
# As root, on cgroup v2 or a hybrid v1 host; docs/benchmarks.md, "Cold start", has figures.
set -eu
BIN=$(realpath "$1"); N=${2:-30}
PORT=${PORT:-18181}; CG=cellbox-cold
OUT=$(mktemp -d /tmp/cellbox-cold.XXXXXX)
if [ -d /sys/fs/cgroup/unified ]; then V2=/sys/fs/cgroup/unified; else V2=/sys/fs/cgroup; fi
mkdir -p "$V2/$CG/srv"
# The total: v1's cpuacct where there is one (hybrid), else v2's cpu.stat.
if [ -d /sys/fs/cgroup/cpuacct ]; then
  mkdir -p /sys/fs/cgroup/cpuacct/$CG/srv
  join="echo \$\$ > $V2/$CG/srv/cgroup.procs; echo \$\$ > /sys/fs/cgroup/cpuacct/$CG/srv/cgroup.procs"
  cpu() { echo $(( $(cat /sys/fs/cgroup/cpuacct/$CG/cpuacct.usage) / 1000 )); }
else
  join="echo \$\$ > $V2/$CG/srv/cgroup.procs"
  cpu() { awk '/^usage_usec/ {print $2}' "$V2/$CG/cpu.stat"; }
fi
# Sandboxes' cgroups under the same parent (a relative one would be the server's parent's).
bash -c "$join; exec $BIN serve --addr 127.0.0.1:$PORT --state-dir $OUT/state --pool-size 0 --cgroup-parent /$CG/sb --log-level debug ${SERVEFLAGS:-}" >"$OUT/serve.log" 2>&1 &
SPID=$!
trap 'kill $SPID 2>/dev/null; wait $SPID 2>/dev/null; rm -rf "$OUT/state"' EXIT
for _ in $(seq 100); do curl -sf 127.0.0.1:$PORT/healthz >/dev/null && break; sleep 0.2; done
one() {
  id=$(curl -sf -XPOST 127.0.0.1:$PORT/v1/sessions -d '{}' | sed -E 's/.*"id":"([^"]+)".*/\1/')
  curl -sf -XPOST 127.0.0.1:$PORT/v1/sessions/$id/execute -d '{"code":"print(1+1)"}' >/dev/null
  curl -sf -XDELETE 127.0.0.1:$PORT/v1/sessions/$id >/dev/null
}
for _ in 1 2 3; do one; done # the template ready, the page cache warm
sleep 3
c0=$(cpu); t0=$(date +%s%N)
perf record -q -e cpu-clock -c 100000 -a -G $CG -g -o "$OUT/perf.data" -- \
  bash -c "$(declare -f one); PORT=$PORT; for i in \$(seq $N); do one; done"
c1=$(cpu); t1=$(date +%s%N)
echo "$N cold sessions: $(( (t1 - t0) / 1000000 / N )) ms wall, $(( (c1 - c0) / 1000 / N )) ms CPU each (cgroup); by process:"
perf report -i "$OUT/perf.data" --no-children --sort comm --stdio -g none -F sample,comm 2>/dev/null |
  grep -v '^#' | grep -v '^$' | awk -v n=$N '{printf "%8.1f ms  %s\n", $1 * 0.1 / n, $2}' | sort -rn | head -12
echo "phases (median of the debug log's \"sandbox started\"):"
grep 'sandbox started' "$OUT/serve.log" | tail -n $N | grep -oE '(workspace|runtime|connect|configure)=[0-9.]+(ms|µs)' |
  awk -F= '{v=$2; if (v ~ /µs/) v=v/1000; else v=v+0; print $1, v}' | sort -k1,1 -k2,2n |
  awk '{a[$1]=a[$1] " " $2; n[$1]++} END {for (k in a) {split(substr(a[k],2),x," "); printf "  %-9s %6.1f ms\n", k, x[int((n[k]+1)/2)]}}'
echo "perf data: $OUT/perf.data"

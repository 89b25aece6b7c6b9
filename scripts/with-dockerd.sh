#!/usr/bin/env bash
# with-dockerd.sh CMD [ARGS...]: runs CMD with a Docker engine answering at DOCKER_HOST (or
# the default socket). When none answers, it starts Debian's dockerd for the command, with
# gVisor's runsc as a runtime named runsc (flags as cellbox's runc backend gives it), and
# stops it afterwards; an engine that was running already is used as it is and left alone.
set -euo pipefail

me=with-dockerd
say() { printf '%s: %s\n' "$me" "$*" >&2; }
(($# > 0)) || { say "usage: $0 CMD [ARGS...]"; exit 2; }

sock=/var/run/docker.sock
host=${DOCKER_HOST:-unix://$sock}
answers() { curl -fsS --max-time 2 --unix-socket "${host#unix://}" http://docker/_ping >/dev/null 2>&1; }

if [[ $host != unix://* ]] || answers; then
	exec "$@"
fi
if ((EUID != 0)); then
	say "no Docker engine answers at $host, and starting one needs root"
	exit 1
fi
command -v dockerd >/dev/null || { say "dockerd not found: apt-get install docker.io (scripts/install-deps.sh --test)"; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/cellbox-dockerd.XXXXXX")
runtimes=
if runsc=$(command -v runsc); then
	runtimes=$(printf '"runtimes": {"runsc": {"path": "%s", "runtimeArgs": ["--network=none", "--oci-seccomp"]}},' "$runsc")
fi
printf '{%s "log-level": "warn"}\n' "$runtimes" >"$dir/daemon.json"
say "starting dockerd (log: $dir/dockerd.log)"
dockerd --config-file "$dir/daemon.json" --host "$host" --pidfile "$dir/dockerd.pid" >"$dir/dockerd.log" 2>&1 &
pid=$!
stop() {
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$dir"
}
trap stop EXIT
for _ in $(seq 1 300); do
	answers && break
	if ! kill -0 "$pid" 2>/dev/null; then
		say "dockerd exited:"
		tail -n 30 "$dir/dockerd.log" >&2
		exit 1
	fi
	sleep 0.2
done
answers || { say "dockerd does not answer after 60 s:"; tail -n 30 "$dir/dockerd.log" >&2; exit 1; }
"$@"

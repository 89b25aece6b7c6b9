#!/usr/bin/env bash
# stage.sh NAME CMD [ARGS...]: runs CMD as one stage of `make test`, then says on stderr how
# long it took. With CELLBOX_STAGE_TIMES naming a file, it also appends a line
# "SECONDS<TAB>EXIT<TAB>NAME" there: .ci/run prints them as a table at its end. CMD's output
# and exit status are its own.
set -uo pipefail
(($# > 1)) || { echo "usage: $0 NAME CMD [ARGS...]" >&2; exit 2; }
name=$1
shift
start=$(date +%s)
"$@"
rc=$?
secs=$(($(date +%s) - start))
failed=
((rc == 0)) || failed=", failed (exit $rc)"
printf '== stage %s: %dm%02ds%s\n' "$name" $((secs / 60)) $((secs % 60)) "$failed" >&2
if [[ -n ${CELLBOX_STAGE_TIMES:-} ]]; then
	printf '%s\t%s\t%s\n' "$secs" "$rc" "$name" >>"$CELLBOX_STAGE_TIMES"
fi
exit "$rc"

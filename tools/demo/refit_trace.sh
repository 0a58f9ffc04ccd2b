#!/bin/sh
# tools/demo/refit_trace.sh LOG [VERSION] - one refit's log lines from a
# run at --log-level trace (wstream-demo, wstream-bench: agents and
# senders in one log), each prefixed with ms since the agent's BEGIN of
# that version, up to the refit's end. VERSION defaults to the last one
# the log began. Heartbeats are left out.
#
# What it shows (NOTES.md, "The direct path, traced"): when READY went
# out and the first credits came back, when each layer's LAYER_DONE, check,
# repack and finalize happened, and the commit's tail, to the microsecond
# (log stamps are in µs). Lines are as the processes wrote them; with
# several agents, the first agent whose BEGIN names VERSION sets zero.
set -eu
log=${1:?usage: tools/demo/refit_trace.sh LOG [VERSION]}
version=${2:-$(grep -oE 'refit: start v[0-9]+$' "$log" | tail -1 | grep -oE '[0-9]+$' || true)}
[ -n "$version" ] || {
    echo "refit_trace.sh: no 'refit: start v<N>' line in $log (run at --log-level trace)" >&2
    exit 1
}
t0=$(grep -E "refit: start v$version\$" "$log" | head -1 | awk '{print $1}')
[ -n "$t0" ] || {
    echo "refit_trace.sh: version $version did not begin in $log" >&2
    exit 1
}
awk -v t0="$t0" -v v="$version" '
$1 ~ /^[0-9]+\.[0-9]+$/ && !/: heartbeat$/ {
    t = ($1 - t0) * 1000
    if (t > -5 && !done)
        printf "%9.3f %s\n", t, substr($0, index($0, $2))
    if ($0 ~ ("refit: end v" v "$"))
        done = 1
}' "$log"

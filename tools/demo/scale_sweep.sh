#!/usr/bin/env bash
# scale_sweep.sh - the scale test's sweep (issue 21 item 1): wstream-demo
# with deepseek-v3-narrow at several sender, agent, layer and expert
# counts, one CSV row per run (columns: wstream-demo --help).
#
# usage: scale_sweep.sh DEMO CSV [senders|agents|layers|trainer|experts|all]
#
# Every run passes the same settings besides the one varied: 3 refits,
# the checkpoint loader, transport auto, heartbeats every 2 s and a 30 s
# peer timeout (a loaded 2-core host starves ~100 processes for seconds).
set -euo pipefail

demo=$1
csv=$2
which=${3:-all}
common=(--preset deepseek-v3-narrow --loader checkpoint --refits 3
    --heartbeat 2 --peer-timeout 30 --timeout 120 --csv "$csv")

# A failed run is reported and the sweep goes on (its row, if any, says
# verified 0).
run() {
    local out rc=0
    echo "scale_sweep: $*" >&2
    out=$("$demo" "${common[@]}" "$@" 2>&1) || rc=$?
    grep -E '^(scale|wstream-demo): ' <<<"$out" >&2 || true
    [ "$rc" -eq 0 ] || echo "scale_sweep: FAILED (exit $rc): $*" >&2
}

case $which in senders | all)
    for s in 8 16 32 64; do run --senders "$s" --receivers 16; done ;;
esac
case $which in agents | all)
    for k in 2 4 8 16; do run --senders 64 --receivers "$k"; done ;;
esac
case $which in layers | all)
    for l in 8 16 32; do run --senders 64 --receivers 16 --layers "$l"; done ;;
esac
case $which in trainer | all)
    for t in 1 8; do run --senders 64 --receivers 16 --trainer-tp "$t"; done ;;
esac
case $which in experts | all)
    for e in 64 128; do run --senders 64 --receivers 16 --experts "$e"; done ;;
esac

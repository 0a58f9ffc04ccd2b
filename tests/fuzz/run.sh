#!/usr/bin/env bash
# run.sh - runs every libFuzzer harness of a fuzz build for a bounded time
# from its seed corpus; fails if any of them finds a crash, a leak, a
# sanitizer report or a timeout.
#
# usage: run.sh BUILD_DIR SECONDS
#
# BUILD_DIR was configured with CC=clang -DWST_FUZZ=ON and built with
# --target fuzz; each BUILD_DIR/bin/fuzz_NAME runs for SECONDS seconds
# from tests/fuzz/corpus/NAME (none: an empty one). New inputs go to a
# scratch folder (WST_FUZZ_OUT, or a new temp folder), never into the
# tree; a crash leaves its input there, named crash-*, and the log beside
# it. The execution count of each harness is printed.
set -euo pipefail

if [ "$#" -ne 2 ] || ! [ "$2" -gt 0 ] 2>/dev/null; then
    echo "usage: $0 BUILD_DIR SECONDS" >&2
    exit 2
fi
build=$1
secs=$2
here=$(cd "$(dirname "$0")" && pwd)
out=${WST_FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/wst-fuzz.XXXXXX")}
mkdir -p "$out"

shopt -s nullglob
harnesses=("$build"/bin/fuzz_*)
if [ "${#harnesses[@]}" -eq 0 ]; then
    echo "run.sh: no fuzz_* harness in $build/bin (configure with CC=clang -DWST_FUZZ=ON, build --target fuzz)" >&2
    exit 2
fi

failed=0
for bin in "${harnesses[@]}"; do
    name=${bin##*/fuzz_}
    seeds="$here/corpus/$name"
    [ -d "$seeds" ] || seeds=
    mkdir -p "$out/$name/new"
    log="$out/$name/log"
    rc=0
    # -timeout: one input taking 10 s is a hang; -rss_limit_mb: one
    # growing past 2 GB is a leak or an unbounded allocation.
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$out/$name/" \
        "$out/$name/new" ${seeds:+"$seeds"} >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    finds=$(find "$out/$name/new" -type f | wc -l)
    if [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
        echo "fuzz[$name]: FAIL (exit $rc) after ${execs:-?} executions; input and log in $out/$name:" >&2
        grep -E -A25 '^==[0-9]+==|runtime error|^fuzz_' "$log" | head -40 >&2 || tail -n 30 "$log" >&2
    else
        echo "fuzz[$name]: ${execs:-?} executions in $secs s, no crash ($finds new inputs in $out/$name/new)"
    fi
done
echo "fuzz: $((${#harnesses[@]} - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]

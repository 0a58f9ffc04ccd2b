#!/usr/bin/env bash
# demo_expect.sh - a wstream-demo run that must end in a given way.
#
# usage: demo_expect.sh DEMO EXIT PATTERN [PATTERN...] -- [DEMO ARGS...]
#
# Passes only when the demo exits with status EXIT ("nonzero": any status
# but 0) and its output (stdout and stderr) matches every extended regex
# PATTERN. For refusals (the exit status is the negated wst_status_t) and
# faults, where the demo must fail in one precise way.
set -euo pipefail

if [ "$#" -lt 4 ]; then
    echo "usage: $0 DEMO EXIT PATTERN... -- [DEMO ARGS...]" >&2
    exit 2
fi
demo=$1
want=$2
shift 2
patterns=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
    patterns+=("$1")
    shift
done
[ "$#" -gt 0 ] && shift

echo "demo_expect: $demo $*"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
"$demo" "$@" >"$out" 2>&1 || rc=$?
grep -v "UCX  WARN" "$out" || true

fail() {
    echo "demo_expect: FAIL: $*" >&2
    exit 1
}

if [ "$want" = "nonzero" ]; then
    [ "$rc" -ne 0 ] || fail "demo exited 0, expected a failure"
else
    [ "$rc" -eq "$want" ] || fail "demo exited $rc, expected $want"
fi
for p in "${patterns[@]}"; do
    grep -Eq -- "$p" "$out" || fail "no line matches '$p'"
done
echo "demo_expect: PASS (exit $rc)"

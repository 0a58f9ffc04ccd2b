#!/bin/sh
# demo_trace.sh DEMO TRACE_SCRIPT - a traced refit read back by
# tools/demo/refit_trace.sh: a tiny-moe demo at --log-level trace, then
# the last refit's lines must count from the agent's BEGIN (0.000; lines
# of the 5 ms before it come first, negative), hold its
# READY, every layer's check, repack and finalize, its commit, and end
# with its end, in microsecond stamps; a log without trace lines is
# refused with a clear error.
set -u
demo=$1
trace=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$demo" --preset tiny-moe --senders 1 --receivers 1 --refits 2 \
    --transport tcp --log-level trace >"$dir/log" 2>&1 ||
    fail "the demo failed: $(tail -3 "$dir/log")"
"$trace" "$dir/log" >"$dir/out" 2>"$dir/err" || fail "$(cat "$dir/err")"
grep -qE '^ +0\.000 wstream\[agent\[0\]\] trace: refit: start v2$' "$dir/out" ||
    fail "no start of version 2 at 0.000: $(head -3 "$dir/out")"
awk '$1 < -5 {exit 1}' "$dir/out" || fail "a line from before the window"
tail -1 "$dir/out" | grep -qE '^ +[0-9]+\.[0-9]{3} wstream\[agent\[0\]\] trace: refit: end v2$' ||
    fail "last line: $(tail -1 "$dir/out")"
for want in 'refit: ready v2' 'refit: verify r0 L0 ' 'refit: repack L' \
    'refit: final L0 ' 'refit: prepared v2' 'refit: commit r0 v2'; do
    grep -qF "$want" "$dir/out" || fail "no '$want' line"
done
grep -q ': heartbeat$' "$dir/out" && fail "heartbeats were kept"
# The stamps are microseconds: six digits after the second.
grep -qE '^[0-9]+\.[0-9]{6} wstream\[agent\[0\]\] trace: refit: start v2$' "$dir/log" ||
    fail "the log's stamps are not in microseconds"
# Version 1 by name.
"$trace" "$dir/log" 1 | grep -qE '^ +0\.000 .*refit: start v1$' ||
    fail "version 1 was not found"
"$trace" "$dir/log" 1 | tail -1 | grep -qF 'refit: end v1' ||
    fail "version 1 did not end with its end"
# A log without trace lines.
grep -v 'trace:' "$dir/log" >"$dir/plain"
if "$trace" "$dir/plain" >/dev/null 2>"$dir/err"; then
    fail "a log without trace lines was read"
fi
grep -qF 'run at --log-level trace' "$dir/err" || fail "unclear error: $(cat "$dir/err")"
echo "PASS: $(wc -l <"$dir/out") lines of refit 2, $(tail -1 "$dir/out" | awk '{print $1}') ms"

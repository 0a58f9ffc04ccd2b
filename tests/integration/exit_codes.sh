#!/usr/bin/env bash
# exit_codes.sh - every wstream program exits 2 on bad usage, names the
# bad flag, and lists its exit codes in --help (issue 20).
#
# usage: exit_codes.sh AGENT SEND DEMO BENCH TOPOLOGY STANDIN MODEL
set -uo pipefail

if [ "$#" -ne 7 ]; then
    echo "usage: $0 AGENT SEND DEMO BENCH TOPOLOGY STANDIN MODEL" >&2
    exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/wst-exit.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
    echo "exit_codes: FAIL: $*" >&2
    sed 's/^/    | /' "$work/out" >&2
    failures=$((failures + 1))
}

# usage_error PROG PATTERN ARGS...: exits 2 within 10 s, saying PATTERN.
usage_error() {
    local prog=$1 pattern=$2 rc=0
    shift 2
    timeout 10 "$prog" "$@" >"$work/out" 2>&1 </dev/null || rc=$?
    if [ "$rc" -ne 2 ]; then
        fail "$(basename "$prog") $*: exit $rc, want 2"
    elif ! grep -q -- "$pattern" "$work/out"; then
        fail "$(basename "$prog") $*: no '$pattern' in its output"
    else
        echo "exit_codes: $(basename "$prog") $*: 2, $(head -1 "$work/out")"
    fi
}

# help_lists_codes PROG: --help exits 0 and has an "exit codes:" line
# naming 2 as bad usage.
help_lists_codes() {
    local rc=0
    "$1" --help >"$work/out" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "$(basename "$1") --help: exit $rc"
    elif ! grep -q "^exit codes: .*" "$work/out" ||
        ! grep -q "2 bad usage" "$work/out"; then
        fail "$(basename "$1") --help lists no exit codes"
    fi
}

for prog in "$@"; do
    usage_error "$prog" "--no-such-flag" --no-such-flag
    help_lists_codes "$prog"
done
agent=$1 send=$2 standin=$6 model=$7
usage_error "$agent" "--layout is required" --listen 127.0.0.1:0
usage_error "$agent" "log-level" --layout /nonexistent --log-level loud
WST_LOG_LEVEL=loud usage_error "$agent" "WST_LOG_LEVEL" --layout /nonexistent
usage_error "$send" "--receivers" /nonexistent.safetensors --version 1
usage_error "$standin" "are required" --socket "$work/sock"
usage_error "$model" "ep 7 must divide" --model deepseek-v3 --inference-ep 7

# A --workdir that does not exist yet is made (with its parents, 0700); one
# that cannot be is named with the reason.
demo=$3 rc=0
timeout 60 "$demo" --preset dense:1 --senders 1 --receivers 1 --refits 1 \
    --workdir "$work/new/dir" >"$work/out" 2>&1 </dev/null || rc=$?
if [ "$rc" -ne 0 ] || [ "$(stat -c %a "$work/new/dir" 2>/dev/null)" != 700 ]; then
    fail "wstream-demo --workdir (missing folder): exit $rc"
else
    echo "exit_codes: wstream-demo --workdir made $work/new/dir (0700)"
fi
touch "$work/file"
rc=0
timeout 10 "$demo" --preset dense:1 --workdir "$work/file/x" >"$work/out" \
    2>&1 </dev/null || rc=$?
if [ "$rc" -eq 0 ] || ! grep -q "cannot create $work/file/x" "$work/out"; then
    fail "wstream-demo --workdir under a file: exit $rc, no reason given"
fi

[ "$failures" -eq 0 ] || exit 1
echo "exit_codes: ok"

#!/usr/bin/env bash
# agent_private.sh - wstream-agent refuses, at start, a layout whose regions
# would be its own memory, unless run with --private-memory
# (receiver/agent/region_memory.h).
#
# usage: agent_private.sh AGENT
#
# A region in no "shm", "cuda_ipc" or "allocations" entry is memory no
# engine sees: a refit would commit there while /readyz says ready. Such a
# layout (all regions, or one region of an "allocations" layout) must exit
# 18 (WST_ERR_CONFIG) naming the regions and the flag, before it writes a
# port; --private-memory, or WST_PRIVATE_MEMORY=yes, makes it start and say
# so in its log.
set -euo pipefail

if [ "$#" -ne 1 ]; then
    echo "usage: $0 AGENT" >&2
    exit 2
fi
agent=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/wst-priv.XXXXXX")
shm="wst-priv-$$"
pid=

cleanup() {
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    rm -f "/dev/shm/$shm"
    rm -rf "$work"
}
trap cleanup EXIT

say() { echo "agent_private: $*"; }
fail() {
    echo "agent_private: FAIL: $*" >&2
    [ -f "$work/log" ] && sed 's/^/    | /' "$work/log" >&2
    exit 1
}

head -c 32 /dev/urandom >"$work/secret"
chmod 600 "$work/secret"

# refused LAYOUT PATTERN: exit 18 within 10 s, PATTERN logged, no port.
refused() {
    local rc=0
    rm -f "$work/port"
    timeout 10 "$agent" --layout "$1" --listen 127.0.0.1:0 \
        --auth-secret-file "$work/secret" \
        --port-file "$work/port" >"$work/log" 2>&1 || rc=$?
    [ "$rc" -eq 18 ] || fail "$(basename "$1"): the agent exited $rc, expected 18"
    grep -Eq -- "$2" "$work/log" || fail "$(basename "$1"): no log line matches '$2'"
    [ -e "$work/port" ] && fail "$(basename "$1"): the agent wrote a port"
    say "$(basename "$1") refused: $(grep -E -- "$2" "$work/log" | head -1)"
}

# started LAYOUT [ENV...] -- FLAGS: the agent writes its port, logs that
# its memory is private, and stops on SIGTERM.
started() {
    local layout=$1 envs=()
    shift
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    rm -f "$work/port"
    env "${envs[@]}" "$agent" --layout "$layout" --listen 127.0.0.1:0 \
        --auth-secret-file "$work/secret" \
        --port-file "$work/port" "$@" >"$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do
        [ -s "$work/port" ] && break
        kill -0 "$pid" 2>/dev/null || fail "$(basename "$layout") $*: the agent exited"
        sleep 0.05
    done
    [ -s "$work/port" ] || fail "$(basename "$layout") $*: the agent wrote no port"
    grep -Eq "layout .*: 2 regions in agent-private memory \(--private-memory\)" \
        "$work/log" || fail "$(basename "$layout") $*: no private-memory line"
    kill "$pid"
    wait "$pid" || true
    pid=
    say "$(basename "$layout") ${envs[*]} $* started"
}

flag_hint='give --private-memory \(WST_PRIVATE_MEMORY=yes\) to serve private memory on purpose'

cat >"$work/private.json" <<JSON
{"format": 1, "rank": 0,
 "regions": [{"name": "a", "bytes": 4096}, {"name": "b", "bytes": 4096}],
 "wants": []}
JSON
refused "$work/private.json" \
    "layout .*private.json: 2 of 2 regions \(the first 'a'\) are in no \"shm\", \"cuda_ipc\" or \"allocations\" entry: the agent would allocate them itself, where no engine sees what a refit commits; name the engine's memory in the layout, or $flag_hint"
grep -q "start-up failed: " "$work/log" || fail "private.json: no start-up failure line"

# One region of an "allocations" layout left out of them is refused too.
truncate -s 8192 "/dev/shm/$shm"
cat >"$work/mixed.json" <<JSON
{"format": 1, "rank": 0,
 "allocations": [{"name": "one", "shm": "/$shm", "bytes": 8192}],
 "regions": [{"name": "in", "allocation": "one", "offset": 0, "bytes": 4096},
             {"name": "out", "bytes": 4096}],
 "wants": []}
JSON
refused "$work/mixed.json" \
    "layout .*mixed.json: 1 of 2 regions \(the first 'out'\) are in no .*$flag_hint"

# Asked for, by flag or environment, it starts.
started "$work/private.json" -- --private-memory
started "$work/private.json" -- --private-memory=yes
started "$work/private.json" WST_PRIVATE_MEMORY=yes --
# ... and no says no.
rc=0
timeout 10 "$agent" --layout "$work/private.json" --listen 127.0.0.1:0 \
    --auth-secret-file "$work/secret" --private-memory=no \
    --port-file "$work/port" >"$work/log" 2>&1 || rc=$?
[ "$rc" -eq 18 ] || fail "--private-memory=no: the agent exited $rc, expected 18"
say PASS

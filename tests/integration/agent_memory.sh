#!/usr/bin/env bash
# agent_memory.sh - wstream-agent refuses, at start, a layout asking for
# more memory than the host has (receiver/agent/region_memory.h).
#
# usage: agent_memory.sh AGENT
#
# Regions the agent allocates itself are weighed against MemAvailable, the
# unbacked bytes of its shm objects (summed over "allocations") against
# their file system's free space; each
# refusal must name the region (or the object) and the numbers, and come
# before anything is mapped or allocated. A layout that fits still starts.
set -euo pipefail

if [ "$#" -ne 1 ]; then
    echo "usage: $0 AGENT" >&2
    exit 2
fi
agent=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/wst-mem.XXXXXX")
shm="wst-mem-$$"
pid=

cleanup() {
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    rm -f "/dev/shm/$shm" "/dev/shm/$shm-b"
    rm -rf "$work"
}
trap cleanup EXIT

say() { echo "agent_memory: $*"; }
fail() {
    echo "agent_memory: FAIL: $*" >&2
    [ -f "$work/log" ] && sed 's/^/    | /' "$work/log" >&2
    exit 1
}

# A pebibyte: more than any host this runs on has, in memory or in
# /dev/shm (and, had the agent tried, more than its address space).
big=$((1 << 50))
avail=$(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024))
[ "$big" -gt "$avail" ] || fail "this host has $avail bytes available"

# The deployment's secret, as every agent needs one.
head -c 32 /dev/urandom >"$work/secret"
chmod 600 "$work/secret"

# refused LAYOUT PATTERN: the agent exits with WST_ERR_NO_MEMORY (1) at
# start, within 10 s, logging PATTERN. --private-memory: host.json's
# regions are the agent's own on purpose (agent_private.sh checks the flag).
refused() {
    local rc=0
    timeout 10 "$agent" --layout "$1" --listen 127.0.0.1:0 \
        --auth-secret-file "$work/secret" --private-memory \
        --port-file "$work/port" >"$work/log" 2>&1 || rc=$?
    [ "$rc" -eq 1 ] || fail "$(basename "$1"): the agent exited $rc, expected 1"
    grep -Eq -- "$2" "$work/log" || fail "$(basename "$1"): no log line matches '$2'"
    [ -e "$work/port" ] && fail "$(basename "$1"): the agent wrote a port"
    say "$(basename "$1") refused: $(grep -E -- "$2" "$work/log" | head -1)"
}

cat >"$work/host.json" <<JSON
{"format": 1, "rank": 0,
 "regions": [{"name": "small", "bytes": 4096},
             {"name": "huge", "bytes": $big}],
 "wants": []}
JSON
refused "$work/host.json" \
    "layout .*host.json: region 'huge' \($big bytes\) brings the memory the agent allocates to $((big + 4096)) bytes over 2 regions; this host has [0-9]+ bytes available \(MemAvailable in /proc/meminfo\)"

# A sparse object: its size is the layout's, none of it backed yet.
truncate -s "$big" "/dev/shm/$shm"
cat >"$work/shm.json" <<JSON
{"format": 1, "rank": 0, "shm": "/$shm", "shm_bytes": $big,
 "regions": [{"name": "all", "offset": 0, "bytes": $big}],
 "wants": []}
JSON
refused "$work/shm.json" \
    "layout .*shm.json: shared memory /$shm: shm_bytes $big \(1 region\) need $big bytes more than the object holds in pages, and its file system has [0-9]+ bytes free"

# Two objects each of which fits in /dev/shm's free space, but not both:
# the second is refused before either is populated.
free=$(df -B1 --output=avail /dev/shm | tail -1 | tr -d ' ')
part=$((free / 3 * 2 / 4096 * 4096))
truncate -s "$part" "/dev/shm/$shm"
truncate -s "$part" "/dev/shm/$shm-b"
cat >"$work/parts.json" <<JSON
{"format": 1, "rank": 0,
 "allocations": [{"name": "one", "shm": "/$shm", "bytes": $part},
                 {"name": "two", "shm": "/$shm-b", "bytes": $part}],
 "regions": [{"name": "a", "allocation": "one", "offset": 0, "bytes": 4096},
             {"name": "b", "allocation": "two", "offset": 0, "bytes": 4096},
             {"name": "c", "allocation": "two", "offset": 4096, "bytes": 4096}],
 "wants": []}
JSON
refused "$work/parts.json" \
    "layout .*parts.json: allocation \"two\": shared memory /$shm-b: bytes $part \(2 regions\) need $part bytes more than the object holds in pages, $((part * 2)) with the shm allocations before it, and its file system has [0-9]+ bytes free"
[ "$(du -k "/dev/shm/$shm" | cut -f1)" -eq 0 ] || fail "parts.json: /$shm was populated"
rm -f "/dev/shm/$shm-b"

# What fits starts: 1 MiB of the agent's own, and a 1 MiB object.
truncate -s 1M "/dev/shm/$shm"
sed -e "s/$big/1048576/g" "$work/shm.json" >"$work/shm-small.json"
sed -e "s/$big/1048576/g" "$work/host.json" >"$work/host-small.json"
for l in host-small shm-small; do
    rm -f "$work/port"
    "$agent" --layout "$work/$l.json" --listen 127.0.0.1:0 \
        --auth-secret-file "$work/secret" --private-memory \
        --port-file "$work/port" >"$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do
        [ -s "$work/port" ] && break
        kill -0 "$pid" 2>/dev/null || fail "$l: the agent exited"
        sleep 0.05
    done
    [ -s "$work/port" ] || fail "$l: the agent wrote no port"
    kill "$pid"
    wait "$pid" || true
    pid=
    say "$l.json started"
done
say PASS

#!/usr/bin/env bash
# tcp_segments.sh - a sender whose UCX tcp fragments would not fit its
# agent's receive segments is refused at hello, with a message naming both
# sizes and the variable, and the agent keeps running; a sender with
# smaller segments than its agent refits, every byte verified; an agent on
# the segment wstream sets runs it in UCX (a 1 MiB sender refits into it).
#
# usage: tcp_segments.sh BENCH AGENT
#
# UCX sizes a tcp fragment by its own UCX_TCP_RX_SEG_SIZE and receives it
# into a buffer sized by its own: before the hello carried the size, an
# agent with 64 KiB segments aborted inside UCX on a sender's 1 MiB
# fragments ("tcp_ep.c:1404 Assertion `hdr->length <= ...' failed" on
# 1.13; a segmentation fault on 1.18). wstream-bench starts the
# wstream-agent beside its own executable, so the bench is copied next to
# a wrapper agent that sets its own value (AGENT_SEG); without the tcp
# floor beside it, so it runs with --floor=no.
set -uo pipefail

if [ "$#" -ne 2 ]; then
    echo "usage: $0 BENCH AGENT" >&2
    exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/wst-seg.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
cp "$1" "$work/wstream-bench"
agent=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
cat >"$work/wstream-agent" <<WRAP
#!/bin/sh
if [ -n "\${AGENT_SEG:-}" ]; then
    UCX_TCP_RX_SEG_SIZE=\$AGENT_SEG
    export UCX_TCP_RX_SEG_SIZE
else
    unset UCX_TCP_RX_SEG_SIZE
fi
exec "$agent" "\$@"
WRAP
chmod +x "$work/wstream-agent"
fail() { echo "tcp_segments: FAIL: $*" >&2; exit 1; }
bench() { # bench LOG: one small tcp refit
    timeout 120 "$work/wstream-bench" --transport tcp --size 16m --layers 2 \
        --repeats 1 --lanes 1 --perftest=no --floor=no --timeout 30 >"$1" 2>&1
}

# 1. Sender 1 MiB, agent 64 KiB, both set: refused, the agent alive.
UCX_TCP_RX_SEG_SIZE=1m AGENT_SEG=64k bench "$work/big.txt"
rc=$?
grep -E "Assertion|Caught signal" "$work/big.txt" &&
    fail "a UCX abort with a larger sender segment (above)"
[ "$rc" -eq 1 ] || fail "larger sender segment: bench exit $rc, want 1"
grep -q "sender .*its UCX tcp segments (1048576 bytes, UCX_TCP_RX_SEG_SIZE) exceed this agent's (65536)" "$work/big.txt" ||
    { cat "$work/big.txt"; fail "the agent did not say why it refused the sender"; }
grep -q "receiver reports: its UCX tcp segments (1048576 bytes" "$work/big.txt" ||
    { cat "$work/big.txt"; fail "the sender did not hear why"; }
echo "tcp_segments: a 1 MiB sender refused by a 64 KiB agent, with the reason"

# 2. The sender's segment left to wstream, the agent's 64 KiB: wstream's
#    own choice must not get past the check either.
ucx=$(ldd "$agent" | awk '/libucp\.so/ {print $3; exit}')
AGENT_SEG=64k bench "$work/default.txt"
rc=$?
grep -E "Assertion|Caught signal" "$work/default.txt" &&
    fail "a UCX abort with the sender's default segment (above)"
if grep -q "exceed this agent's (65536)" "$work/default.txt"; then
    [ "$rc" -eq 1 ] || fail "default sender segment: bench exit $rc, want 1"
    echo "tcp_segments: wstream's own 1 MiB segment refused by a 64 KiB agent"
else
    # A UCX whose key wstream does not know keeps its 64 KiB: it refits.
    [ "$rc" -eq 0 ] || { cat "$work/default.txt"; fail "default sender segment: bench exit $rc ($ucx)"; }
    echo "tcp_segments: this UCX ($ucx) keeps its 64 KiB segments; refit passed"
fi

# 3. Sender 64 KiB, agent left to wstream: smaller fragments fit.
UCX_TCP_RX_SEG_SIZE=64k bench "$work/small.txt"
rc=$?
[ "$rc" -eq 0 ] || { cat "$work/small.txt"; fail "smaller sender segment: bench exit $rc, want 0"; }
grep -q "verified=yes" "$work/small.txt" ||
    { cat "$work/small.txt"; fail "smaller sender segment: not verified"; }
echo "tcp_segments: a 64 KiB sender refits into a larger-segment agent, verified"

# 4. Sender 1 MiB, agent left to wstream: where wstream sets 1 MiB itself
#    (case 2 refused), the agent must really run it, or the sender's 1 MiB
#    fragments would abort it (the key that sets it differs between UCX
#    versions: common/lanes.h).
if grep -q "exceed this agent's (65536)" "$work/default.txt"; then
    UCX_TCP_RX_SEG_SIZE=1m bench "$work/set.txt"
    rc=$?
    grep -E "Assertion|Caught signal" "$work/set.txt" &&
        fail "the agent's own 1 MiB segment is not what its UCX runs (above)"
    [ "$rc" -eq 0 ] || { cat "$work/set.txt"; fail "1 MiB sender into wstream's default agent: bench exit $rc, want 0"; }
    grep -q "verified=yes" "$work/set.txt" ||
        { cat "$work/set.txt"; fail "1 MiB sender into wstream's default agent: not verified"; }
    echo "tcp_segments: a 1 MiB sender refits into an agent on wstream's 1 MiB, verified"
fi

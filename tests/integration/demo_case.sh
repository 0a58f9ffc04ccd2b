#!/usr/bin/env bash
# demo_case.sh - one wstream-demo run as an integration test.
#
# usage: demo_case.sh DEMO EXPECT_LANES FORBID_LANES [DEMO ARGS...]
#
# Passes only when the demo exits 0, its summary line says "every byte
# verified", the lanes it reports match the extended regex EXPECT_LANES and
# do not match FORBID_LANES ("-": no forbidden pattern), and the mover it
# reports is the one asked for: the value of --mover when given, else
# $EXPECT_MOVER when set; with $EXPECT_DATA_LANES=N, agent 0 has N data
# lanes and every one of them carried bytes of the last refit.
set -euo pipefail

if [ "$#" -lt 3 ]; then
    echo "usage: $0 DEMO EXPECT_LANES FORBID_LANES [DEMO ARGS...]" >&2
    exit 2
fi
demo=$1
expect=$2
forbid=$3
shift 3

want_mover=${EXPECT_MOVER:-}
prev=
for arg in "$@"; do
    if [ "$prev" = "--mover" ] && [ "$arg" != "auto" ]; then
        want_mover=$arg
    fi
    case $arg in --mover=*) want_mover=${arg#--mover=} ;; esac
    prev=$arg
done

echo "demo_case: $demo $*"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
"$demo" "$@" >"$out" 2>&1 || rc=$?
cat "$out"

fail() {
    echo "demo_case: FAIL: $*" >&2
    exit 1
}

[ "$rc" -eq 0 ] || fail "demo exited with status $rc"
summary=$(grep -E '^wstream-demo: .*, lanes ' "$out" | tail -n 1 || true)
[ -n "$summary" ] || fail "no summary line in the demo output"
case $summary in
*": every byte verified") ;;
*) fail "summary does not say every byte verified: $summary" ;;
esac

# "..., mover M, lanes L: every byte verified"
if [ -n "${EXPECT_DATA_LANES:-}" ]; then
    n=$EXPECT_DATA_LANES
    grep -Eq "^wstream-demo: agent 0: $n data lanes, $n carried the last refit" \
        "$out" || fail "agent 0 did not use all $n data lanes"
fi

mover=$(sed -E 's/.*, mover ([^,]*), lanes .*/\1/' <<<"$summary")
lanes=$(sed -E 's/.*, lanes (.*): every byte verified$/\1/' <<<"$summary")
echo "demo_case: mover '$mover', lanes '$lanes'"

grep -Eq -- "$expect" <<<"$lanes" ||
    fail "lanes '$lanes' do not match '$expect'"
if [ "$forbid" != "-" ] && grep -Eq -- "$forbid" <<<"$lanes"; then
    fail "lanes '$lanes' match the forbidden '$forbid'"
fi
if [ -n "$want_mover" ] && [ "$mover" != "$want_mover" ]; then
    fail "mover '$mover', expected '$want_mover'"
fi
echo "demo_case: PASS"

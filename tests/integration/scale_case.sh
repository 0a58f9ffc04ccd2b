#!/usr/bin/env bash
# scale_case.sh - the scale test (issue 21 item 1): one wstream-demo run
# with many sender and agent processes, checked on what it must prove.
#
# usage: scale_case.sh DEMO [DEMO ARGS...]
#
# Passes only when the demo exits 0, its summary says every byte of every
# version verified, every agent's status says it committed the last
# version, and the --csv row it appended has every column of the header,
# verified 1, a connect time and a plan time per agent, at least two
# control messages per sender-agent pair and refit, and manifest bytes
# held by the agents. The row and the
# "scale:" lines are printed for the log.
set -euo pipefail

if [ "$#" -lt 1 ]; then
    echo "usage: $0 DEMO [DEMO ARGS...]" >&2
    exit 2
fi
demo=$1
shift

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
csv=$dir/scale.csv
out=$dir/out
echo "scale_case: $demo $* --csv $csv"
rc=0
"$demo" "$@" --csv "$csv" >"$out" 2>&1 || rc=$?
cat "$out"

fail() {
    echo "scale_case: FAIL: $*" >&2
    exit 1
}

[ "$rc" -eq 0 ] || fail "demo exited with status $rc"
grep -Eq '^wstream-demo: .*: every byte verified$' "$out" ||
    fail "the summary does not say every byte verified"
line=$(grep -E '^scale: [0-9]+ of [0-9]+ agents committed version [0-9]+$' \
    "$out" || true)
[ -n "$line" ] || fail "no commit line"
read -r _ got _ all _ <<<"$line"
[ "$got" = "$all" ] || fail "not every agent committed: $line"
[ -f "$csv" ] || fail "no CSV written"
[ "$(wc -l <"$csv")" -eq 2 ] || fail "the CSV should hold a header and a row"
cat "$csv"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; n = NF; next }
    NF != n { print "row has " NF " columns, header " n; exit 1 }
    $col["verified"] != 1 { print "verified is not 1"; exit 1 }
    !($col["connect_s"] > 0) { print "no connect time"; exit 1 }
    !($col["plan_ms_max"] > 0) { print "no plan time"; exit 1 }
    !($col["first_refit_s"] > 0) { print "no refit time"; exit 1 }
    # every sender-agent pair exchanges several control messages a refit,
    # and every agent holds the manifests of all senders
    $col["refits"] > 1 &&
    !($col["ctl_msgs_per_refit"] >= 2 * $col["senders"] * $col["receivers"]) {
        print "too few control messages counted"; exit 1 }
    !($col["agent_manifest_kb_per_sender"] > 0) {
        print "no manifest bytes"; exit 1 }' "$csv" ||
    fail "the CSV row is not complete"
echo "scale_case: PASS"

#!/bin/bash
# tests/fault/run-campaign.sh OUT_DIR [DEPS_DIR] [CAMPAIGN_ARGS...] - builds
# wstream (no CUDA) and runs wstream-campaign with CAMPAIGN_ARGS on a bigger
# machine than a laptop, e.g. the lent GPU host for the 1,000-trial run:
#
#   tests/fault/run-campaign.sh $OUT .gpudeps --trials 500 --seed 7 --jobs 12
#
# DEPS_DIR is tests/gpu/fetch-deps.sh's folder, for a machine without the
# build's dependencies ("" when it has them). The campaign's JSON summary
# goes to OUT_DIR/campaign.json, its output to OUT_DIR/campaign.txt, the
# build's to OUT_DIR/build.txt; the workdirs of failed trials are packed
# into OUT_DIR/failed.tar.gz. Exit status: the campaign's.
set -u
out=${1:?usage: tests/fault/run-campaign.sh OUT_DIR [DEPS_DIR] [CAMPAIGN_ARGS...]}
deps=${2:-}
shift 2 || shift $#
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${WST_CAMPAIGN_BUILD:-$root/build-campaign}
mkdir -p "$out"
if [ -n "$deps" ]; then
    # shellcheck source=tests/gpu/deps-env.sh
    . "$root/tests/gpu/deps-env.sh" "$deps" "$out/build.txt"
fi
if ! { cmake -S "$root" -B "$build" -DWST_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       cmake --build "$build" -j"$(nproc)"; } >>"$out/build.txt" 2>&1; then
    echo "build failed: see build.txt" | tee "$out/campaign.txt"
    exit 1
fi
# Only this run's kept workdirs are packed: older ones are not its failures.
touch "$out/started"
"$build/bin/wstream-campaign" --out "$out/campaign.json" "$@" >"$out/campaign.txt" 2>&1
rc=$?
tail -40 "$out/campaign.txt"
# The campaign keeps a failed trial's workdir, /tmp/wstream-campaign-*.
kept=$(cd /tmp && find . -maxdepth 1 -name 'wstream-campaign-*' \
    -newer "$out/started" -printf '%f\n' 2>/dev/null)
if [ -n "$kept" ]; then
    # shellcheck disable=SC2086
    tar -czf "$out/failed.tar.gz" -C /tmp $kept 2>/dev/null
fi
exit $rc

#!/usr/bin/env bash
# make_corpus.sh - writes the fuzz harnesses' seed corpora (corpus/NAME)
# anew from the project's own test data.
#
# usage: make_corpus.sh BUILD_DIR
#
# BUILD_DIR is an ordinary build (test_codec, wstream-demo). codec: every
# message test_codec round-trips (WST_FUZZ_SEED_DIR); layout: the demo's
# agent layouts (MoE, dense, checkpoint-loader experts) and the
# wstream-send tests' layouts, compacted; safetensors: a small file of
# every dtype, and the malformed files the wstream-send tests refuse that
# are small. Files stay a few KB; the harnesses' own finds are never kept
# here (run.sh merges them into a scratch folder).
set -euo pipefail

if [ "$#" -ne 1 ]; then
    echo "usage: $0 BUILD_DIR" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
helper="$here/../tools/write_safetensors.py"
work=$(mktemp -d "${TMPDIR:-/tmp}/wst-corpus.XXXXXX")
trap 'rm -rf "$work"; rm -f /dev/shm/wst-corpus-$$-*' EXIT

for name in codec layout safetensors; do
    rm -rf "${here:?}/corpus/$name"
    mkdir -p "$here/corpus/$name"
done

WST_FUZZ_SEED_DIR="$here/corpus/codec" "$build/bin/test_codec" >/dev/null 2>&1

compact() { python3 -c 'import json,sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"), separators=(",", ":"))' "$1" "$2"; }

demo() {
    local tag=$1
    shift
    mkdir -p "$work/$tag"
    "$build/bin/wstream-demo" --layers 1 --refits 1 --senders 1 \
        --receivers 2 --workdir "$work/$tag" "$@" >/dev/null
    compact "$work/$tag/agent1.json" "$here/corpus/layout/demo-$tag.json"
}
demo moe --preset tiny-moe
demo dense --preset tiny
demo moe-checkpoint --preset tiny-moe --loader checkpoint
python3 "$helper" write "$work/ck" --case sharded --seed 1
for part in all bottom; do
    python3 "$helper" layout "$work/ck" "$work/l.json" \
        --shm "wst-corpus-$$-$part" --rank 1 --part "$part"
    compact "$work/l.json" "$here/corpus/layout/send-$part.json"
done

# The same wants in the engine's GPU memory (cuda_ipc), in regions the
# agent allocates itself, and spread over "allocations" (two shm objects,
# two device segments, one region the agent's): the fuzzer would not spell
# a 128-digit handle.
python3 - "$here/corpus/layout/send-bottom.json" "$here/corpus/layout" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
size = base.pop("shm_bytes")
del base["shm"]
own = json.loads(json.dumps(base))
for r in own["regions"]:
    del r["offset"]
json.dump(own, open(sys.argv[2] + "/send-own.json", "w"), separators=(",", ":"))
spread = json.loads(json.dumps(base))
base.update(cuda_ipc="0123456789abcdef" * 8, cuda_bytes=size, cuda_device=0)
json.dump(base, open(sys.argv[2] + "/send-cuda-ipc.json", "w"),
          separators=(",", ":"))
names = ["host0", "host1", "gpu0", "gpu1"]
ends = dict.fromkeys(names, 0)
for i, r in enumerate(spread["regions"]):
    if i == len(spread["regions"]) - 1:
        del r["offset"]  # the agent's own
        continue
    a = names[i % len(names)]
    r["allocation"], r["offset"] = a, ends[a]
    ends[a] = (ends[a] + r["bytes"] + 63) // 64 * 64
spread["allocations"] = [
    {"name": "host0", "shm": "/wst-corpus-0", "bytes": ends["host0"]},
    {"name": "host1", "shm": "/wst-corpus-1", "bytes": ends["host1"]},
    {"name": "gpu0", "cuda_ipc": "0123456789abcdef" * 8,
     "bytes": ends["gpu0"], "device": 0},
    {"name": "gpu1", "cuda_ipc": "fedcba9876543210" * 8,
     "bytes": ends["gpu1"]}]
json.dump(spread, open(sys.argv[2] + "/send-allocations.json", "w"),
          separators=(",", ":"))
PY

python3 - "$helper" "$here/corpus/safetensors/every-dtype.safetensors" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("w", sys.argv[1])
w = importlib.util.module_from_spec(spec)
spec.loader.exec_module(w)
# The tests' tensors, shrunk to a few elements each.
entries = []
for name, dtype, shape in w.TENSORS:
    shape = [min(d, 3) for d in shape]
    entries.append((name, dtype, shape, bytes(w.nbytes(dtype, shape))))
w.write_file(sys.argv[2], w.pack(entries, gap_after="model.layers.1.counts",
                                 metadata={"format": "pt"}))
PY
for kind in tiny truncated offsets-past-eof shape-mismatch overlap \
    unknown-dtype unsupported-dtype bad-json negative-shape duplicate-name; do
    python3 "$helper" bad "$kind" "$here/corpus/safetensors/$kind.safetensors"
done
du -sh "$here/corpus"/*

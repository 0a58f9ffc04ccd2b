#!/usr/bin/env bash
# send_safetensors.sh - wstream-send against real wstream-agent processes.
#
# usage: send_safetensors.sh CASE SEND AGENT PYTHON HELPER
#
# CASE is one of:
#   single    one file of every dtype (odd shapes, a scalar, an empty
#             tensor, a gap between tensors) into one agent;
#   sharded   three shards and their index into two agents, each wanting a
#             different half of the rows of every 2-D+ tensor;
#   reload    version 1, then version 2 with other bytes (hot reload), then
#             version 2 again (refused, version 2 stays);
#   refusals  malformed checkpoints are refused with their message and exit
#             status before anything connects; a dtype or shape the agent
#             does not want, or a tensor it wants missing, is refused by the
#             agent; its memory stays untouched and it still takes version 1
#             afterwards;
#   limits    a 72 MB header and one of too many tensors are refused
#             within 2 s, before anything connects;
#   dry_run   --dry-run, --help, --print-config, usage errors;
#   progress  progress lines without a terminal, --progress bar / none,
#             --log-format json;
#   moe       per-expert Hugging Face MoE tensors (two layers, an index of
#             two shards) into two agents that want the grouped expert
#             tensors: one layer through an "experts" entry (trtllm-bf16
#             on one agent, checkpoint on the other), one as dense boxes
#             across experts; two versions, every byte checked against a
#             numpy reference the helper builds from the files;
#   unwanted  a tensor no agent wants is named once per version in the
#             sender's info log (two agents leaving it out: still once),
#             and no such line when every tensor is wanted;
#   moe_refusals  per-expert sets wstream-send refuses before anything
#             connects (a missing expert, the last one missing, another
#             shape, another dtype, grouped and per-expert tensors of one
#             layer), then the good checkpoint refits.
# The agents' live memory is a POSIX shm object this script creates
# (poisoned); HELPER (tests/tools/write_safetensors.py) writes checkpoints
# and layouts and checks the shm bytes against the checkpoint, reading both
# on its own.
set -euo pipefail

if [ "$#" -ne 5 ]; then
    echo "usage: $0 CASE SEND AGENT PYTHON HELPER" >&2
    exit 2
fi
case=$1
send=$2
agent=$3
py=$4
helper=$5

work=$(mktemp -d "${TMPDIR:-/tmp}/wst-send.XXXXXX")
tag="wst-send-$$-$case"
pids=()

cleanup() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -f /dev/shm/"$tag"-*
    rm -rf "$work"
}
trap cleanup EXIT

# One deployment secret for every agent and wstream-send of the case: both
# take WST_AUTH_SECRET_FILE as --auth-secret-file's default.
(umask 077 && head -c 32 /dev/urandom > "$work/secret")
export WST_AUTH_SECRET_FILE="$work/secret"

say() { echo "send[$case]: $*"; }
fail() {
    echo "send[$case]: FAIL: $*" >&2
    for log in "$work"/agent-*.log; do
        [ -f "$log" ] && { echo "--- $log" >&2; tail -n 20 "$log" >&2; }
    done
    exit 1
}

helper() { "$py" "$helper" "$@"; }

# start_agent NAME CKPT PART: a layout wanting PART of CKPT, and an agent
# serving it; sets $port.
start_agent() {
    local name=$1 ckpt=$2 part=$3 rank=${4:-0}
    helper layout "$ckpt" "$work/layout-$name.json" --shm "$tag-$name" \
        --rank "$rank" --part "$part" || fail "layout $name"
    rm -f "$work/port-$name"
    "$agent" --layout "$work/layout-$name.json" --listen 127.0.0.1:0 \
        --port-file "$work/port-$name" --status-file "$work/status-$name.json" \
        --log-level info >"$work/agent-$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do
        [ -s "$work/port-$name" ] && break
        kill -0 "${pids[-1]}" 2>/dev/null || fail "agent $name exited"
        sleep 0.05
    done
    [ -s "$work/port-$name" ] || fail "agent $name wrote no port"
    port=$(cat "$work/port-$name")
}

# run_send EXPECT OUT ARGS...: runs wstream-send with stdout and stderr in
# OUT; its exit status must be EXPECT.
run_send() {
    local want=$1 out=$2 rc=0
    shift 2
    "$send" "$@" >"$out" 2>&1 || rc=$?
    sed 's/^/    | /' "$out"
    [ "$rc" -eq "$want" ] || fail "wstream-send $* exited $rc, expected $want"
}

# expect OUT PATTERN...: every extended regex matches a line of OUT.
expect() {
    local out=$1
    shift
    for p in "$@"; do
        grep -Eq -- "$p" "$out" || fail "no line of $(basename "$out") matches '$p'"
    done
}

# committed NAME VERSION: the agent's status file says VERSION (it is
# written just after the commit the sender already saw).
committed() {
    local f="$work/status-$1.json"
    for _ in $(seq 100); do
        grep -q "\"committed_version\": $2," "$f" 2>/dev/null && return 0
        sleep 0.05
    done
    fail "agent $1 did not report version $2 committed: $(cat "$f")"
}

verify() { helper verify "$@" || fail "verify $*"; }

case_single() {
    helper write "$work/ck" --case single --seed 11
    start_agent a "$work/ck" all
    run_send 0 "$work/out" "$work/ck/model.safetensors" \
        --receivers "127.0.0.1:$port" --weights-version 1 --progress none
    expect "$work/out" \
        "^wstream-send: version 1 committed by 1 receiver: 14 tensors, 4.24 MB in [0-9.]+ s; 4.24 MB moved, [0-9.]+ GB/s$"
    committed a 1
    verify "$work/ck" "$work/layout-a.json"
    # A label that breaks the rule is bad usage: refused before anything
    # connects, naming the byte.
    run_send 2 "$work/out" "$work/ck/model.safetensors" \
        --receivers "127.0.0.1:$port" --weights-version 2 --label "step 2"
    expect "$work/out" '^wstream-send: --label: label "step\?2": byte 4 is 0x20'
    # A labeled version: the line names it, the agent keeps it.
    run_send 0 "$work/out" "$work/ck/model.safetensors" \
        --receivers "127.0.0.1:$port" --weights-version 2 --label ckpt-2@9f3c \
        --progress none
    expect "$work/out" "^wstream-send: version 2 \(ckpt-2@9f3c\) committed by 1 receiver"
    committed a 2
    grep -q '"committed_label": "ckpt-2@9f3c"' "$work/status-a.json" ||
        fail "the agent's status does not name the label: $(cat "$work/status-a.json")"
}

case_sharded() {
    helper write "$work/ck" --case sharded --seed 21
    start_agent top "$work/ck" top 0
    local top=$port
    start_agent bottom "$work/ck" bottom 1
    local bottom=$port
    run_send 0 "$work/out" --receivers "127.0.0.1:$top,127.0.0.1:$bottom" \
        --weights-version 1 --progress lines "$work/ck"
    expect "$work/out" "version 1 committed by 2 receivers: 14 tensors" \
        "127.0.0.1:$top: committed" "127.0.0.1:$bottom: committed"
    committed top 1
    committed bottom 1
    verify "$work/ck" "$work/layout-top.json"
    verify "$work/ck" "$work/layout-bottom.json"
    # The index file itself names the same checkpoint.
    run_send 0 "$work/out" --receivers "127.0.0.1:$top,127.0.0.1:$bottom" \
        --weights-version 2 --progress none \
        --checkpoint "$work/ck/model.safetensors.index.json"
    committed top 2
    committed bottom 2
}

case_reload() {
    helper write "$work/ck" --case single --seed 31
    start_agent a "$work/ck" all
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$port" \
        --weights-version 1 --progress none
    committed a 1
    verify "$work/ck" "$work/layout-a.json"
    cp "$work/ck/model.safetensors" "$work/v1.safetensors"
    # Version 2: same tensors, every byte redrawn (a new file, as a trainer
    # writes one: the agent's memory must change from v1 to v2).
    helper write "$work/ck" --case single --seed 32
    cmp -s "$work/ck/model.safetensors" "$work/v1.safetensors" &&
        fail "version 2's checkpoint equals version 1's"
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$port" \
        --weights-version 2 --progress none
    expect "$work/out" "version 2 committed by 1 receiver"
    committed a 2
    verify "$work/ck" "$work/layout-a.json"
    if helper verify "$work/v1.safetensors" "$work/layout-a.json" >/dev/null; then
        fail "the agent still holds version 1's bytes"
    fi
    # The same version again: the agent refuses it and keeps version 2.
    helper write "$work/ck3" --case single --seed 33
    run_send 28 "$work/out" "$work/ck3" --receivers "127.0.0.1:$port" \
        --weights-version 2 --progress none
    expect "$work/out" "version 2 not committed: .*version 2 is not above 2"
    verify "$work/ck" "$work/layout-a.json"
}

# refuse STATUS PATTERN PATH: wstream-send refuses PATH with exit STATUS, a
# message matching PATTERN, and says nothing was sent.
refuse() {
    local want=$1 pattern=$2 path=$3
    run_send "$want" "$work/out" "$path" --receivers "127.0.0.1:$port" \
        --weights-version 1
    expect "$work/out" "$pattern" "nothing was sent$"
    # Refused before connecting: the agent never heard from a sender.
    if grep -q "sender .* connected\|begin version" "$work/agent-a.log"; then
        fail "the agent saw a sender for $(basename "$path")"
    fi
}

case_refusals() {
    helper write "$work/ck" --case single --seed 41
    start_agent a "$work/ck" all
    local b="$work/bad"
    mkdir -p "$b"
    for k in tiny header-past-eof truncated offsets-past-eof shape-mismatch \
        overlap unknown-dtype unsupported-dtype bad-json negative-shape \
        duplicate-name; do
        helper bad "$k" "$b/$k.safetensors"
    done
    for k in index-missing-shard index-dotdot index-absolute \
        index-wrong-shard index-duplicate; do
        helper bad "$k" "$b/$k"
    done
    refuse 8 "tiny.safetensors: truncated: 5 bytes" "$b/tiny.safetensors"
    refuse 8 "header-past-eof.safetensors: header length [0-9]+ runs past the end of the file \(40 bytes\)" \
        "$b/header-past-eof.safetensors"
    refuse 8 "truncated.safetensors: tensor 'b.weight': data_offsets \[24, 34\] run past the end" \
        "$b/truncated.safetensors"
    refuse 8 "offsets-past-eof.safetensors: tensor 'b.weight': data_offsets \[24, 44\] run past the end" \
        "$b/offsets-past-eof.safetensors"
    refuse 8 "shape-mismatch.safetensors: tensor 'a.weight': shape and dtype F32 make 32 bytes, but data_offsets \[0, 24\] hold 24" \
        "$b/shape-mismatch.safetensors"
    refuse 8 "overlap.safetensors: tensors 'a.weight' \[0, 24\] and 'b.weight' \[20, 30\] overlap" \
        "$b/overlap.safetensors"
    refuse 23 "unknown-dtype.safetensors: tensor 'b.weight': unknown dtype \"Q4_K\"" \
        "$b/unknown-dtype.safetensors"
    refuse 23 "unsupported-dtype.safetensors: tensor 'b.weight': dtype I16 has no wstream equivalent" \
        "$b/unsupported-dtype.safetensors"
    refuse 8 "bad-json.safetensors: the header is not valid JSON" \
        "$b/bad-json.safetensors"
    refuse 8 "negative-shape.safetensors: tensor 'b.weight': \"shape\" holds a negative value" \
        "$b/negative-shape.safetensors"
    refuse 8 "duplicate-name.safetensors: tensor 'a.weight' is listed twice in the header" \
        "$b/duplicate-name.safetensors"
    refuse 15 "index-missing-shard/s3.safetensors: cannot open: No such file or directory \(named by the index" \
        "$b/index-missing-shard"
    refuse 8 "tensor 'b.weight' names shard \"\.\./s2.safetensors\", which is not a plain file name" \
        "$b/index-dotdot"
    refuse 8 "tensor 'b.weight' names shard \"/.*/s2.safetensors\", which is not a plain file name" \
        "$b/index-absolute"
    refuse 8 "puts tensor 'b.weight' in s1.safetensors, which does not hold it" \
        "$b/index-wrong-shard"
    refuse 8 "tensor 'a.weight' is in two shards: .*/s1.safetensors and .*/s2.safetensors" \
        "$b/index-duplicate"
    verify "$work/ck" "$work/layout-a.json" --poison
    grep -q '"committed_version": 0,' "$work/status-a.json" ||
        fail "the agent committed something: $(cat "$work/status-a.json")"
    # A good file with a dtype the agent does not want: the agent refuses
    # the plan, before any byte is written.
    helper write "$work/retyped" --case single --seed 41 --variant retype
    run_send 12 "$work/out" "$work/retyped" --receivers "127.0.0.1:$port" \
        --weights-version 1 --progress none
    expect "$work/out" "version 1 not committed: dtype mismatch: .*tensor model.norm.weight: sender 0 has dtype f16, want f32"
    verify "$work/ck" "$work/layout-a.json" --poison
    # The same for a shape, and for a tensor the agent wants but the
    # checkpoint lacks.
    helper write "$work/reshaped" --case single --seed 41 --variant reshape
    run_send 13 "$work/out" "$work/reshaped" --receivers "127.0.0.1:$port" \
        --weights-version 1 --progress none
    expect "$work/out" "version 1 not committed: shape mismatch: .*tensor lm_head.weight: sender 0 has shape \[19, 37\], want \[37, 19\]"
    helper write "$work/dropped" --case single --seed 41 --variant drop
    run_send 14 "$work/out" "$work/dropped" --receivers "127.0.0.1:$port" \
        --weights-version 1 --progress none
    expect "$work/out" "version 1 not committed: coverage gap: .*tensor lm_head.weight: no sender has"
    verify "$work/ck" "$work/layout-a.json" --poison
    # Still usable: the good checkpoint goes in as version 1.
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$port" \
        --weights-version 1 --progress none
    committed a 1
    verify "$work/ck" "$work/layout-a.json"
}

# refuse_fast STATUS PATTERN PATH: refuse, within 2 s of wall time.
refuse_fast() {
    local t0 ms
    t0=$(date +%s%N)
    refuse "$@"
    ms=$((($(date +%s%N) - t0) / 1000000))
    say "$(basename "$3") refused in $ms ms"
    [ "$ms" -lt 2000 ] || fail "$(basename "$3") took $ms ms to refuse"
}

case_limits() {
    helper write "$work/ck" --case single --seed 71
    start_agent a "$work/ck" all
    local b="$work/bad"
    mkdir -p "$b"
    helper bad huge-header "$b/huge-header.safetensors"
    helper bad many-tensors "$b/many-tensors.safetensors"
    # 1,048,577 tensors in a 72 MB header: refused by its length field
    # before the file is mapped (it took 1.66 GB and 10-19 s to refuse).
    refuse_fast 25 "huge-header.safetensors: header length 73275331 is over the limit of 33554432 bytes" \
        "$b/huge-header.safetensors"
    # 262,145 tensors in 15 MB: refused while counting, before anything is
    # allocated for them.
    refuse_fast 25 "many-tensors.safetensors: the header lists more than 262144 tensors" \
        "$b/many-tensors.safetensors"
    # 1,048,577 tensors over five shards: refused as the last one opens.
    helper bad index-too-many "$b/index-too-many"
    refuse 25 "index-too-many/model.safetensors.index.json: its shards hold more than 1048576 tensors, the limit \(counted up to s4.safetensors\)" \
        "$b/index-too-many"
    verify "$work/ck" "$work/layout-a.json" --poison
}

case_dry_run() {
    helper write "$work/ck" --case sharded --seed 51
    # Port 9 (discard) on the loopback: nothing may connect to it.
    run_send 0 "$work/out" "$work/ck" --dry-run --receivers 127.0.0.1:9 \
        --weights-version 5
    expect "$work/out" "checkpoint .*: 3 files, index .*model.safetensors.index.json" \
        "tensors: 14 to send, 1 with no elements \(not sent\), 1 0-dim \(sent as shape \[1\]\)" \
        "bytes: 4240324 \(4.24 MB\)" "layers: 3, and the global tensors" \
        "dtype bf16 \(BF16\): 3 tensors, 4236098 bytes" \
        "dtype fp8_e5m2 \(F8_E5M2\): 1 tensor, 551 bytes" \
        "dtype i64 \(I64\): 1 tensor, 120 bytes" \
        "dry run: the checkpoint is good; nothing was sent"
    grep -q "layer .* started\|committed" "$work/out" && fail "a dry run sent"
    # No receivers or version needed for a dry run.
    run_send 0 "$work/out" --dry-run --checkpoint "$work/ck"
    # A bad checkpoint fails the dry run the same way.
    helper bad overlap "$work/overlap.safetensors"
    run_send 8 "$work/out" --dry-run "$work/overlap.safetensors"
    expect "$work/out" "overlap"
    run_send 0 "$work/out" --help
    expect "$work/out" "^usage: wstream-send" "--receivers" "--progress" \
        "--dry-run" "--log-format"
    WST_WEIGHTS_VERSION=7 run_send 0 "$work/out" "$work/ck" --receivers h:1 \
        --print-config
    expect "$work/out" "^weights-version = 7$" "^receivers = h:1$" \
        "^checkpoint = $work/ck$"
    run_send 2 "$work/out" "$work/ck" --receivers 127.0.0.1:9
    expect "$work/out" "--receivers and --weights-version \(> 0\) are required"
    run_send 2 "$work/out" "$work/ck" --receivers 127.0.0.1:9,nope \
        --weights-version 1
    expect "$work/out" "--receivers: bad value '127.0.0.1:9,nope'"
    run_send 2 "$work/out" --receivers 127.0.0.1:9 --weights-version 1
    expect "$work/out" "no checkpoint given"
    run_send 2 "$work/out" "$work/ck" extra --receivers 127.0.0.1:9
    expect "$work/out" "unexpected argument 'extra'"
    run_send 2 "$work/out" "$work/ck" --progress sometimes
    expect "$work/out" "progress"
    run_send 2 "$work/out" "$work/ck" --dry-run --lanes 9
    expect "$work/out" "--lanes: 9 is not in 0\.\.8"
    # --version alone is the program's version (before or after other
    # flags and the operand); its old meaning, "--version N" with a number
    # and "--version=N", still sets --weights-version, with a warning.
    run_send 0 "$work/out" --version
    [ "$(cat "$work/out")" = "wstream-send $WSTREAM_PROJECT_VERSION" ] ||
        fail "--version printed '$(cat "$work/out")'"
    run_send 0 "$work/out" "$work/ck" --receivers h:1 --version
    [ "$(cat "$work/out")" = "wstream-send $WSTREAM_PROJECT_VERSION" ] ||
        fail "--version after the operand printed '$(cat "$work/out")'"
    run_send 0 "$work/out" --version "$work/ck" --print-config
    [ "$(cat "$work/out")" = "wstream-send $WSTREAM_PROJECT_VERSION" ] ||
        fail "--version before the operand printed '$(cat "$work/out")'"
    run_send 0 "$work/out" "$work/ck" --receivers h:1 --version 12 \
        --print-config
    expect "$work/out" "^wstream-send: warning: --version N is deprecated, use --weights-version N$" \
        "^weights-version = 12$"
    run_send 0 "$work/out" "$work/ck" --receivers h:1 --version=13 \
        --print-config
    expect "$work/out" "^wstream-send: warning: --version=N is deprecated, use --weights-version=N$" \
        "^weights-version = 13$"
    run_send 2 "$work/out" "$work/ck" --receivers h:1 --version=x
    expect "$work/out" "--weights-version"
}

case_progress() {
    helper write "$work/ck" --case single --seed 61
    start_agent a "$work/ck" all
    # stderr is a file here: auto means lines.
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$port" \
        --weights-version 1
    expect "$work/out" \
        "^wstream-send: version 1: 127.0.0.1:$port: layer 0 \(1/4\) started at 0%$" \
        "^wstream-send: version 1: 127.0.0.1:$port: layer 2 \(3/4\) started at 0%$" \
        "^wstream-send: version 1: 127.0.0.1:$port: global tensors \(4/4\) started at 99%$" \
        "^wstream-send: version 1: 127.0.0.1:$port: committed \(100%\)$"
    committed a 1
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$port" \
        --weights-version 2 --progress bar
    grep -q $'\r''version 2 \[#*\.*\] *[0-9]*%' "$work/out" ||
        fail "--progress bar drew no bar"
    grep -q 'version 2 \[##############################\] 100%  layer 4/4' \
        "$work/out" || fail "--progress bar did not end at 100%"
    grep -q "started at" "$work/out" && fail "--progress bar printed lines"
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$port" \
        --weights-version 3 --progress none
    [ "$(wc -l <"$work/out")" -eq 1 ] || fail "--progress none printed more than the summary"
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$port" \
        --weights-version 4 --log-format json
    expect "$work/out" \
        '^\{"ts":[0-9.]+,"level":"info","component":"send","msg":"version 4: 127.0.0.1:[0-9]+: layer 0 \(1/4\) started at 0%"\}$'
    committed a 4
    verify "$work/ck" "$work/layout-a.json"
}

case_moe() {
    helper write "$work/ck" --case moe --seed 81
    start_agent a "$work/ck" moe-a 0
    local pa=$port
    start_agent b "$work/ck" moe-b 1
    local pb=$port
    run_send 0 "$work/out" "$work/ck" --dry-run
    expect "$work/out" "tensors: 25 to send" \
        "experts: 21 per-expert tensors of 2 layers, sent as slices of 6 grouped tensors"
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$pa,127.0.0.1:$pb" \
        --weights-version 1 --progress none
    expect "$work/out" "version 1 committed by 2 receivers: 25 tensors"
    committed a 1
    committed b 1
    verify "$work/ck" "$work/layout-a.json"
    verify "$work/ck" "$work/layout-b.json"
    # Version 2: every byte redrawn; the agents' plans are replayed.
    helper write "$work/ck" --case moe --seed 82
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$pa,127.0.0.1:$pb" \
        --weights-version 2 --progress none
    committed a 2
    committed b 2
    verify "$work/ck" "$work/layout-a.json"
    verify "$work/ck" "$work/layout-b.json"
}

case_moe_refusals() {
    helper write "$work/ck" --case moe --seed 91
    start_agent a "$work/ck" moe-a 0
    for v in drop-expert drop-last reshape-expert retype-expert both; do
        helper write "$work/$v" --case moe --seed 91 --variant "$v"
    done
    refuse 8 "layer 0 down_proj: expert 2 is missing: no tensor 'model.layers.0.mlp.experts.2.down_proj.weight' \(the layer has experts up to 3\)" \
        "$work/drop-expert"
    refuse 8 "layer 1 up_proj: expert 2 is missing: no tensor 'model.layers.1.mlp.experts.2.up_proj.weight'" \
        "$work/drop-last"
    refuse 8 "layer 1 gate_proj: 'model.layers.1.mlp.experts.1.gate_proj.weight' has shape \[7, 5\] but 'model.layers.1.mlp.experts.0.gate_proj.weight' has \[5, 7\]" \
        "$work/reshape-expert"
    refuse 8 "layer 1 experts: 'model.layers.1.mlp.experts.1.down_proj.weight' is f16 but 'model.layers.1.mlp.experts.0.gate_proj.weight' is f32" \
        "$work/retype-expert"
    refuse 8 "layer 1: the checkpoint holds both the grouped tensor 'model.layers.1.mlp.experts.up_proj.weight' and per-expert tensors" \
        "$work/both"
    verify "$work/ck" "$work/layout-a.json" --poison
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$port" \
        --weights-version 1 --progress none
    committed a 1
    verify "$work/ck" "$work/layout-a.json"
}

# Tensors no receiver wants are not sent; the sender says so once per
# version at info, naming them (not once per receiver), and says nothing
# when every tensor is wanted.
case_unwanted() {
    local line="version %s: 1 of 14 registered tensors \\(or slices\\) are wanted by no receiver and not sent: lm_head.weight$"
    helper write "$work/ck" --case sharded --seed 41
    start_agent all "$work/ck" all
    local all=$port
    start_agent b1 "$work/ck" bottom 0
    local b1=$port
    start_agent b2 "$work/ck" bottom 0
    local b2=$port
    run_send 0 "$work/out" "$work/ck" --receivers "127.0.0.1:$all" \
        --version 1 --progress none --log-level info
    committed all 1
    grep -q "wanted by no receiver" "$work/out" &&
        fail "every tensor is wanted, yet the sender logged one unwanted"
    # Two receivers that both leave lm_head.weight out: one line a version.
    for v in 1 2; do
        run_send 0 "$work/out" "$work/ck" \
            --receivers "127.0.0.1:$b1,127.0.0.1:$b2" --version "$v" \
            --progress none --log-level info
        committed b1 "$v"
        committed b2 "$v"
        # shellcheck disable=SC2059
        expect "$work/out" "$(printf "$line" "$v")"
        [ "$(grep -c "wanted by no receiver" "$work/out")" -eq 1 ] ||
            fail "version $v: not exactly one unwanted line"
    done
    verify "$work/ck" "$work/layout-b1.json"
}

SECONDS=0
"case_$case"
say "PASS (${SECONDS} s)"

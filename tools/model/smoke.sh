#!/bin/sh
# smoke.sh - ctest: wstream-model's command line. --help and --version
# answer 0, bad usage 2 (an unknown flag, a layout that does not fit the
# model, --link-from-bench alone), an unreadable file 1; a prediction
# prints every input with its source, the parts, and the key=value line,
# and a CSV of inputs (what the scale test will write) sets what it names.
# usage: smoke.sh WSTREAM_MODEL
model="$1"
tmp=$(mktemp -d /tmp/wst-model-smoke-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "smoke: FAIL: $*" >&2; exit 1; }
expect() { # expect RC ARGS...
    want=$1
    shift
    "$model" "$@" >"$tmp/out" 2>&1
    rc=$?
    cat "$tmp/out"
    [ "$rc" -eq "$want" ] || fail "wstream-model $*: exit $rc, want $want"
}

expect 0 --help
grep -q "^usage: wstream-model" "$tmp/out" || fail "no usage line"
expect 0 --version
grep -Eq "^wstream-model [0-9]+\.[0-9]+\.[0-9]+" "$tmp/out" || fail "no version"
expect 2 --no-such-flag
expect 2 --model deepseek-v3 --inference-tp 8 --inference-ep 7
grep -q "ep 7 must divide the 256 experts" "$tmp/out" || fail "no ep message"
expect 2 --model llama
expect 2 --inference-gpus 100 --inference-tp 8
expect 2 --link-from-bench
expect 1 --bench-csv "$tmp/none.csv"

# Kimi-K2 in FP8, 256 trainer GPUs -> 128 engine GPUs (TP16, EP16, DP8).
expect 0 --model kimi-k2 --dtype fp8 --trainer-gpus 256 --inference-gpus 128 \
    --inference-tp 16 --inference-ep 16 --csv
n=$("$model" --print-config | grep -c ' = ')
rows=$(grep -c '^| [a-z-]* | .* | .* |$' "$tmp/out")
[ "$rows" -ge "$n" ] || fail "$rows input rows, want $n"
grep -q '^| wire-efficiency | 0.94 | default (' "$tmp/out" || fail "no default's source"
grep -q '^| dtype | fp8 | flag |' "$tmp/out" || fail "no flag source"
grep -Eq '^wstream-model: model=kimi-k2 .* steady_s=[0-9.]+ ' "$tmp/out" ||
    fail "no key=value line"
grep -q '^csv,model,dtype' "$tmp/out" || fail "no CSV header"

# A CSV whose columns are named as inputs sets them; a flag still wins.
printf 'plan_items,plan_us_per_item,unrelated\n54812,1.5,x\n' >"$tmp/in.csv"
expect 0 --model deepseek-v3 --inference-tp 32 --inference-gpus 256 \
    --trainer-gpus 256 --inputs-csv "$tmp/in.csv" --plan-us-per-item 2
grep -q "^| plan-items | 54812 | $tmp/in.csv |" "$tmp/out" || fail "plan-items not from the CSV"
grep -q '^| plan-us-per-item | 2 | flag |' "$tmp/out" || fail "the flag lost to the CSV"
grep -q '| 54812 items x 2.00 us |' "$tmp/out" || fail "the CSV's items were not used"
# wstream-demo --csv's columns (the scale test): senders, receivers,
# engine tp and ep, live bytes, the slowest agent's plan and the measured
# steady refit become inputs; an unknown preset is left to --model.
{
    echo "preset,layers,experts,tensors,live_bytes,senders,receivers,trainer_tp,engine_tp,engine_ep,plan_ms_median,plan_ms_max,steady_refit_s,verified"
    echo "deepseek-v3-narrow,61,256,1025,1000000000,32,8,0,8,8,10.0,12.5,0.9,1"
    echo "deepseek-v3-narrow,61,256,1025,2000000000,64,16,0,16,16,20.0,25.0,1.8,1"
} >"$tmp/scale.csv"
expect 0 --model deepseek-v3 --inputs-csv "$tmp/scale.csv"
grep -q "preset \"deepseek-v3-narrow\" is not one of this tool's" "$tmp/out" ||
    fail "no word on the unknown preset"
for kv in "trainer-gpus | 64" "inference-gpus | 16" "inference-tp | 16" \
    "inference-ep | 16" "trainer-tp | 1" "live-bytes | 2000000000" \
    "plan-ms | 25" "measured-s | 1.8" "layers | 61"; do
    grep -q "^| $kv | $tmp/scale.csv |" "$tmp/out" || fail "$kv not from the scale CSV"
done
grep -q "the total is --live-bytes" "$tmp/out" || fail "no word on the given bytes"
grep -q '^| planning (first refit only) | 25.0 | measured |' "$tmp/out" || fail "plan-ms not used"
grep -Eq '^wstream-model: .* measured_s=1.800000 ratio=[0-9.]+$' "$tmp/out" ||
    fail "no ratio to the measured refit"
# The GPU table of tests/gpu/run.sh and a config.json with its index.
{
    echo "| repack trtllm-bf16, DeepSeek-V3 ep=32 layer | 1409.3 | 0.354 | 3976.0 | 94% |"
    echo "| digest 2 GiB as 8k runs | 2145.5 | 1.073 | 1999.0 | 47% |"
    echo "| pinned device-to-host 1 GiB, 8 MiB chunks | 1073.7 | 19.7 | 54.5 | - |"
} >"$tmp/summary.txt"
printf '{"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "vocab_size": 151936, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "moe_intermediate_size": 768}' >"$tmp/config.json"
printf '{"metadata": {"total_size": 61064245248}, "weight_map": {"a": "1", "b": "2"}}' >"$tmp/index.json"
expect 0 --config-json "$tmp/config.json" --index-json "$tmp/index.json" \
    --gpu-summary "$tmp/summary.txt" --inference-tp 8 --inference-gpus 16
grep -q "^| repack-gbps | 1990.5.* | $tmp/summary.txt" "$tmp/out" || fail "repack not from the table"
grep -q "^| copy-gbps | 54.5 | $tmp/summary.txt" "$tmp/out" || fail "copy not from the table"
grep -q "^model qwen3_moe: 48 layers, 18867 tensors, 61.06 GB" "$tmp/out" || fail "config.json's model"
grep -q "total_size 61.06 GB (the model above: 18867 tensors, 61.06 GB)" "$tmp/out" || fail "no index line"
echo "smoke: ok"

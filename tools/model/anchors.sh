#!/bin/sh
# anchors.sh - wstream-model's predictions for the published refits of
# ../shared/ANCHORS.md, as a Markdown table: the floor (bytes at line
# rate), the prediction at the default (measured) efficiencies, and the
# published time. Extra arguments go to every wstream-model call (e.g.
# --bench-csv FILE, --gpu-summary FILE, --wstream-efficiency 1).
# usage: anchors.sh WSTREAM_MODEL [wstream-model flags...]
model="$1"
shift
row() { # row LABEL PUBLISHED ARGS...
    label=$1 published=$2
    shift 2
    line=$("$model" "$@" | grep '^wstream-model: ') || {
        echo "anchors: wstream-model $* failed" >&2
        exit 1
    }
    v() { echo "$line" | sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
    awk -v l="$label" -v p="$published" -v g="$(v gpu_bytes)" \
        -v f="$(v floor_s)" -v s="$(v steady_s)" -v t="$(v first_s)" \
        'BEGIN {printf "| %s | %.1f | %.2f | %.2f | %.2f | %s |\n", l, g / 1e9, f, s, t, p}'
}
echo "| setup (trainer -> engine) | GB into each engine GPU | floor s (line rate) | predicted steady s | predicted first s | published s |"
echo "|---|---|---|---|---|---|"
row "Kimi-K2 FP8, 256 GPUs -> 128 (TP16 EP16 DP8), Perplexity" "1.3" \
    --model kimi-k2 --dtype fp8 --trainer-gpus 256 --inference-gpus 128 \
    --inference-tp 16 --inference-ep 16 "$@"
row "Kimi-K2 FP8, 256 GPUs -> 256 H20 (TP16 x 16), checkpoint-engine" "16.04" \
    --model kimi-k2 --dtype fp8 --trainer-gpus 256 --inference-gpus 256 \
    --inference-tp 16 "$@"
row "DeepSeek-V3 BF16, PP16xEP16 (256) -> TP32xDP8 (256), NeMo-RL" "7.65-9.94" \
    --model deepseek-v3 --trainer-gpus 256 --trainer-pp 16 --trainer-ep 16 \
    --inference-gpus 256 --inference-tp 32 "$@"
row "Qwen3-235B-A22B BF16, TP4xPP8xEP16 (128) -> TP8xDP16 (128), NeMo-RL" "4.56-4.85" \
    --model qwen3-235b-a22b --trainer-gpus 128 --trainer-tp 4 --trainer-pp 8 \
    --trainer-ep 16 --inference-gpus 128 --inference-tp 8 "$@"
row "Qwen3-30B-A3B BF16, EP8xPP2 (16) -> TP8xDP2 (16), NeMo-RL" "0.50-0.51" \
    --model qwen3-30b-a3b --trainer-gpus 16 --trainer-pp 2 --trainer-ep 8 \
    --inference-gpus 16 --inference-tp 8 "$@"

#!/usr/bin/env bash
# demo_no_gpu.sh DEMO_EXPECT DEMO - on a machine without a GPU, the demo's
# --device (engines' memory) and --sender-device (trainer shards) fail at
# once with exit 2 and say why, for one GPU or a list; a malformed list is
# refused before any GPU is looked for. With a GPU this test skips
# (tests/gpu/run.sh runs the device refits there).
set -euo pipefail
if nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: a GPU is present; tests/gpu/run.sh covers --device"
    exit 77
fi
"$1" "$2" 2 "--device needs a CUDA build and a GPU: .+" -- \
    --device 0 --refits 1
"$1" "$2" 2 "--sender-device needs a CUDA build and a GPU: .+" -- \
    --sender-device 0 --refits 1
"$1" "$2" 2 "--device needs a CUDA build and a GPU: .+" -- \
    --device 0,1 --refits 1
"$1" "$2" 2 "--sender-device: bad value '0,x': expected GPU ordinals" -- \
    --sender-device 0,x --refits 1
"$1" "$2" 2 "--device: bad value '0,,1': expected GPU ordinals" -- \
    --device 0,,1 --refits 1
